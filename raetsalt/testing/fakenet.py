"""An in-memory datagram network with a seeded route hook, for deterministic engine tests.

``FakeNet`` moves datagrams between engines that have the sans-IO surface
(``receive_datagram`` / ``datagrams_to_send`` / ``get_timer`` / ``handle_timer``) and
can lose, duplicate, delay (and so reorder) and corrupt them, all drawn from one
``random.Random`` so a seed replays the same run.  Time is virtual: ``run_until`` jumps
from one event (delivery or timer) to the next, so a 30-second time-out costs nothing.

A path can also pass a bottleneck (``add_link``): a hop with a link rate, a one-way
delay and a drop-tail queue, so congestion (queueing delay, queue overflow, competing
flows) happens deterministically too.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol


class Engine(Protocol):
    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None: ...

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]: ...

    def get_timer(self) -> float | None: ...

    def handle_timer(self, now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Conditions:
    """What the network does to each datagram; probabilities are per datagram."""

    loss: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    latency: float = 0.0005
    jitter: float = 0.0
    """Extra random delay in [0, jitter); larger than the sending gap means reordering."""


_Ends = Collection[tuple[str, int]] | None
"""The addresses at one end of the paths a link carries (None: any)."""


@dataclass(frozen=True, slots=True)
class Link:
    """A bottleneck hop: what a datagram meets between its sender and the rest of the path.

    Datagrams are sent one after the other at ``rate`` bytes per second, in arrival order;
    the hop holds at most ``queue`` of them (the one being sent included) and drops any
    that arrive while it is full (drop-tail).  A datagram then travels ``delay`` seconds
    (one way) before the net's own ``Conditions`` latency applies.  ``loss`` drops
    datagrams at random as they arrive, before the queue (a lossy line, not congestion).
    """

    rate: float
    delay: float = 0.0
    queue: int = 64
    loss: float = 0.0

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.delay >= 0 and self.queue >= 1 and 0 <= self.loss <= 1):
            raise ValueError(f"not a link: {self}")


@dataclass(eq=False)
class Bottleneck:
    """One ``Link`` on a ``FakeNet`` and what it did: ``forwarded`` datagrams and bytes,
    ``dropped`` (the queue was full) and ``lost`` (the link's random loss)."""

    link: Link
    forwarded: int = 0
    forwarded_bytes: int = 0
    dropped: int = 0
    lost: int = 0
    peak_queue: int = 0
    _busy_until: float = 0.0
    _departures: deque[float] = field(default_factory=deque)

    def admit(self, now: float, size: int, rng: random.Random) -> float | None:
        """When a datagram of ``size`` bytes arriving ``now`` leaves the hop (None:
        dropped)."""
        link = self.link
        if link.loss and rng.random() < link.loss:
            self.lost += 1
            return None
        departures = self._departures
        while departures and departures[0] <= now:
            departures.popleft()
        if len(departures) >= link.queue:
            self.dropped += 1
            return None
        start = self._busy_until if self._busy_until > now else now
        self._busy_until = done = start + size / link.rate
        departures.append(done)
        if len(departures) > self.peak_queue:
            self.peak_queue = len(departures)
        self.forwarded += 1
        self.forwarded_bytes += size
        return done + link.delay


@dataclass
class FakeNet:
    """Datagram delivery between registered engines, in virtual time."""

    conditions: Conditions = field(default_factory=Conditions)
    seed: int = 0
    now: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.hosts: dict[tuple[str, int], Engine] = {}
        self.down: set[tuple[str, int]] = set()
        self._queue: list[
            tuple[float, int, bytes | bytearray, tuple[str, int], tuple[str, int]]
        ] = []
        self._seq = itertools.count()
        self.delivered = 0
        self.lost = 0
        self.links: list[tuple[Bottleneck, _Ends, _Ends]] = []
        self._paths: dict[tuple[tuple[str, int], tuple[str, int]], Bottleneck | None] = {}

    def attach(self, address: tuple[str, int], engine: Engine) -> None:
        self.hosts[address] = engine
        self.down.discard(address)

    def detach(self, address: tuple[str, int]) -> None:
        """The host is gone (crashed): datagrams to it vanish, its timers stop."""
        self.hosts.pop(address, None)

    def add_link(
        self,
        link: Link,
        *,
        sources: _Ends = None,
        destinations: _Ends = None,
    ) -> Bottleneck:
        """Send datagrams from ``sources`` to ``destinations`` (None: any) through ``link``.

        A datagram passes at most one bottleneck, the first added that matches its path;
        model each direction of a path with its own link."""
        bottleneck = Bottleneck(link)
        self.links.append((bottleneck, sources, destinations))
        self._paths.clear()
        return bottleneck

    def _bottleneck(
        self, source: tuple[str, int], destination: tuple[str, int]
    ) -> Bottleneck | None:
        path = (source, destination)
        if path not in self._paths:
            self._paths[path] = next(
                (
                    bottleneck
                    for bottleneck, sources, destinations in self.links
                    if (sources is None or source in sources)
                    and (destinations is None or destination in destinations)
                ),
                None,
            )
        return self._paths[path]

    def _collect(self) -> None:
        cond, rng = self.conditions, self.rng
        for source, engine in list(self.hosts.items()):
            for data, destination in engine.datagrams_to_send(self.now):
                copies = 2 if cond.duplicate and rng.random() < cond.duplicate else 1
                for _ in range(copies):
                    if cond.loss and rng.random() < cond.loss:
                        self.lost += 1
                        continue
                    if cond.corrupt and rng.random() < cond.corrupt and data:
                        buf = bytearray(data)
                        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
                        data = bytes(buf)
                    start = self.now
                    if self.links:
                        bottleneck = self._bottleneck(source, destination)
                        if bottleneck is not None:
                            leaves = bottleneck.admit(start, len(data), rng)
                            if leaves is None:
                                continue
                            start = leaves
                    delay = cond.latency + (rng.random() * cond.jitter if cond.jitter else 0.0)
                    heapq.heappush(
                        self._queue, (start + delay, next(self._seq), data, source, destination)
                    )

    def step(self, until: float) -> bool:
        """Advance to the next delivery or timer at or before ``until``; False if none."""
        self._collect()
        timers = [(t, a) for a, e in self.hosts.items() if (t := e.get_timer()) is not None]
        next_timer = min(timers)[0] if timers else None
        next_packet = self._queue[0][0] if self._queue else None
        candidates = [t for t in (next_timer, next_packet) if t is not None and t <= until]
        if not candidates:
            return False
        self.now = max(self.now, min(candidates))
        while self._queue and self._queue[0][0] <= self.now:
            _, _, data, source, destination = heapq.heappop(self._queue)
            engine = self.hosts.get(destination)
            if engine is not None:
                self.delivered += 1
                engine.receive_datagram(bytes(data), source, self.now)  # as a socket reads it
        for engine in list(self.hosts.values()):
            when = engine.get_timer()
            if when is not None and when <= self.now:
                engine.handle_timer(self.now)
        self._collect()
        return True

    def run_until(
        self, done: Callable[[], bool], *, timeout: float = 60.0, max_steps: int = 2_000_000
    ) -> bool:
        """Step until ``done()`` or virtual ``timeout`` seconds pass; returns ``done()``."""
        deadline = self.now + timeout
        for _ in range(max_steps):
            if done():
                return True
            if not self.step(deadline):
                self.now = max(self.now, deadline)
                return done()
        raise AssertionError("FakeNet.run_until: step budget exhausted (livelock?)")


@dataclass
class RawHost:
    """A host on a ``FakeNet`` with no engine: it sends what a test queues (``send``) and
    records every datagram it receives (an attacker, or a spoofed address)."""

    received: list[tuple[bytes, tuple[str, int]]] = field(default_factory=list)
    _queue: list[tuple[bytes, tuple[str, int]]] = field(default_factory=list)
    sent_bytes: int = 0

    def send(self, data: bytes, to: tuple[str, int]) -> None:
        self._queue.append((data, to))
        self.sent_bytes += len(data)

    @property
    def received_bytes(self) -> int:
        return sum(len(data) for data, _ in self.received)

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        self.received.append((data, address))

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out, self._queue = self._queue, []
        return out

    def get_timer(self) -> float | None:
        return None

    def handle_timer(self, now: float) -> None:
        return None
