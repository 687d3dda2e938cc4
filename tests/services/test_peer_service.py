"""Peer publishing without sockets: the master's decisions for road-authenticated minions,
the minion daemon's relay, the publish module against a fake daemon, acl.explain."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from services.test_master_jobs import GRAINS, Clock, FakeRoster

from raetsalt import protocol as p
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import JobCache
from raetsalt.execution.loader import CommandExecutionError, Context, Loader
from raetsalt.execution.modules import publish as publish_mod
from raetsalt.services.master import Fire, MasterJobs, ToClient, ToMinion
from raetsalt.services.minion import JobSpec, execute
from raetsalt.services.minion import ToClient as MinionToClient
from raetsalt.services.minion import ToMaster as MinionToMaster
from raetsalt.services.peer import NOT_CONNECTED, PeerRelay
from raetsalt.services.runners import run_runner

PEER = {
    "minion1$": [".*"],
    "minion2$": ["test.ping", {"minion1": ["grains.item"]},
                 {"*": [{"test.arg": {"kwargs": {"mode": "safe$"}}}]}],
}
PEER_RUN = {"minion2$": ["manage.up$", "jobs.active$"]}


@pytest.fixture
def master(tmp_path: Path) -> MasterJobs:
    jobs = MasterJobs(
        {"timeout": 5, "peer": PEER, "peer_run": PEER_RUN,
         "nodegroups": {"webs": "G@roles:web"}},
        JobCache(tmp_path / "jobs"), FakeRoster(sorted(GRAINS)), estate="themaster",
        data_cache=MinionDataCache(tmp_path / "minions"), utcnow=Clock())
    for minion, grains in GRAINS.items():
        jobs.on_hello(minion, {"grains": grains, "start": False})
    return jobs


def peer_pub(master: MasterJobs, minion: str, tgt: Any, fun: str, arg: list[Any] | None = None,
             tgt_type: str = "glob", **extra: Any) -> list[Any]:
    body = {"rid": "7", "tgt": tgt, "tgt_type": tgt_type, "fun": fun, "arg": arg or [],
            **extra}
    return master.on_peer_publish(minion, body, 0.0)


def answers(actions: list[Any], minion: str, share: str) -> list[dict[str, Any]]:
    return [a.body for a in actions if isinstance(a, ToMinion) and a.minion == minion
            and p.share_of(a.body) == share]


def publications(actions: list[Any]) -> dict[str, dict[str, Any]]:
    return {a.minion: a.body for a in actions
            if isinstance(a, ToMinion) and p.share_of(a.body) == p.SHARE_FUN}


def test_allowed_publish_answers_the_minion_with_its_rid(master: MasterJobs) -> None:
    actions = peer_pub(master, "minion1", "minion[23]", "test.ping")
    [ack] = answers(actions, "minion1", p.SHARE_PEER_ACK)
    assert ack["rid"] == "7" and ack["minions"] == ["minion2", "minion3"]
    assert set(publications(actions)) == {"minion2", "minion3"}
    assert publications(actions)["minion2"]["user"] == "minion1"
    assert not [a for a in actions if isinstance(a, ToClient)]
    master.on_return("minion2", {"jid": ack["jid"], "fun": "test.ping", "return": True})
    [fwd] = answers(master.answer_returns(), "minion1", p.SHARE_PEER_RET)
    [(minion, ret)] = p.job_returns(fwd)
    assert fwd["rid"] == "7" and minion == "minion2" and ret["return"] is True


def test_forged_payload_id_is_ignored(master: MasterJobs) -> None:
    """minion3 has no rules; claiming minion1's id in the payload changes nothing."""
    actions = peer_pub(master, "minion3", "*", "test.ping", id="minion1", user="minion1")
    [ack] = answers(actions, "minion3", p.SHARE_PEER_ACK)
    assert ack["denied"] is True
    assert ack["error"] == ("peer publish of 'test.ping' to '*' (glob) denied: "
                            "no peer rule matches minion id 'minion3'")
    assert not publications(actions)
    [fire] = [a for a in actions if isinstance(a, Fire)]
    assert fire.tag == "raetsalt/peer/minion3/denied" and fire.data["id"] == "minion3"
    # and the real minion1 gets its own rules, whatever its payload claims
    actions = peer_pub(master, "minion1", "*", "cmd.run", ["id"], id="minion3")
    assert answers(actions, "minion1", p.SHARE_PEER_ACK)[0]["minions"] == sorted(GRAINS)


@pytest.mark.parametrize(
    ("tgt", "fun", "arg", "reason"),
    [
        ("minion1", "cmd.run", ["id"], "no function rule allows it"),
        ("minion[13]", "grains.item", ["os"], "the target is outside the allowed expression"),
        ("*", "test.arg", ["mode=unsafe"], "keyword argument 'mode' ('unsafe') does not match"),
        ("*", "test.arg", ["mode=safe", "x"], "positional argument 1 ('x') is not allowed"),
        ("*", "test.ping,cmd.run", [[], ["id"]], "may not run 'cmd.run'"),
        ("*", "publish.publish", [], "publish.* cannot be peer-published"),
    ],
)
def test_denials_name_what_and_why_and_fire(master: MasterJobs, tgt: str, fun: str,
                                            arg: list[Any], reason: str) -> None:
    actions = peer_pub(master, "minion2", tgt, fun, arg)
    [ack] = answers(actions, "minion2", p.SHARE_PEER_ACK)
    assert ack["denied"] is True and reason in ack["error"]
    assert f"of {fun!r} to {tgt!r}" in ack["error"]
    assert "peer[" not in ack["error"]  # the rules stay on the master
    [fire] = [a for a in actions if isinstance(a, Fire)]
    assert fire.data["fun"] == fun and fire.data["tgt"] == tgt and reason in fire.data["reason"]
    assert not publications(actions)


def test_keyword_arguments_are_published_as_checked(master: MasterJobs) -> None:
    actions = peer_pub(master, "minion2", "minion3", "test.arg", ["mode=safe"])
    assert publications(actions)["minion3"]["arg"] == [{"__kwarg__": True, "mode": "safe"}]


def test_peer_runner_allowed_denied_and_gathered(master: MasterJobs) -> None:
    actions = master.on_peer_runner("minion2", {"rid": "r", "fun": "manage.up", "arg": []}, 0.0)
    [ret] = answers(actions, "minion2", p.SHARE_PEER_RUN_RET)
    assert ret["return"] == sorted(GRAINS) and ret["rid"] == "r"
    actions = master.on_peer_runner("minion2", {"rid": "s", "fun": "jobs.list_jobs"}, 0.0)
    [ret] = answers(actions, "minion2", p.SHARE_PEER_RUN_RET)
    assert ret["denied"] is True and "no runner rule allows it" in ret["error"]
    actions = master.on_peer_runner("minion2", {"rid": "g", "fun": "jobs.active"}, 0.0)
    asked = publications(actions)
    assert set(asked) == set(GRAINS)
    jid = asked["minion1"]["jid"]
    done: list[Any] = []
    for minion in GRAINS:
        done = master.on_return(minion, {"jid": jid, "fun": "saltutil.running", "return": []})
    [ret] = answers(done, "minion2", p.SHARE_PEER_RUN_RET)
    assert ret["rid"] == "g" and ret["return"] == {}


def test_messages_without_a_rid_are_ignored(master: MasterJobs) -> None:
    assert master.on_peer_publish("minion1", {"tgt": "*", "fun": "test.ping"}, 0.0) == []
    assert master.on_peer_runner("minion1", {"fun": "manage.up"}, 0.0) == []


def test_acl_explain(master: MasterJobs) -> None:
    out = run_runner(master, "acl.explain", ["minion2", "grains.item", "minion[13]"], {})
    assert out["allowed"] is False and out["check"] == "peer"
    assert out["targets"] == ["minion1", "minion3"]
    assert out["rule"] == "peer['minion2$'] -> 'minion1' -> 'grains.item'"
    out = run_runner(master, "acl.explain", ["minion2", "grains.item", "minion1"], {})
    assert out["allowed"] is True
    out = run_runner(master, "acl.explain", ["minion2", "manage.up"], {})
    assert out == {"check": "peer_run", "allowed": True,
                   "reason": "minion 'minion2' may run runner 'manage.up'",
                   "rule": "peer_run['minion2$'] -> 'manage.up$'"}
    out = run_runner(master, "acl.explain", ["minion1", "webs"], {"tgt_type": "nodegroup"})
    assert out["check"] == "peer_run" and out["allowed"] is False


# ---------------------------------------------------------------------------- relay


def test_relay_forwards_and_maps_answers_back() -> None:
    relay = PeerRelay("m1")
    assert relay.serves(p.SHARE_PUBLISH) and relay.serves(p.SHARE_RUNNER)
    assert not relay.serves(p.SHARE_CALL)
    body = {"route": {}, "req": "c-1", "tgt": "*", "fun": "test.ping", "arg": [],
            "timeout": 2, "id": "forged"}
    [out] = relay.on_request("cl1", p.SHARE_PUBLISH, body, 0.0, True)
    assert isinstance(out, MinionToMaster)
    assert p.share_of(out.body) == p.SHARE_PEER_PUBLISH
    rid = out.body["rid"]
    assert "req" not in out.body and out.body["fun"] == "test.ping"
    [ack] = relay.on_answer(p.SHARE_PEER_ACK, {"rid": rid, "jid": "1", "minions": ["m2"]})
    assert isinstance(ack, MinionToClient) and ack.yard == "cl1"
    assert p.share_of(ack.body) == p.SHARE_PUB_ACK and ack.body["req"] == "c-1"
    [ret] = relay.on_answer(p.SHARE_PEER_RET, {"rid": rid, "returns": [["m2", {}]]})
    assert p.share_of(ret.body) == p.SHARE_JOB_RET and p.job_returns(ret.body) == [("m2", {})]
    relay.forget_client("cl1")
    assert relay.on_answer(p.SHARE_PEER_RET, {"rid": rid, "returns": [["m3", {}]]}) == []


def test_relay_refuses_when_not_connected_and_expires() -> None:
    relay = PeerRelay("m1")
    [out] = relay.on_request("cl1", p.SHARE_RUNNER, {"req": "x", "fun": "manage.up"}, 0.0,
                             False)
    assert isinstance(out, MinionToClient) and out.body["error"] == NOT_CONNECTED
    relay.on_request("cl1", p.SHARE_RUNNER, {"req": "y", "fun": "manage.up", "timeout": 1},
                     0.0, True)
    assert relay.pending() == 1
    relay.on_request("cl2", p.SHARE_RUNNER, {"req": "z", "fun": "manage.up"}, 100.0, True)
    assert relay.pending() == 1  # the first one expired
    [done] = relay.on_answer(p.SHARE_PEER_RUN_RET, {"rid": "2", "return": []})
    assert done.yard == "cl2" and relay.pending() == 0


# ---------------------------------------------------------------------------- module


class FakeClient:
    """Answers like a minion daemon relaying to a master."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.answers = answers
        self.closed = False

    def request(self, share: str, *, send_timeout: float = 5.0, **fields: Any) -> str:
        self.sent.append((share, fields))
        return "q1"

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        out, self.answers = self.answers, []
        return out

    def daemon_alive(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def lane(share: str, **fields: Any) -> dict[str, Any]:
    return p.lane_reply(None, "cl", share, req="q1", **fields)


@pytest.fixture
def ctx() -> Iterator[Context]:
    yield Context(opts={"id": "m1"}, grains={})


def test_module_publish_and_full_data(ctx: Context) -> None:
    client = FakeClient([
        lane(p.SHARE_PUB_ACK, jid="1", minions=["b", "a"]),
        lane(p.SHARE_JOB_RET, jid="1", returns=[["a", {"return": 1, "retcode": 0}]]),
        lane(p.SHARE_JOB_RET, jid="1", returns=[["b", {"return": 2, "retcode": 3, "out": "txt"}],
                                                ["junk", 5], "junk"]),
    ])
    ctx.master_client = lambda: client
    out = publish_mod.full_data("*", "test.arg", "[x, k=v]", expr_form="compound", ctx=ctx)
    assert out == {"a": {"ret": 1, "retcode": 0}, "b": {"ret": 2, "retcode": 3, "out": "txt"}}
    share, fields = client.sent[0]
    assert share == p.SHARE_PUBLISH and fields["tgt_type"] == "compound"
    assert fields["arg"] == ["x", {"__kwarg__": True, "k": "v"}]
    assert client.closed


def test_module_denial_is_an_error_and_masterless_is_salts(ctx: Context) -> None:
    ctx.master_client = lambda: FakeClient([lane(p.SHARE_PUB_ACK, error="no!", denied=True)])
    with pytest.raises(CommandExecutionError, match="no!"):
        publish_mod.publish("*", "test.ping", ctx=ctx)
    ctx.master_client = lambda: FakeClient([lane(p.SHARE_RUN_RET, error="nope", denied=True)])
    with pytest.raises(CommandExecutionError, match="nope"):
        publish_mod.runner("manage.up", ctx=ctx)
    ctx.master_client = None
    assert publish_mod.publish("*", "test.ping", ctx=ctx) == {}
    assert publish_mod.runner("manage.up", ctx=ctx) == publish_mod.MASTERLESS


def test_a_master_that_never_answers_is_a_failed_job(ctx: Context) -> None:
    """Salt's text, but retcode 1: raetsalt-call exits 1 (Salt exits 0)."""
    client = FakeClient([])
    ctx.master_client = lambda: client
    outcome = execute(Loader(), JobSpec("1", "publish.publish", ["*", "test.ping", None,
                                                                 "glob", "", 0.05],
                                        kind="call"), ctx, 1)
    assert outcome.ret == {"return": "'test.ping' publish timed out", "retcode": 1,
                           "success": False}
    assert client.sent[0][1]["timeout"] == 0.05  # the master hears the caller's time-out
    outcome = execute(Loader(), JobSpec("2", "publish.runner", ["manage.up", None, 0.05],
                                        kind="call"), ctx, 1)
    assert outcome.ret["return"] == "'manage.up' runner publish timed out"
    assert outcome.ret["retcode"] == 1


def test_a_denied_publish_is_a_failed_job_without_traceback(ctx: Context) -> None:
    ctx.master_client = lambda: FakeClient([lane(p.SHARE_PUB_ACK, error="why", denied=True)])
    loader = Loader()
    outcome = execute(loader, JobSpec("1", "publish.publish", ["*", "test.ping"], kind="call"),
                      ctx, 1)
    assert outcome.ret == {"return": "ERROR: why", "retcode": 1, "success": False,
                           "out": "nested"}


def test_a_comma_command_returns_by_function(ctx: Context) -> None:
    spec = JobSpec("1", "test.ping,test.echo,nope.x", [[], ["hi"], []])
    outcome = execute(Loader(), spec, ctx, 1)
    assert outcome.ret["return"]["test.echo"] == "hi"
    assert outcome.ret["return"]["test.ping"] is True
    assert outcome.ret["retcode"] == {"test.ping": 0, "test.echo": 0, "nope.x": 1}
    assert outcome.ret["success"] is False
    flat = execute(Loader(), JobSpec("2", "test.ping,test.version", []), ctx, 1)
    assert flat.ret["success"] is True and set(flat.ret["return"]) == {"test.ping",
                                                                       "test.version"}


def test_an_invalid_target_is_an_error_not_a_denial(master: MasterJobs) -> None:
    actions = peer_pub(master, "minion1", "%cluster", "test.ping", tgt_type="range")
    [ack] = answers(actions, "minion1", p.SHARE_PEER_ACK)
    assert ack["error"].startswith("Invalid target: ") and "denied" not in ack
    assert not [a for a in actions if isinstance(a, Fire)]
    actions = peer_pub(master, "minion1", "webs", "test.ping", tgt_type="nodegroup")
    assert answers(actions, "minion1", p.SHARE_PEER_ACK)[0]["minions"] == ["minion1",
                                                                          "minion3"]
