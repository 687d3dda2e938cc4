"""RoadStack over real loopback sockets: sessions, large messages, garbage, IPv6, EAGAIN."""

from __future__ import annotations

import errno
import os
import selectors
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from raetsalt.drivers.udp import Accept, RoadStack, StackTimeout, format_ha, parse_ha
from raetsalt.engine.events import (
    Allowed,
    DropReason,
    Event,
    MessageDelivered,
    MessageReceived,
    PacketDropped,
)
from raetsalt.engine.road import RoadConfig
from raetsalt.errors import LocalError
from raetsalt.keep.records import AutoMode

pytestmark = pytest.mark.integration

Events = dict[RoadStack, list[Event]]


def pattern_body(size: int, tag: str) -> dict[str, str]:
    """A JSON object with a non-repeating filler, so a misplaced segment changes it."""
    fill = "".join(chr(0x41 + (i * 7 + i // 26) % 26) for i in range(size))
    return {"tag": tag, "fill": fill}


class Pump:
    """Service several stacks from one shared selector (the embedding API)."""

    def __init__(self, *stacks: RoadStack) -> None:
        self.stacks = stacks
        self.selector = selectors.DefaultSelector()
        for stack in stacks:
            stack.register(self.selector, stack)
        self.events: Events = {s: [] for s in stacks}

    def until(self, done: Callable[[Events], bool], timeout: float = 10.0) -> Events:
        import time  # the test's own deadline; the stacks read raetsalt.drivers.clock

        deadline = time.monotonic() + timeout
        while not done(self.events):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition not met within {timeout} s: {self.events}")
            waits = [w for s in self.stacks if (w := s.timeout()) is not None]
            self.selector.select(min([remaining, *waits]))
            for stack in self.stacks:
                self.events[stack].extend(stack.service_ready())
        return self.events

    def close(self) -> None:
        for stack in self.stacks:
            stack.unregister(self.selector)
        self.selector.close()


def of(events: list[Event], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def connect(pump: Pump, main: RoadStack, minion: RoadStack) -> int:
    uid = minion.connect(main.address)
    pump.until(lambda ev: bool(of(ev[main], Allowed)) and bool(of(ev[minion], Allowed)))
    assert minion.road.remote(uid).name == "main"
    return uid


def exchange(pump: Pump, sender: RoadStack, receiver: RoadStack, to: str, body: dict) -> None:
    mid = sender.send(to, body)
    pump.events[sender].clear()
    pump.events[receiver].clear()
    pump.until(
        lambda ev: any(e.mid == mid for e in of(ev[sender], MessageDelivered))
        and bool(of(ev[receiver], MessageReceived)),
        timeout=20,
    )
    (got,) = of(pump.events[receiver], MessageReceived)
    assert got.body == body


@contextmanager
def open_pair(tmp_path: Path, config: RoadConfig, accept: Accept = "anyone"
              ) -> Iterator[tuple[Pump, RoadStack, RoadStack]]:
    """A main and a minion (taking datagrams as ``accept`` says) on loopback, pumped."""
    main = RoadStack(tmp_path / "main", ("127.0.0.1", 0), name="main", main=True,
                     auto=AutoMode.ONCE, config=config)
    minion = RoadStack(tmp_path / "minion", ("127.0.0.1", 0), name="minion",
                       auto=AutoMode.ONCE, config=config, accept=accept)
    with main, minion:
        pump = Pump(main, minion)
        yield pump, main, minion
        pump.close()
        assert main.stats["engine_error"] == minion.stats["engine_error"] == 0


@pytest.fixture(params=["raet", "native"])
def pair(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Pump, RoadStack, RoadStack]]:
    with open_pair(tmp_path, RoadConfig(native=request.param == "native")) as opened:
        yield opened


def test_session_and_messages_of_every_size_both_ways(pair) -> None:
    pump, main, minion = pair
    assert main.address[1] != 0 and main.address[0] == "127.0.0.1"
    # 4 MiB asked; the kernel caps (and doubles) it, but never below its default
    assert main.rcvbuf >= 200_000 and main.sndbuf >= 200_000
    connect(pump, main, minion)
    for size in (100, 64 * 1024, 1024 * 1024):
        exchange(pump, minion, main, "main", pattern_body(size, f"up{size}"))
        exchange(pump, main, minion, "minion", pattern_body(size, f"down{size}"))
    if minion.road.remote("main").profile == "raet":
        # a 1 MiB body really went out as about a thousand 1 KiB datagrams
        assert minion.stats["tx"] > 1000 and main.stats["rx"] > 1000
    else:
        # native on loopback: 64 KB datagrams, so a few dozen carry everything
        assert minion.road.remote("main").channel.datagram_size > 60_000
        assert 16 <= minion.stats["tx"] < 200


def test_garbage_burst_is_counted_and_session_survives(pair) -> None:
    pump, main, minion = pair
    connect(pump, main, minion)
    garbage = [b"", b"\x00" * 10, b"ri RAET\npl 0014\nhl 14\nbogus\n\n", b"\xff" * 1500,
               b"ri RAET\n" * 200, bytes(range(256)) * 4]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        for i in range(300):
            raw.sendto(garbage[i % len(garbage)], main.address)
    pump.events[main].clear()
    pump.until(lambda ev: len(of(ev[main], PacketDropped)) >= 300)
    drops = of(pump.events[main], PacketDropped)
    # Every piece of garbage is refused by the wire parser: a bad head, or a length over
    # the packet size or disagreeing with pl/hl.
    assert {d.reason for d in drops} == {DropReason.HEADER, DropReason.LENGTH}
    assert main.dropped >= 300
    assert main.road.stats["drop_header"] + main.road.stats["drop_length"] >= 300
    exchange(pump, minion, main, "main", pattern_body(5000, "after-garbage"))
    exchange(pump, main, minion, "minion", pattern_body(100, "reply"))


def test_ipv6_loopback(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    main = RoadStack(tmp_path / "m6", ("::1", 0), name="main", main=True, auto=AutoMode.ONCE)
    minion = RoadStack(tmp_path / "n6", ("::1", 0), name="minion", auto=AutoMode.ONCE)
    with main, minion:
        assert main.family == socket.AF_INET6 and main.address[0] == "::1"
        assert format_ha(main.address) == f"[::1]:{main.address[1]}"
        pump = Pump(main, minion)
        connect(pump, main, minion)
        exchange(pump, minion, main, "main", pattern_body(64 * 1024, "v6"))
        pump.close()


class FlakySocket(socket.socket):
    """A real UDP socket whose sendto reports EAGAIN every third call."""

    calls = 0

    def sendto(self, data: Any, address: Any) -> int:  # type: ignore[override]
        FlakySocket.calls += 1
        if FlakySocket.calls % 3 == 0:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        return super().sendto(data, address)


def test_eagain_keeps_datagrams_queued_and_waits_for_writability(tmp_path: Path) -> None:
    sock = FlakySocket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1024)  # the kernel's minimum
    sock.bind(("127.0.0.1", 0))
    main = RoadStack(tmp_path / "main", ("127.0.0.1", 0), name="main", main=True,
                     auto=AutoMode.ONCE)
    # One sendto per datagram (the batched calls bypass the flaky sendto).
    one_by_one = {"gso": False, "mmsg": False}
    minion = RoadStack(
        tmp_path / "minion", name="minion", auto=AutoMode.ONCE, sock=sock, batching=one_by_one
    )
    with main, minion:
        assert minion.sndbuf < 20_000
        pump = Pump(main, minion)
        connect(pump, main, minion)
        exchange(pump, minion, main, "main", pattern_body(1024 * 1024, "blocked"))
        # the forced EAGAINs really happened (fewer with native's 64 KB datagrams)
        assert minion.stats["tx_blocked"] >= 5
        assert minion.queued == 0
        pump.close()


def test_no_port_sharing(tmp_path: Path) -> None:
    with RoadStack(tmp_path / "a", name="a") as first:
        with pytest.raises(LocalError, match="in use"):
            RoadStack(tmp_path / "b", first.address, name="b").open()


def test_run_until_and_messages_iterator(tmp_path: Path) -> None:
    main = RoadStack(tmp_path / "main", name="main", main=True, auto=AutoMode.ONCE)
    minion = RoadStack(tmp_path / "minion", name="minion", auto=AutoMode.ONCE)
    with main, minion:
        # With no remote and no timer, an idle wake-up waits for the timeout and
        # returns nothing (no event is invented, nothing is read).
        assert main.road.get_timer() is None and main.service(0.01) == []
        with pytest.raises(StackTimeout):
            main.run_until(lambda ev: False, 0.05)
        uid = minion.connect(main.address)
        # The two stacks share this thread: alternate short wake-ups.
        def both_allowed(_events: list[Event]) -> bool:
            main.service(0.005)
            return minion.road.remote(uid).allowed and main.road.remote("minion").allowed
        minion.run_until(both_allowed, 5)
        minion.send(uid, {"n": 1})
        minion.send(uid, {"n": 2})
        got: list[Any] = []
        others: list[Event] = []
        for _ in range(500):
            # messages() returns when its timeout expires; the minion needs the acks
            got.extend(m.body for m in main.messages(timeout=0.005, on_event=others.append))
            minion.service(0.001)
            if len(got) == 2:
                break
        assert got == [{"n": 1}, {"n": 2}]
        assert not any(isinstance(e, MessageReceived) for e in others)


@pytest.mark.parametrize(
    ("text", "ha"),
    [("10.0.0.1:7530", ("10.0.0.1", 7530)), (":4506", ("127.0.0.1", 4506)),
     ("[::1]:0", ("::1", 0)), ("7530", ("127.0.0.1", 7530))],
)
def test_parse_ha(text: str, ha: tuple[str, int]) -> None:
    assert parse_ha(text) == ha


@pytest.mark.parametrize("text", ["host:port", "::1:7530", "[::1]7530", "h:70000"])
def test_parse_ha_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ha(text)


def test_a_privileged_stack_gets_buffers_past_the_system_cap(tmp_path: Path) -> None:
    """A master asks for 16 MiB; root may have it past net.core.rmem_max (the kernel
    doubles what it grants), anyone else gets the cap, and the stack still opens."""
    cap = int(Path("/proc/sys/net/core/rmem_max").read_text())
    asked = max(16 << 20, cap + (1 << 20))
    with RoadStack(tmp_path / "big", ("127.0.0.1", 0), name="big", main=True,
                   buffer_size=asked) as stack:
        if os.geteuid() == 0:
            assert stack.rcvbuf >= 2 * asked > 2 * cap and stack.sndbuf >= 2 * asked
        else:
            assert stack.rcvbuf <= 2 * cap
