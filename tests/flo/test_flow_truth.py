"""The flows say what the daemons do, and keep the steps nothing else does: a real master
node and a real client yard, served by the steps of ``flows/master.flo`` (or of a copy
without one of its lines) through ``raetsalt.flo.passes.FlowPass``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raetsalt import protocol as p
from raetsalt.config import load_node_config
from raetsalt.daemon.master_adapter import MasterAdapter
from raetsalt.daemon.service import open_node
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.engine.events import MessageReceived
from raetsalt.flo import flow_path
from raetsalt.flo.passes import FlowPass, serving_steps, step_class
from raetsalt.node import Node
from raetsalt.services.master import Fire, Sink, ToMinion, _Watch

MASTER = flow_path("master").read_text()
MINION = flow_path("minion").read_text()
ANSWERS_CLIENTS = "raetsalt master returns"
PEER_ACL = "raetsalt peer acl"
JID = "20261126000000000001"


def without(flow: str, step: str) -> str:
    """``flow`` with its ``do <step>`` line removed."""
    lines = [line for line in flow.splitlines() if line.strip() != f"do {step}"]
    assert len(lines) == len(flow.splitlines()) - 1, step
    return "\n".join(lines)


def test_every_serving_step_of_both_flows_is_a_behaviour() -> None:
    for flow in (MASTER, MINION):
        names = serving_steps(flow)
        assert names[:2] == ["raetsalt lane receive", "raetsalt road receive"]
        assert names[-2:] == ["raetsalt outbound", "raetsalt bus flush"]
        for name in names:
            step_class(name)


def test_the_flows_keep_the_steps_only_they_do() -> None:
    """The step that answers clients waiting for returns, the only peer ACL decision, and
    the step that gives raetsalt-call its job's result."""
    master = serving_steps(MASTER)
    assert ANSWERS_CLIENTS in master and PEER_ACL in master
    assert master.index(PEER_ACL) < master.index("raetsalt peer publish")
    assert "raetsalt minion timers" in serving_steps(MINION)
    assert ANSWERS_CLIENTS not in serving_steps(without(MASTER, ANSWERS_CLIENTS))


def test_the_step_parser_reads_only_the_serving_frames_recur_lines() -> None:
    flow = """framer x be active first open
    frame open
        enter
            do raetsalt node open   # not served each pass
    frame serving
        recur
            # a comment: do raetsalt nothing
            do raetsalt lane receive
            do raetsalt outbound
        exit
            do raetsalt node close
"""
    assert serving_steps(flow) == ["raetsalt lane receive", "raetsalt outbound"]
    with pytest.raises(ValueError, match="no serving step"):
        step_class("raetsalt no such step")


@pytest.fixture
def master(tmp_path: Path) -> Iterator[tuple[Node, MasterAdapter]]:
    sock_dir = tempfile.mkdtemp(prefix="rst", dir="/tmp")  # socket paths must stay short
    (tmp_path / "master").write_text(
        f"root_dir: {tmp_path}\nsock_dir: {sock_dir}\ninterface: 127.0.0.1\n"
        "raet_port: 0\nid: themaster\npeer:\n  minion1:\n    - test.ping\n")
    opts = load_node_config(tmp_path, "master")
    node = open_node(opts, "master")
    service = MasterAdapter(node, opts)
    try:
        yield node, service
    finally:
        service.close()
        node.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _waiting_client_gets(flow: str, node: Node, service: MasterAdapter) -> list[Any]:
    """A client waits for the returns of a job; a return comes; ``flow`` serves three
    passes.  What the client got."""
    with CommandClient("master", service.gate.sock_dir) as client:
        client.request("nothing")  # the manor learns the client's yard
        passes = FlowPass(flow, node, service)
        while not node.manor.lane.has_yard(client.yard):
            passes.run()
            assert client.receive(0.01) == []
        jobs = service.jobs
        jobs._jobs[JID] = 0.0
        jobs._watches[JID] = _Watch(Sink("r1", yard=client.yard), {"m1"}, 1e12)
        service.perform(jobs.on_return("m1", {"jid": JID, "fun": "test.ping",
                                              "return": True}))
        for _ in range(3):
            passes.run()
        # Sending to a yard is one datagram to a local socket: it is there, or never was.
        return [m for m in client.receive(0.0) if p.share_of(m) == p.SHARE_JOB_RET]


def test_the_returns_step_answers_the_waiting_client(master: Any) -> None:
    node, service = master
    [message] = _waiting_client_gets(MASTER, node, service)
    assert message["req"] == "r1" and p.job_returns(message) == [
        ("m1", {"return": True, "retcode": 0, "success": True})]
    assert not service.jobs.returns_waiting()


def test_without_the_returns_step_the_waiting_client_gets_nothing(master: Any) -> None:
    node, service = master
    assert _waiting_client_gets(without(MASTER, ANSWERS_CLIENTS), node, service) == []
    assert service.jobs.returns_waiting()


def _peer_requests(flow: str, node: Node, service: MasterAdapter) -> list[Any]:
    """minion1 asks to publish test.ping (its peer rule allows it) and cmd.run (no rule
    does); one pass of ``flow``.  What the master carried out."""
    done: list[Any] = []
    perform = service.perform
    service.perform = lambda actions: (done.extend(actions), perform([]))[1]  # type: ignore[method-assign]
    passes = FlowPass(flow, node, service)
    for rid, fun in (("1", "test.ping"), ("2", "cmd.run")):
        passes.share("inbox").value.append(MessageReceived(
            remote="minion1", body=p.road_message("minion1", None, p.SHARE_PEER_PUBLISH,
                                                  rid=rid, tgt="*", fun=fun, arg=[])))
    passes.run()
    return done


def test_the_peer_acl_step_is_the_decision(master: Any) -> None:
    node, service = master
    done = _peer_requests(MASTER, node, service)
    acks = {a.body["rid"]: a.body for a in done if isinstance(a, ToMinion)}
    assert acks["1"]["minions"] == [] and "denied" not in acks["1"]  # allowed: no minion
    assert acks["2"]["denied"] is True and "no function rule allows it" in acks["2"]["error"]
    assert [a.tag for a in done if isinstance(a, Fire)] == ["raetsalt/peer/minion1/denied"]


def test_without_the_peer_acl_step_no_peer_request_goes_anywhere(master: Any) -> None:
    node, service = master
    assert _peer_requests(without(MASTER, PEER_ACL), node, service) == []


def test_what_no_step_serves_is_dropped_once_a_pass_and_reported_once(
        master: Any, caplog: pytest.LogCaptureFixture) -> None:
    node, service = master
    passes = FlowPass(without(MASTER, PEER_ACL), node, service)
    routed = passes.share("routed").value
    with caplog.at_level("DEBUG", logger="raetsalt.daemon"):
        for rid in ("1", "2", "3"):
            passes.share("inbox").value.append(MessageReceived(
                remote="minion1", body=p.road_message("minion1", None, p.SHARE_PEER_PUBLISH,
                                                      rid=rid, tgt="*", fun="test.ping")))
            passes.run()
            assert len(routed.peers) == 1  # this pass's; the last pass's were dropped
    dropped = [r for r in caplog.records if "no step of the flow serves 1 peers" in
               r.getMessage()]
    assert [r.levelname for r in dropped] == ["ERROR", "DEBUG"]
