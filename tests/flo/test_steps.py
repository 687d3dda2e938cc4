"""Each flow behaviour alone, on an ioflo Store with the shares it declares: no daemon,
no socket, no skedder.  The node is a fake; the master's peer steps run the real
``MasterJobs`` decisions (``peer`` / ``peer_run``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ioflo.base.storing import Store
from services.test_master_jobs import GRAINS, Clock, FakeRoster

import raetsalt  # noqa: F401  (collections.abc before ioflo)
from raetsalt import protocol as p
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import JobCache
from raetsalt.daemon.master_adapter import MasterAdapter, MasterInbox
from raetsalt.daemon.service import MinionLink
from raetsalt.engine.events import Allowed, MessageReceived, PresenceChanged
from raetsalt.errors import LocalError
from raetsalt.flo import steps
from raetsalt.flo.behaviors import RaetsaltMinionState
from raetsalt.flo.doer import IOINITS, RaetsaltDoer
from raetsalt.log import Throttle
from raetsalt.manor import LocalMessage
from raetsalt.protocol import ToClient
from raetsalt.services.master import Fire, MasterJobs, Sink, ToMinion, _Watch
from raetsalt.services.quota import MinionQuota, QuotaConfig

PEER = {"minion1$": ["test.ping"]}
PEER_RUN = {"minion1$": ["manage.up$"]}


def attach(cls: type[RaetsaltDoer], store: Store) -> Any:
    """``cls`` with its ioinits resolved to shares of ``store``, as a flow's build would."""
    doer = cls(name=cls.__name__, store=store)
    for key, init in IOINITS.items():
        share = store.create(init["ipath"])
        ival = init["ival"]
        share.create(dict(ival) if isinstance(ival, dict) else {"value": ival})
        setattr(doer, key, share)
    return doer


class FakeRoad:
    def __init__(self) -> None:
        self.output = False

    def has_output(self) -> bool:
        return self.output

    def remote(self, name: str) -> Any:
        if name not in GRAINS:
            raise LocalError(name)
        return SimpleNamespace(name=name, role=name)


class FakeNode:
    def __init__(self) -> None:
        self.lane: list[Any] = []
        self.road: list[Any] = []
        self.flushed: list[str] = []
        self.stack = SimpleNamespace(road=FakeRoad(), flush=lambda: self.flushed.append("road"))

    def clock(self) -> float:
        return 10.0

    def receive_lane(self) -> list[Any]:
        got, self.lane = self.lane, []
        return got

    def receive_road(self) -> list[Any]:
        got, self.road = self.road, []
        return got

    def flush_bus(self) -> None:
        self.flushed.append("bus")


@pytest.fixture
def store() -> Store:
    return Store(stamp=0.0)


@pytest.fixture
def master(tmp_path: Path, store: Store) -> tuple[FakeNode, MasterAdapter]:
    """A master's shares as ``raetsalt node open`` leaves them, with a real job service
    core (``MasterJobs``) behind a ``MasterAdapter`` that has no sockets."""
    node = FakeNode()
    service = object.__new__(MasterAdapter)  # the steps below need only these two
    service.node = node  # type: ignore[assignment]
    service.quota = MinionQuota(QuotaConfig())
    service._quota_log = Throttle(60.0)
    service.cluster = service.peers = service.registry = None  # one master, no cluster
    service._from_peers = []
    service.jobs = MasterJobs(
        {"timeout": 5, "peer": PEER, "peer_run": PEER_RUN}, JobCache(tmp_path / "jobs"),
        FakeRoster(sorted(GRAINS)), estate="themaster",
        data_cache=MinionDataCache(tmp_path / "minions"), utcnow=Clock())
    for minion, grains in GRAINS.items():
        service.jobs.on_hello(minion, {"grains": grains, "start": False})
    opener = attach(RaetsaltDoer, store)
    opener.node.value = node
    opener.jobs.value = service
    opener.inbox.value = []
    opener.outbox.value = []
    opener.routed.value = MasterInbox()
    return node, service


def road_message(remote: str, share: str, **fields: Any) -> MessageReceived:
    return MessageReceived(remote=remote, body=p.road_message(remote, None, share, **fields))


def test_receive_steps_fill_the_inbox_in_flow_order(store: Store, master: Any) -> None:
    node, _service = master
    lane = LocalMessage(body={"x": 1}, source="cl1", share=p.SHARE_PUBLISH)
    road = PresenceChanged(remote="minion1", alive=True)
    node.lane, node.road = [lane], [road]
    attach(steps.RaetsaltLaneReceive, store).action()
    attach(steps.RaetsaltRoadReceive, store).action()
    assert store.fetch(".raetsalt.inbox").value == [lane, road]


def test_master_route_sorts_by_the_step_that_serves_and_counts(store: Store, master: Any
                                                               ) -> None:
    ret = road_message("minion2", p.SHARE_RETURN, jid="1")
    peer = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="7")
    hello = road_message("minion3", p.SHARE_HELLO)
    key = LocalMessage(body={}, source="cl1", share="key")
    presence = PresenceChanged(remote="minion1", alive=True)
    store.fetch(".raetsalt.inbox").value.extend([ret, peer, hello, key, presence])
    attach(steps.RaetsaltMasterRoute, store).action()
    routed = store.fetch(".raetsalt.routed").value
    assert (routed.returns, routed.peers, routed.minions, routed.keys, routed.link) == (
        [ret], [peer], [hello], [key], [presence])
    assert store.fetch(".raetsalt.inbox").value == []
    assert store.fetch(".raetsalt.status")["events"] == 5


def test_peer_acl_answers_refusals_and_keeps_what_peer_allows(store: Store, master: Any
                                                              ) -> None:
    allowed = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="1", tgt="minion2",
                           tgt_type="glob", fun="test.ping", arg=[])
    wrong_fun = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="2", tgt="*",
                             tgt_type="glob", fun="cmd.run", arg=["id"])
    no_rule = road_message("minion2", p.SHARE_PEER_RUNNER, rid="3", fun="manage.up", arg=[])
    routed = store.fetch(".raetsalt.routed").value
    routed.peers.extend([allowed, wrong_fun, no_rule])
    attach(steps.RaetsaltPeerAcl, store).action()
    assert routed.peers == []
    assert [(g.minion, g.rid, g.body) for g in routed.granted] == [
        ("minion1", "1", allowed.body)]
    outbox = store.fetch(".raetsalt.outbox").value
    refusals = {(a.minion, a.body["rid"]): a.body for a in outbox if isinstance(a, ToMinion)}
    assert set(refusals) == {("minion1", "2"), ("minion2", "3")}
    assert all(body["denied"] is True for body in refusals.values())
    assert sorted(a.tag for a in outbox if isinstance(a, Fire)) == [
        "raetsalt/peer/minion1/denied", "raetsalt/peer/minion2/denied"]
    # ... and the publish step publishes what was let through, to the target only.
    outbox.clear()
    attach(steps.RaetsaltPeerPublish, store).action()
    assert routed.granted == []
    sent = [(a.minion, p.share_of(a.body)) for a in outbox if isinstance(a, ToMinion)]
    assert ("minion2", p.SHARE_FUN) in sent and ("minion1", p.SHARE_PEER_ACK) in sent
    assert not any(m == "minion3" for m, _share in sent)


def test_returns_step_stores_the_return_and_fires_it(store: Store, master: Any) -> None:
    _node, service = master
    jid = service.jobs._new_jid()
    service.jobs.cache.save_load(jid, {"fun": "test.ping", "minions": ["minion2"]})
    routed = store.fetch(".raetsalt.routed").value
    routed.returns.append(road_message("minion2", p.SHARE_RETURN, jid=jid, fun="test.ping",
                                       **{"return": True}))
    attach(steps.RaetsaltMasterReturns, store).action()
    assert routed.returns == []
    assert service.jobs.cache.get_returns(jid)["minion2"]["return"] is True
    [fire] = store.fetch(".raetsalt.outbox").value
    assert fire.tag == f"salt/job/{jid}/ret/minion2"


def test_outbound_carries_out_the_outbox_and_sends_only_when_there_is_output(
    store: Store, master: Any
) -> None:
    node, service = master
    done: list[Any] = []
    service.perform = done.extend  # type: ignore[method-assign]
    store.fetch(".raetsalt.outbox").value.extend(["a", "b"])
    outbound = attach(steps.RaetsaltOutbound, store)
    outbound.action()
    assert done == ["a", "b"] and store.fetch(".raetsalt.outbox").value == []
    assert node.flushed == []
    node.stack.road.output = True
    outbound.action()
    assert done == ["a", "b"] and node.flushed == ["road"]
    attach(steps.RaetsaltBusFlush, store).action()
    assert node.flushed == ["road", "bus"]


def test_a_failing_step_drops_its_batch_logs_once_and_the_daemon_serves_on(
    store: Store, master: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _node, service = master
    jid = service.jobs._new_jid()
    service.jobs.cache.save_load(jid, {"fun": "test.ping", "minions": ["minion2"]})
    real = service.jobs.on_return

    def on_return(minion: str, body: Any) -> list[Any]:
        if body.get("poison"):
            raise TypeError("a bug the input found")
        return real(minion, body)

    service.jobs.on_return = on_return  # type: ignore[method-assign]
    routed = store.fetch(".raetsalt.routed").value
    step = attach(steps.RaetsaltMasterReturns, store)
    for _ in range(3):
        routed.returns.append(road_message("minion2", p.SHARE_RETURN, jid=jid, poison=True))
        step.action()
        assert routed.returns == []  # dropped, not served again on every pass
    status = store.fetch(".raetsalt.status")
    assert status["failure"] == "" and store.fetch(".raetsalt.exit").value == 0
    assert status["step_failures"] == 3
    failures = [r for r in caplog.records if "RaetsaltMasterReturns failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].exc_info  # once, with the bug's traceback
    routed.returns.append(road_message("minion2", p.SHARE_RETURN, jid=jid, fun="test.ping",
                                       **{"return": True}))
    step.action()  # the next batch is served
    assert service.jobs.cache.get_returns(jid)["minion2"]["return"] is True


def test_a_step_failing_on_every_run_for_a_minute_fails_the_flow_and_a_closed_node_runs_nothing(
    store: Store, master: Any
) -> None:
    node, _service = master
    now = [10.0]
    node.clock = lambda: now[0]

    def broken() -> list[Any]:
        raise RuntimeError("boom")

    node.receive_road = broken
    step = attach(steps.RaetsaltRoadReceive, store)
    status = store.fetch(".raetsalt.status")
    while now[0] < 10.0 + steps.RaetsaltRoadReceive.GIVE_UP_AFTER:
        step.action()
        assert status["failure"] == ""
        now[0] += 1.0
    step.action()
    assert "boom" in status["failure"] and store.fetch(".raetsalt.exit").value == 1
    store.fetch(".raetsalt.jobs").value = None  # the node closed
    node.receive_lane = broken
    attach(steps.RaetsaltLaneReceive, store).action()  # not called: nothing raised


class FakeLink(MinionLink):
    """A minion link without a road: facts set by the test."""

    def __init__(self) -> None:
        self.opts = {"id": "m1"}
        self.state = "starting"
        self.pending = self.rejected = self.ever_connected = False
        self.failures = 0
        self.last_failure = ""
        self.ha = ("10.0.0.1", 4506)
        self.uid = None
        self._reported = set()
        self.switch = None
        self.up = False

    @property
    def connected(self) -> bool:  # type: ignore[override]
        return self.up


def test_minion_link_copies_facts_and_hello_follows_a_connection(store: Store) -> None:
    link = FakeLink()
    jobs = SimpleNamespace(node=FakeNode(),
                           serve_link=lambda events: ["hello"] if events else [])
    opener = attach(RaetsaltDoer, store)
    opener.node.value = FakeNode()
    opener.jobs.value = jobs
    opener.watch.value = link
    opener.outbox.value = []
    opener.routed.value = SimpleNamespace(link=[])
    step = attach(steps.RaetsaltMinionLink, store)
    step.action()
    facts = store.fetch(".raetsalt.link")
    assert not facts["connected"] and not facts["was_connected"]
    link.up = True
    store.fetch(".raetsalt.routed").value.link.append(Allowed(remote="master", profile="raet"))
    step.action()
    assert facts["connected"] and facts["was_connected"]
    assert store.fetch(".raetsalt.outbox").value == ["hello"]
    assert store.fetch(".raetsalt.routed").value.link == []
    link.up = False
    step.action()
    assert not facts["connected"] and facts["was_connected"]  # the flow goes to "lost"


def test_minion_state_reports_the_frame_entered(store: Store,
                                                caplog: pytest.LogCaptureFixture) -> None:
    link = FakeLink()
    attach(RaetsaltDoer, store).watch.value = link
    state = attach(RaetsaltMinionState, store)
    with caplog.at_level("INFO", logger="raetsalt.daemon"):
        state.action(state="pending")
        state.action(state="pending")  # once per change
        link.failures, link.last_failure = 3, "timeout"
        state.action(state="unreachable")
    status = store.fetch(".raetsalt.status")
    assert (status["state"], status["pending"], status["connected"]) == (
        "unreachable", False, False)
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "is pending on the master" in m]) == 1
    assert any("cannot reach the master at 10.0.0.1:4506: 3 join attempts failed "
               "(no answer)" in m for m in messages)


def test_peer_acl_drops_what_cannot_be_answered_and_answers_malformed_with_its_error(
    store: Store, master: Any
) -> None:
    no_rid = road_message("minion1", p.SHARE_PEER_PUBLISH, tgt="*", fun="cmd.run", arg=[])
    no_fun = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="9", tgt="*", arg=[])
    bad_target = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="8", tgt="E@(",
                              tgt_type="pcre", fun="test.ping", arg=[])
    routed = store.fetch(".raetsalt.routed").value
    routed.peers.extend([no_rid, no_fun, bad_target])
    attach(steps.RaetsaltPeerAcl, store).action()
    assert routed.peers == [] and routed.granted == []
    errors = {a.body["rid"]: a.body["error"] for a in store.fetch(".raetsalt.outbox").value}
    assert set(errors) == {"8", "9"} and "Invalid target" in errors["8"]
    assert "denied" not in str(errors)  # the publishing path's own errors


def test_peer_publish_publishes_nothing_the_acl_step_did_not_allow(store: Store, master: Any
                                                                   ) -> None:
    """The peer ACL step is the decision: without it, the publish step has nothing."""
    allowed = road_message("minion1", p.SHARE_PEER_PUBLISH, rid="1", tgt="minion2",
                           tgt_type="glob", fun="test.ping", arg=[])
    routed = store.fetch(".raetsalt.routed").value
    routed.peers.append(allowed)
    attach(steps.RaetsaltPeerPublish, store).action()
    assert store.fetch(".raetsalt.outbox").value == [] and routed.peers == [allowed]


def test_returns_step_answers_the_waiting_client_even_without_new_returns(
    store: Store, master: Any
) -> None:
    """Returns held while a client was behind go out on a later pass with no returns."""
    _node, service = master
    room = {"cl1": False}
    service._keeping_up = lambda sink: room[sink.yard]  # type: ignore[method-assign]
    jid = service.jobs._new_jid()
    service.jobs.cache.save_load(jid, {"fun": "test.ping", "minions": ["minion2"]})
    service.jobs._watches[jid] = _Watch(Sink("r1", yard="cl1"), {"minion2"}, 1e12)
    routed = store.fetch(".raetsalt.routed").value
    routed.returns.append(road_message("minion2", p.SHARE_RETURN, jid=jid, fun="test.ping",
                                       **{"return": True}))
    step = attach(steps.RaetsaltMasterReturns, store)
    step.action()
    outbox = store.fetch(".raetsalt.outbox").value
    assert not [a for a in outbox if isinstance(a, ToClient)]  # the client is behind
    outbox.clear()
    room["cl1"] = True
    step.action()
    [answer] = outbox
    assert isinstance(answer, ToClient) and answer.yard == "cl1"
    assert p.job_returns(answer.body) == [("minion2", {"return": True, "retcode": 0,
                                                       "success": True})]
