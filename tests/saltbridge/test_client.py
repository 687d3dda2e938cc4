"""Salt's client API over raetsalt's command protocol, against a scripted master."""

from __future__ import annotations

from typing import Any

import pytest

from raetsalt import protocol as p
from raetsalt.saltbridge.client import LocalClient, RunnerClient


class FakeMaster:
    """Answers each request with scripted bodies (share, fields)."""

    def __init__(self, script: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self.script = script
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.pending: list[dict[str, Any]] = []

    def request(self, share: str, **fields: Any) -> str:
        req = f"r{len(self.requests)}"
        self.requests.append((share, fields))
        for answer_share, body in self.script.pop(0):
            self.pending.append(p.lane_reply(None, "me", answer_share, req=req, **body))
        return req

    def receive(self, timeout: float) -> list[dict[str, Any]]:
        out, self.pending = self.pending, []
        return out


def test_cmd_iter_shapes_kwargs_and_expected_minions() -> None:
    master = FakeMaster([[
        (p.SHARE_PUB_ACK, {"jid": "1", "minions": ["a", "b"], "missing": ["c"]}),
        (p.SHARE_JOB_RET, {"returns": [["a", {"return": True, "retcode": 0}],
                                       ["b", {"return": "x", "retcode": 2, "out": "txt"}]]}),
    ]])
    client = LocalClient(master, {"token": "t"}, timeout=0.01)
    got = list(client.cmd_iter("*", "test.arg", ["one", {"__kwarg__": True, "k": 1}],
                               kwarg={"z": 2}, expect_minions=True))
    assert got == [{"a": {"ret": True, "retcode": 0, "jid": "1"}},
                   {"b": {"ret": "x", "retcode": 2, "jid": "1", "out": "txt"}},
                   {"c": {"failed": True}}]
    share, fields = master.requests[0]
    assert share == p.SHARE_PUBLISH and fields["token"] == "t"
    assert fields["arg"] == ["one", {"__kwarg__": True, "k": 1, "z": 2}]


def test_cmd_and_a_refusal() -> None:
    master = FakeMaster([
        [(p.SHARE_PUB_ACK, {"jid": "1", "minions": ["a"]}),
         (p.SHARE_JOB_RET, {"returns": [["a", {"return": 5}]]})],
        [(p.SHARE_PUB_ACK, {"error": "publish of 'cmd.run' denied: no rule"})],
    ])
    client = LocalClient(master, timeout=1.0)
    assert client.cmd("a", "test.echo", [5]) == {"a": 5}
    salt_exceptions = pytest.importorskip("salt.exceptions")
    with pytest.raises(salt_exceptions.SaltClientError, match="denied: no rule"):
        client.cmd("a", "cmd.run", ["id"])


def test_runner_client() -> None:
    master = FakeMaster([[(p.SHARE_RUN_RET, {"return": ["a"]})],
                         [(p.SHARE_RUN_RET, {"error": "runner 'x.y' denied"})]])
    runner = RunnerClient(master, timeout=1.0)
    assert runner.cmd("manage.up", full_return=True) == {"return": ["a"], "success": True,
                                                          "jid": ""}
    assert runner.cmd("x.y", full_return=True)["success"] is False


def test_a_job_still_running_is_waited_for() -> None:
    master = FakeMaster([
        [(p.SHARE_PUB_ACK, {"jid": "7", "minions": ["a"]})],
        # find_job: a still runs job 7; then its return comes
        [(p.SHARE_PUB_ACK, {"jid": "8", "minions": ["a"]}),
         (p.SHARE_JOB_RET, {"returns": [["a", {"return": {"jid": "7"}}]]})],
        [(p.SHARE_PUB_ACK, {"jid": "9", "minions": ["a"]}),
         (p.SHARE_JOB_RET, {"returns": [["a", {"return": {}}]]})],
    ])
    client = LocalClient(master, timeout=0.01)
    assert client.cmd("a", "state.apply") == {}
    assert [fields["fun"] for _share, fields in master.requests] == [
        "state.apply", "saltutil.find_job", "saltutil.find_job"]
    assert master.requests[1][1]["arg"] == ["7"] and master.requests[1][1]["tgt"] == ["a"]
