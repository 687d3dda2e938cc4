"""Where a minion daemon listens, on real daemons: by default nowhere anyone else can
reach (a Salt minion only connects out): its road socket is bound on the address towards
its master and connected to the master, so the kernel refuses a datagram from any other
source as at a closed port, while the master's traffic works; ``interface`` set makes it
listen for anyone again (a RAET-era minion), and then a stranger's datagram reaches the
road (and is dropped there, counted, as bad input)."""

from __future__ import annotations

import re
import socket

import pytest
from helpers.ports import refused_from

from daemons.helpers import World, make_world, ping, udp_sockets

pytestmark = pytest.mark.integration


def _started(world: World, extra: str = "") -> tuple[int, str]:
    """Master and minion1 up and joined; the minion's port and its "serving on" line."""
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion = world.start("minion", world.minion_dir("mi", "minion1", extra))
    line = minion.expect("serving on", timeout=30)
    minion.expect("connected to the master", timeout=30)
    found = re.search(r"serving on [0-9.]+:(\d+) ", line)
    assert found is not None, line
    return int(found.group(1)), line


def test_a_default_minion_takes_datagrams_from_its_master_only() -> None:
    with make_world() as world:
        port, line = _started(world)
        assert "datagrams from its masters only" in line
        # Bound on the address towards the master (not 0.0.0.0) and connected to it.
        assert udp_sockets(port) == [(f"127.0.0.1:{port}", f"127.0.0.1:{world.port}")]
        assert ping(world)
        # Another local address gets what a closed port gives: nothing read it.
        assert refused_from("127.0.0.2", ("127.0.0.1", port))
        assert refused_from("127.0.0.1", ("127.0.0.1", port))  # another port, same host
        assert ping(world)  # and the master's traffic still works


def test_a_minion_given_an_interface_listens_there_for_anyone() -> None:
    with make_world() as world:
        port, line = _started(world, "interface: 0.0.0.0\n")
        assert "datagrams from its masters only" not in line
        assert udp_sockets(port) == [(f"0.0.0.0:{port}", "0.0.0.0:0")]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            stranger.bind(("127.0.0.2", 0))
            stranger.sendto(b"hello from elsewhere", ("127.0.0.1", port))
            # The road read it, and dropped it as bad input (not as a foreign source).
            line = world.daemons[-1].expect(
                f"the minion dropped a datagram from 127.0.0.2:{stranger.getsockname()[1]}")
        assert "foreign_source" not in line
        assert ping(world)
