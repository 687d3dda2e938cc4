"""A stopping node gives its bus listeners every queued event (``Node.drain_bus``), even
one whose socket is full when the node stops: the master's event_return spool must not
lose what the bus had accepted before a restart."""

from __future__ import annotations

import os
import signal
import time

import pytest

from raetsalt.drivers.udp import RoadStack
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import MemoryKeep
from raetsalt.node import Node

from .helpers import Proc

pytestmark = pytest.mark.integration

# Subscribes, then holds off reading until SIGUSR1 (its socket fills meanwhile), then
# counts the events up to the one tagged "end".
LISTENER = """
import signal, sys
from raetsalt.event import MasterEvent
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
event = MasterEvent(sys.argv[1])
print("ready", flush=True)
signal.sigwait([signal.SIGUSR1])
count = 0
while True:
    got = event.get_event(wait=20, full=True)
    if got is None:
        break
    count += 1
    if got["tag"] == "end":
        break
print("count", count, flush=True)
"""

EVENTS = 15000  # within the bus's per-listener queue (20,000)


def test_a_stopping_node_waits_for_a_full_listener(short_dir: str) -> None:
    road = RoadStack(MemoryKeep(), name="master", main=True, auto=AutoMode.ALWAYS).open()
    sock_dir = os.path.join(short_dir, "ma")
    node = Node(road, node="master", sock_dir=sock_dir)
    listener = Proc(["-c", LISTENER, sock_dir])
    try:
        deadline = time.monotonic() + 30
        line = None
        while line is None and time.monotonic() < deadline:
            node.step(0.05)  # serves the listener's subscription
            line = listener.readline(0.01)
        assert line == "ready"
        for n in range(EVENTS):
            node.manor.fire_event(f"many/{n}", {"n": n, "pad": "x" * 60})
        node.manor.fire_event("end", {})
        node.flush()
        # Far more than a socket holds: most events still wait in the bus.
        assert node.manor.has_output()
        listener.popen.send_signal(signal.SIGUSR1)
        assert node.drain_bus(30.0)
        assert not node.manor.has_output()
        node.close()
        assert listener.expect("count", timeout=60) == f"count {EVENTS + 1}"
    finally:
        listener.stop()
        node.close()
