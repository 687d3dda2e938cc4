"""A real minion whose key is pending on a real master asks again as Salt's minion does:
after ``acceptance_wait_time``, the wait doubling up to ``acceptance_wait_time_max``.
The test relays the minion's datagrams to the master and notes when each join request
passes (monotonic time): it asserts how far apart the asks are at least, never how soon
anything happens."""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Iterator

import pytest

from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted

from .helpers import World, make_world

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _is_join_request(data: bytes) -> bool:
    try:
        header = parse_packet_untrusted(data).header
    except Exception:  # noqa: BLE001 - native datagrams: not a join
        return False
    return (header.transaction_kind == TransactionKind.JOIN
            and header.packet_kind == PacketKind.REQUEST)


def _relay_join_requests(front: socket.socket, back: socket.socket, master: tuple[str, int],
                         count: int) -> list[float]:
    """Relay between the minion (at ``front``) and the master until ``count`` join
    requests passed; when each passed.  (A hang-guard bounds the whole wait.)"""
    seen: list[float] = []
    minion: tuple[str, int] | None = None
    selector = selectors.DefaultSelector()
    selector.register(front, selectors.EVENT_READ)
    selector.register(back, selectors.EVENT_READ)
    guard = time.monotonic() + 300.0
    while len(seen) < count:
        assert time.monotonic() < guard, f"only {len(seen)} join requests in 300 s"
        for key, _ in selector.select(timeout=1.0):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            data, source = sock.recvfrom(65536)
            if sock is front:
                minion = source
                if _is_join_request(data):
                    seen.append(time.monotonic())
                back.sendto(data, master)
            elif minion is not None:
                front.sendto(data, minion)
    selector.close()
    return seen


def test_a_pending_minion_asks_again_after_a_growing_wait(world: World) -> None:
    master = world.start("master", world.master_dir())
    master.expect("serving on")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as front, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as back:
        front.bind(("127.0.0.1", 0))
        back.bind(("127.0.0.1", 0))
        confdir = world.minion_dir("m1", "minion1")
        config = (confdir / "minion").read_text()
        config = config.replace(f"master: 127.0.0.1:{world.port}",
                                f"master: 127.0.0.1:{front.getsockname()[1]}")
        config = config.replace("acceptance_wait_time: 1.0",
                                "acceptance_wait_time: 1.0\nacceptance_wait_time_max: 4.0")
        (confdir / "minion").write_text(config)
        minion = world.start("minion", confdir)
        asks = _relay_join_requests(front, back, ("127.0.0.1", world.port), 6)
    minion.expect("is pending on the master")
    gaps = [b - a for a, b in zip(asks, asks[1:], strict=False)]
    # 1, 2, 4, 4, 4 s (each measured from the request before: at least the wait, which
    # starts when the master's answer arrives); before, about 1 s, 1 s, 1 s...
    for gap, wait in zip(gaps, [1.0, 2.0, 4.0, 4.0, 4.0], strict=True):
        assert gap >= wait * 0.95, (gaps, asks)
    assert minion.popen.poll() is None
