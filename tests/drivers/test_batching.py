"""Datagram batching (raetsalt.drivers.batching): UDP GSO/GRO and sendmmsg/recvmmsg on real
loopback sockets, each alone and all off, with the same messages arriving exactly once;
and the fallback when the kernel refuses a mechanism."""

from __future__ import annotations

import errno
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from drivers.test_udp import Pump, connect, of, pattern_body

from raetsalt.drivers.batching import MAX_SEGMENTS, RECV_MANY, DatagramIO
from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import MessageDelivered, MessageReceived
from raetsalt.engine.road import RoadConfig
from raetsalt.keep.records import AutoMode

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux mechanisms"),
]

# 1400-byte datagrams on loopback: a 1 MiB message is ~780 datagrams of one size.
REAL_MTU = RoadConfig(native_datagram_size=1400, native_loopback_datagram_size=1400)
MODES = {
    "default": {},
    "all": {"send_mmsg": True},
    "gso+gro": {"mmsg": False},
    "mmsg": {"gso": False, "gro": False, "send_mmsg": True},
    "none": {"gso": False, "gro": False, "mmsg": False},
}


def _transfer(tmp_path: Path, host: str, batching: dict[str, bool]) -> tuple[RoadStack, RoadStack]:
    main = RoadStack(tmp_path / "main", (host, 0), name="main", main=True, auto=AutoMode.ONCE,
                     config=REAL_MTU, batching=batching)
    minion = RoadStack(tmp_path / "minion", (host, 0), name="minion", auto=AutoMode.ONCE,
                       config=REAL_MTU, batching=batching)
    with main, minion:
        pump = Pump(main, minion)
        uid = connect(pump, main, minion)
        big = pattern_body(1024 * 1024, "big")
        small = [{"n": n} for n in range(300)]
        minion.send(uid, big)
        minion.send_many(uid, small)
        pump.until(
            lambda ev: sum(e.count for e in of(ev[minion], MessageDelivered)) == 301
            and len(of(ev[main], MessageReceived)) == 301,
            timeout=30,
        )
        bodies = [e.body for e in of(pump.events[main], MessageReceived)]
        assert sorted(bodies, key=repr) == sorted([big, *small], key=repr)
        assert [b for b in bodies if "n" in b] == small  # in order on their stream
        pump.close()
    return main, minion


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_mechanism_alone_and_none_deliver_everything_once(tmp_path: Path, mode: str) -> None:
    batching = MODES[mode]
    main, minion = _transfer(tmp_path, "127.0.0.1", batching)
    sent, got = minion.stats, main.stats
    assert (sent["tx_gso"] > 0) == batching.get("gso", True)
    assert (got["rx_gro"] > 0) == batching.get("gro", True)
    assert (sent["tx_mmsg"] > 0) == batching.get("send_mmsg", False)
    # recvmmsg: through raetsalt._udpio with or without GRO, through ctypes only without
    mmsg, gro = batching.get("mmsg", True), batching.get("gro", True)
    assert (got["rx_mmsg"] > 0) == (mmsg and (RECV_MANY is not None or not gro))
    assert not [k for k in (*sent, *got) if k.startswith(("tx_error", "rx_error"))]


def test_batching_over_ipv6(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    main, minion = _transfer(tmp_path, "::1", {"gso": False, "gro": False, "send_mmsg": True})
    assert minion.stats["tx_mmsg"] > 0 and main.stats["rx_mmsg"] > 0


class RefusingSocket(socket.socket):
    """A socket whose GSO sends fail as on a device without checksum offload."""

    def sendmsg(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        raise OSError(errno.EIO, "Input/output error")


def test_refused_gso_falls_back_without_loss_or_duplicates(tmp_path: Path) -> None:
    sock = RefusingSocket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    main = RoadStack(tmp_path / "main", ("127.0.0.1", 0), name="main", main=True,
                     auto=AutoMode.ONCE, config=REAL_MTU)
    minion = RoadStack(tmp_path / "minion", name="minion", auto=AutoMode.ONCE, sock=sock,
                       config=REAL_MTU, batching={"mmsg": False})
    with main, minion:
        pump = Pump(main, minion)
        uid = connect(pump, main, minion)
        body = pattern_body(256 * 1024, "refused")
        minion.send(uid, body)
        pump.until(lambda ev: bool(of(ev[main], MessageReceived)), timeout=20)
        assert [e.body for e in of(pump.events[main], MessageReceived)] == [body]
        assert minion.stats["gso_off"] == 1 and minion.stats["tx_gso"] == 0
        pump.close()


def _io(gso: bool = True) -> DatagramIO:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    io = DatagramIO(sock, Counter(), gso=gso, gro=False, mmsg=False)
    sock.close()
    return io


def test_gso_runs_are_one_address_one_size_the_last_shorter() -> None:
    a, b = ("10.0.0.1", 1), ("10.0.0.2", 1)
    out = [(bytes(1400), a)] * 3 + [(bytes(900), a), (bytes(1400), a), (bytes(1400), b)]
    assert DatagramIO._run(out, 0, len(out)) == 4  # three full ones and the shorter last
    assert DatagramIO._run(out, 4, len(out)) == 1  # the next goes elsewhere
    bigger = [(bytes(1000), a), (bytes(1400), a)]
    assert DatagramIO._run(bigger, 0, 2) == 1  # a larger one cannot follow
    many = [(bytes(100), a)] * (MAX_SEGMENTS + 10)
    assert DatagramIO._run(many, 0, len(many)) == MAX_SEGMENTS
    heavy = [(bytes(60000), a), (bytes(60000), a)]
    assert DatagramIO._run(heavy, 0, 2) == 1  # 64 KiB at most per send
