"""fire_master end to end: minion bus -> minion node -> road (loopback) -> master node ->
master bus -> a MasterEvent listener in another process.

Both nodes run in this process, embedded in one selector together with the listener's
stdout (the way a daemon embeds a ``Node``); nothing waits on a sleep.
"""

from __future__ import annotations

import json
import os
import selectors
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed
from raetsalt.event import SaltEvent
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import MemoryKeep
from raetsalt.node import Node, NodeEvent

from .helpers import Proc

pytestmark = pytest.mark.integration

MINION = "minion1"

LISTENER = """
import json, sys
from raetsalt.event import MasterEvent
event = MasterEvent(sys.argv[1])
print("ready", flush=True)
while True:
    got = event.get_event(wait=10, full=True)
    if got is None:
        break
    print(json.dumps(got, default=str), flush=True)
    if got["tag"] == "end":
        break
"""


@dataclass
class Wired:
    master: Node
    minion: Node
    listener: Proc
    minion_sock_dir: str
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    events: dict[str, list[NodeEvent]] = field(default_factory=lambda: {"master": [], "minion": []})
    lines: list[str] = field(default_factory=list)
    _buffer: bytes = b""

    def start(self) -> None:
        self.master.register(self.selector, "master")
        self.minion.register(self.selector, "minion")
        assert self.listener.popen.stdout is not None
        self.selector.register(self.listener.popen.stdout, selectors.EVENT_READ, "listener")

    def until(self, done: Callable[[], bool], timeout: float = 4.0) -> None:
        """Service both nodes and read the listener until ``done()``."""
        deadline = time.monotonic() + timeout
        nodes = {"master": self.master, "minion": self.minion}
        while not done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                err = self.listener.popen.stderr.read1() if self.listener.popen.poll() else b""  # type: ignore[union-attr]
                raise AssertionError(
                    f"not done within {timeout} s; listener said {self.lines}, "
                    f"node events {self.events}, master stats {self.master.stats}, "
                    f"minion stats {self.minion.stats} {self.minion.manor.stats} {err!r}"
                )
            waits = [w for n in nodes.values() if (w := n.timeout()) is not None]
            for key, _ in self.selector.select(min([remaining, *waits])):
                if key.data == "listener":
                    self._read_listener()
            for name, node in nodes.items():
                self.events[name].extend(node.service_ready())

    def _read_listener(self) -> None:
        assert self.listener.popen.stdout is not None
        chunk = self.listener.popen.stdout.read()
        if not chunk:
            self.selector.unregister(self.listener.popen.stdout)
            return
        *complete, self._buffer = (self._buffer + chunk).split(b"\n")
        self.lines.extend(line.decode() for line in complete)

    def received(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines if line != "ready"]

    def wait_for_end(self) -> list[dict[str, Any]]:
        self.until(lambda: any(e["tag"] == "end" for e in self.received()))
        return self.received()


@pytest.fixture
def wired(short_dir: str) -> Iterator[Wired]:
    master_road = RoadStack(MemoryKeep(), name="master", main=True, auto=AutoMode.ALWAYS).open()
    master = Node(master_road, node="master", sock_dir=os.path.join(short_dir, "ma"))
    minion_road = RoadStack(MemoryKeep(), name=MINION, auto=AutoMode.ALWAYS).open()
    minion_sock_dir = os.path.join(short_dir, "mi")
    minion = Node(minion_road, node="minion", sock_dir=minion_sock_dir, node_id=MINION)
    listener = Proc(["-c", LISTENER, os.path.join(short_dir, "ma")])
    setup = Wired(master, minion, listener, minion_sock_dir)
    try:
        setup.start()
        minion.connect_master(master_road.address)
        # The road session and the listener's subscription come up in the same loop.
        setup.until(
            lambda: (
                "ready" in setup.lines
                and any(isinstance(e, Allowed) for e in setup.events["minion"])
            )
        )
        yield setup
    finally:
        listener.stop()
        setup.selector.close()
        minion.close()
        master.close()


def minion_client(wired: Wired) -> SaltEvent:
    return SaltEvent("minion", wired.minion_sock_dir, id=MINION)


def batch(pretag: str | None = None) -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"tag": f"custom/beacon/{n}", "data": {"n": n, "id": "not-the-point"}} for n in range(4)
    ]
    events.append({"tag": "custom/beacon/4", "level": "bare"})  # no 'data': the item is the data
    return {"id": MINION, "events": events, "tag": None, "pretag": pretag, "data": None}


def test_batch_events_arrive_once_under_their_own_tags(wired: Wired) -> None:
    with minion_client(wired) as client:
        assert client.fire_event(batch(), "fire_master")
        assert client.fire_master({"last": True}, "end")
        got = wired.wait_for_end()
    assert [e["tag"] for e in got] == [f"custom/beacon/{n}" for n in range(5)] + ["end"]
    for n in range(4):
        data = got[n]["data"]
        assert data["n"] == n and data["id"] == "not-the-point" and "_stamp" in data
    assert got[4]["data"]["level"] == "bare" and got[4]["data"]["tag"] == "custom/beacon/4"
    # Single form: the whole load, the user's data nested under 'data' (as in Salt).
    end = got[5]["data"]
    assert end["cmd"] == "_minion_event" and end["id"] == MINION and end["tag"] == "end"
    assert end["data"] == {"last": True} and end["pretag"] is None
    assert wired.master.stats["road_events_fired"] == 6
    assert wired.minion.stats["fire_master_batches"] == 1  # the 5 went as one message


def test_pretag_copy_comes_first(wired: Wired) -> None:
    with minion_client(wired) as client:
        assert client.fire_event(batch(pretag="syndic/s1"), "fire_master")
        assert client.fire_master({}, "end")
        got = wired.wait_for_end()
    expected: list[str] = []
    for n in range(5):
        expected += [f"syndic/s1/custom/beacon/{n}", f"custom/beacon/{n}"]
    assert [e["tag"] for e in got] == expected + ["end"]
    assert got[0]["data"]["n"] == got[1]["data"]["n"] == 0


def test_master_trusts_the_road_not_the_payload(wired: Wired) -> None:
    """A minion that skips its own filtering still cannot fake its id or a blacklisted tag."""
    master_uid = wired.minion.master
    assert master_uid is not None

    def raw(tag: str, data: dict[str, Any], src_estate: str = MINION) -> None:
        route = {"src": [src_estate, "manor", None], "dst": [None, "manor", "event_fire"]}
        wired.minion.stack.send(master_uid, {"route": route, "tag": tag, "data": data})

    raw("salt/key", {"act": "accept", "id": "web1"})
    raw("salt/job/1/new", {"jid": "1"})
    raw(
        "custom/forged",
        {"cmd": "_minion_event", "id": "someone-else", "tag": "x", "data": {}},
        src_estate="someone-else",
    )
    # A batch: each item is checked as a single event; junk items and oversized batches
    # are counted, never fired.
    route = {"src": [MINION, "manor", None], "dst": [None, "manor", "event_fire"]}
    wired.minion.stack.send(master_uid, {"route": route, "events": [
        ["salt/key", {"act": "accept"}], "junk", ["custom/batched", {"n": 2}], [1, 2, 3]]})
    wired.minion.stack.send(master_uid, {"route": route,
                                         "events": [["custom/x", {}]] * 257})
    raw("end", {"cmd": "_minion_event", "id": "evil", "tag": "end", "data": {"n": 1}})
    got = wired.wait_for_end()
    assert [e["tag"] for e in got] == ["custom/forged", "custom/batched", "end"]
    assert got[0]["data"]["id"] == MINION and got[2]["data"]["id"] == MINION
    assert wired.master.stats["road_blacklisted"] == 3
    assert wired.master.stats["road_bad_event"] == 3
