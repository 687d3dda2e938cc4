"""A master's returns to a client that reads slowly: real master node (road, manor, lane)
and a real client yard.  Ten thousand returns used to be ten thousand lane messages; the
client's socket holds a handful, the lane queue 1,024 pages, and the rest were refused
and lost.  Now they go in batches, only while the client keeps up: nothing is lost."""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from raetsalt import protocol as p
from raetsalt.config import load_node_config
from raetsalt.daemon.master_adapter import MasterAdapter
from raetsalt.daemon.service import open_node
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.flo import flow_path
from raetsalt.flo.passes import FlowPass
from raetsalt.services.master import Sink, _Watch

JID = "20261124000000000001"


def test_a_client_that_stops_reading_loses_no_returns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock_dir = tempfile.mkdtemp(prefix="rsr", dir="/tmp")  # socket paths must stay short
    (tmp_path / "master").write_text(
        f"root_dir: {tmp_path}\nsock_dir: {sock_dir}\ninterface: 127.0.0.1\n"
        "raet_port: 0\nid: themaster\n")
    opts = load_node_config(tmp_path, "master")
    node = open_node(opts, "master")
    service = MasterAdapter(node, opts)
    flow = FlowPass(flow_path("master").read_text(), node, service)
    try:
        with CommandClient("master", opts["sock_dir"]) as client:
            # The client says hello (the manor learns its yard), then stops reading.
            client.request("nothing")
            deadline = time.monotonic() + 10
            while not node.manor.lane.has_yard(client.yard):
                assert time.monotonic() < deadline
                flow.run()
            minions = [f"m{n:05d}" for n in range(10_000)]
            # Datagrams on their way to a client are charged to the sender's buffer: make
            # the master's hold 64 KiB (a real one holds 8 MiB: about 5,000 single returns),
            # so that its queue for the client fills at once.
            node.uxd.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
            monkeypatch.setattr(service.jobs.cache, "save_return", lambda *args: None)
            jobs = service.jobs
            jobs._jobs[JID] = 0.0
            jobs._watches[JID] = _Watch(Sink("r1", yard=client.yard), set(minions), 1e12)
            body = {"jid": JID, "fun": "test.ping", "fun_args": [], "return": True}
            for start in range(0, len(minions), 100):  # returns over 100 passes
                for minion in minions[start:start + 100]:
                    service.perform(jobs.on_return(minion, body))
                service.perform(service.serve_returns([], node.clock()))
            assert service.jobs.returns_waiting()  # the client is behind: they wait
            assert node.manor.lane.stats["tx_refused"] == 0
            got: dict[str, bool] = {}
            deadline = time.monotonic() + 60
            while len(got) < len(minions) and time.monotonic() < deadline:
                service.perform(service.serve_returns([], node.clock()))
                node.service_ready()  # the lane's retries
                for message in client.receive(0.01):
                    if p.share_of(message) == p.SHARE_JOB_RET and message["req"] == "r1":
                        for minion, ret in p.job_returns(message):
                            assert minion not in got
                            got[minion] = ret["return"]
            assert sorted(got) == minions and set(got.values()) == {True}
            assert node.manor.lane.stats["tx_refused"] == 0
            assert not service.jobs.returns_waiting() and JID not in jobs._watches
    finally:
        service.close()
        node.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
