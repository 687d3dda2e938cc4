"""raetsalt._udpio.recv_many (the driver's recvmmsg): datagrams, sources spelled as
Python's socket module spells them, GRO segment sizes, an empty socket and a queued
ICMP error; and DatagramIO's ``drained`` built on it."""

from __future__ import annotations

import errno
import socket
import sys
from collections import Counter

import pytest

from raetsalt.drivers.batching import MMSG_BATCH, RECV_MANY, SLOT, UDP_GRO, DatagramIO

pytestmark = pytest.mark.skipif(
    RECV_MANY is None or not sys.platform.startswith("linux"), reason="no raetsalt._udpio"
)


def _pair(host: str) -> tuple[socket.socket, socket.socket]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    receiver = socket.socket(family, socket.SOCK_DGRAM)
    receiver.bind((host, 0))
    receiver.setblocking(False)
    sender = socket.socket(family, socket.SOCK_DGRAM)
    sender.bind((host, 0))
    return receiver, sender


def _drain(receiver: socket.socket, count: int = 8) -> list[tuple[int, int, int, object]]:
    assert RECV_MANY is not None
    buf = bytearray(count * SLOT)
    got = RECV_MANY(receiver.fileno(), buf, SLOT, count)
    assert isinstance(got, list)
    return got


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_every_waiting_datagram_in_one_call_with_its_source(host: str) -> None:
    try:
        receiver, sender = _pair(host)
    except OSError:
        pytest.skip(f"no {host}")
    with receiver, sender:
        payloads = [bytes([n]) * (n * 100 + 1) for n in range(5)]
        for data in payloads:
            sender.sendto(data, receiver.getsockname()[:2])
        assert RECV_MANY is not None
        buf = bytearray(8 * SLOT)
        got = RECV_MANY(receiver.fileno(), buf, SLOT, 8)
        assert [bytes(buf[start : start + size]) for start, size, _, _ in got] == payloads
        assert all(segment == size for _, size, segment, _ in got)
        expected = sender.getsockname()[:2]
        assert {source for *_, source in got} == {expected}
        assert RECV_MANY(receiver.fileno(), buf, SLOT, 8) == []  # empty: no exception


def test_a_full_batch_then_the_rest() -> None:
    receiver, sender = _pair("127.0.0.1")
    with receiver, sender:
        for n in range(11):
            sender.sendto(b"%d" % n, receiver.getsockname())
        first, second = _drain(receiver, 8), _drain(receiver, 8)
        assert (len(first), len(second)) == (8, 3)


def test_gro_trains_come_with_their_segment_size() -> None:
    receiver, sender = _pair("127.0.0.1")
    with receiver, sender:
        try:
            receiver.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
            control = [(socket.IPPROTO_UDP, 103, (1000).to_bytes(2, sys.byteorder))]
            sender.sendmsg([bytes(3500)], control, 0, receiver.getsockname())
        except OSError:
            pytest.skip("no UDP GSO/GRO here")
        got = _drain(receiver)
        sizes = [(size, segment) for _, size, segment, _ in got]
        # one train of 3 x 1000 + 500 bytes, or the kernel handed them apart
        assert sizes in ([(3500, 1000)], [(1000, 1000)] * 3 + [(500, 500)])


def test_a_queued_icmp_error_is_returned_once_as_its_errno() -> None:
    receiver, _ = _pair("127.0.0.1")
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    gone = closed.getsockname()
    closed.close()
    with receiver:
        receiver.connect(gone)  # ECONNREFUSED is reported on connected sockets
        receiver.send(b"x")
        assert RECV_MANY is not None
        buf = bytearray(SLOT)
        assert RECV_MANY(receiver.fileno(), buf, SLOT, 1) == errno.ECONNREFUSED
        assert RECV_MANY(receiver.fileno(), buf, SLOT, 1) == []


def test_arguments_out_of_range_are_refused() -> None:
    assert RECV_MANY is not None
    with pytest.raises(ValueError):
        RECV_MANY(0, bytearray(SLOT), SLOT, 2)  # no room for two slots
    with pytest.raises(ValueError):
        RECV_MANY(0, bytearray(SLOT * 65), SLOT, 65)
    with pytest.raises(TypeError):
        RECV_MANY(0, b"read-only", 1, 1)


def test_datagram_io_reports_a_short_read_as_drained() -> None:
    receiver, sender = _pair("127.0.0.1")
    with receiver, sender:
        io = DatagramIO(receiver, Counter(), gro=False)
        assert io.many
        for n in range(MMSG_BATCH + 2):
            sender.sendto(b"%d" % n, receiver.getsockname())
        seen: list[bytes] = []

        def handle(data: bytes, source: tuple[str, int]) -> None:
            seen.append(data)

        io.receive(bytearray(1), handle, 1 << 20)
        assert len(seen) == MMSG_BATCH and not io.drained
        io.receive(bytearray(1), handle, 1 << 20)
        assert len(seen) == MMSG_BATCH + 2 and io.drained
        assert seen == [b"%d" % n for n in range(MMSG_BATCH + 2)]
        assert io.stats["rx"] == MMSG_BATCH + 2
