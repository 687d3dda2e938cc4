"""Unfinished messages end to end (docs/security.md): a partial-message flood against a real
raetsalt-master.

An accepted estate (auto_accept) sends 200 native datagrams of 48 B, each announcing a
16 MiB message it never finishes.  The first version's peak RSS went from 33 MB to 3.3 GB
(here too: its VmHWM, which also catches memory a session reset gave back later); now the
master's peak RSS (read from /proc) barely moves and it still acknowledges the estate's
next message.  The attack's datagrams are on the master's socket before that message, so
its acknowledgement means they were all processed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed, MessageDelivered
from raetsalt.engine.native.frames import BULK, DATA_HEAD
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import FileKeep
from raetsalt.wire.enums import BodyKind

from .helpers import World, make_world

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_partial_message_flood_leaves_the_masters_memory_alone(world: World) -> None:
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on 127.0.0.1")
    master_ha = ("127.0.0.1", world.port)
    keep = FileKeep(world.root / "evil5", durable=False)
    with RoadStack(keep, ("127.0.0.1", 0), name="evil5", auto=AutoMode.ONCE) as stack:
        uid = stack.connect(master_ha)
        stack.run_until(lambda events: any(isinstance(e, Allowed) for e in events), 20)
        channel = stack.road.remote(uid).channel
        assert channel is not None, "the session is not native"
        before = _peak_rss_kib(master.popen.pid)
        first = channel.scheduler.streams[BULK].next_seq + 1000
        for n in range(200):
            frame = DATA_HEAD.pack(1, BodyKind.MSGPACK, BULK, first + n, 16 * MiB, 0, 1) + b"x"
            datagram = channel.seal_packet(frame)
            assert len(datagram) == 48
            stack.sock.sendto(datagram, master_ha)
        mid = stack.send(uid, {"after": "the flood"})
        stack.run_until(
            lambda events: any(isinstance(e, MessageDelivered) and e.mid == mid for e in events),
            20,
        )
        grown = _peak_rss_kib(master.popen.pid) - before
    assert grown < 8 * 1024, f"the master's peak RSS grew by {grown} KiB"
    assert master.popen.poll() is None
