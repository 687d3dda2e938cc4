"""``MasterLink`` reading the master's answers: what arrives together with an
acknowledgement in the same read belongs to the publication, never dropped."""

from __future__ import annotations

import time
from typing import Any

from raetsalt import protocol as p
from raetsalt.api.master import Credentials, MasterLink


class FakeClient:
    """A lane client whose reads hand out prepared batches of bodies."""

    def __init__(self, batches: list[list[dict[str, Any]]]) -> None:
        self.batches = batches
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def request(self, share: str, **fields: Any) -> str:
        self.sent.append((share, fields))
        return "cl1-1"

    def receive(self, timeout: float) -> list[dict[str, Any]]:
        return self.batches.pop(0) if self.batches else []

    def daemon_alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


def body(share: str, req: str = "cl1-1", **fields: Any) -> dict[str, Any]:
    return {"route": {"src": [None, "manor", None], "dst": [None, "cl1", share]},
            "req": req, **fields}


def link_with(batches: list[list[dict[str, Any]]]) -> MasterLink:
    link = MasterLink({"sock_dir": "/nonexistent"})
    link._local.client = FakeClient(batches)
    return link


def test_returns_read_with_the_ack_are_kept() -> None:
    link = link_with([[
        body(p.SHARE_JOB_RET, req="cl1-0", jid="1", returns=[["old", {"return": 1}]]),
        body(p.SHARE_PUB_ACK, jid="2", minions=["m1", "m2", "m3"]),
        body(p.SHARE_JOB_RET, jid="2", returns=[["m1", {"return": True}],
                                                 ["m2", {"return": True}]]),
    ], [
        body(p.SHARE_JOB_RET, jid="2", returns=[["m3", {"return": True}]]),
    ]])
    pub = link.publish(Credentials(token="t"), "*", "glob", "test.ping", [], 5.0)
    assert pub.minions == ["m1", "m2", "m3"]
    got = dict(pub.returns(time.monotonic() + 0.5))
    assert got == {"m1": {"return": True}, "m2": {"return": True}, "m3": {"return": True}}


def test_a_second_ack_in_the_same_read_is_not_taken_for_a_return() -> None:
    link = link_with([[body(p.SHARE_PUB_ACK, jid="2", minions=["m1"]),
                       body(p.SHARE_PUB_ACK, jid="2", minions=["m1"]),
                       body(p.SHARE_JOB_RET, jid="2", returns=[["m1", {"return": 5}]])]])
    pub = link.publish(Credentials(token="t"), "*", "glob", "test.ping", [], 5.0)
    assert dict(pub.returns(time.monotonic() + 0.5)) == {"m1": {"return": 5}}
