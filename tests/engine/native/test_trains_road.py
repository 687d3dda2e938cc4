"""Roads on the native fast path behave the same whichever way datagrams come and go.

Two questions, each answered by running one seeded exchange twice and comparing every
datagram both roads send (byte for byte) and every event they report:

* the compiled kernel against the Python fallback (``RAETSALT_PURE_PYTHON``);
* GRO trains handed to ``Road.receive_train`` against the same datagrams handed one by
  one to ``Road.receive_datagram``, under loss, duplicates and corruption.

Keys and nonces come from a seeded generator so that two runs seal the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import nacl.utils
import pytest

from raetsalt.crypto import box as box_module
from raetsalt.engine import Road
from raetsalt.engine.events import Event, MessageDelivered, MessageReceived
from raetsalt.engine.native import trains
from raetsalt.testing.pair import MAIN_HA, MINION_HA, road_pair

NATIVE = {"native": True, "native_datagram_size": 1400, "native_trains": True}


@dataclass
class GroNet:
    """Zero-jitter delivery in virtual time that, like a GRO receive, hands a receiver
    the datagrams of one send batch as trains: runs of equal size, the last of a run may
    be shorter.  Loss, duplicates and corruption are drawn per datagram, so both ways
    of delivering see the same datagrams."""

    roads: dict[tuple[str, int], Road]
    trains: bool
    seed: int = 0
    loss: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    now: float = 0.0
    log: list[tuple[tuple[str, int], bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.queue: list[tuple[float, tuple[str, int], tuple[str, int], list[bytes]]] = []

    def _collect(self) -> None:
        for source, road in self.roads.items():
            for data, destination in road.datagrams_to_send(self.now):
                segment = getattr(data, "segment", len(data)) or 1
                survivors: list[bytes] = []
                for start in range(0, len(data), segment):
                    datagram = bytes(data[start : start + segment])
                    self.log.append((source, datagram))
                    for _ in range(2 if self.rng.random() < self.duplicate else 1):
                        if self.rng.random() < self.loss:
                            continue
                        if self.rng.random() < self.corrupt:
                            buf = bytearray(datagram)
                            buf[self.rng.randrange(len(buf))] ^= 0x10
                            datagram = bytes(buf)
                        survivors.append(datagram)
                if survivors:
                    self.queue.append((self.now + 0.0005, source, destination, survivors))

    def _deliver(self, source: tuple[str, int], road: Road, datagrams: list[bytes]) -> None:
        if not self.trains:
            for datagram in datagrams:
                road.receive_datagram(datagram, source, self.now)
            return
        for train, segment in _gro(datagrams):
            if len(train) == 1:
                road.receive_datagram(train[0], source, self.now)
            else:
                joined = memoryview(b"".join(train))
                if not road.receive_train(joined, segment, source, self.now):
                    for datagram in train:  # as the UDP driver does with a train not taken
                        road.receive_datagram(datagram, source, self.now)

    def run_until(self, done: Callable[[], bool], timeout: float = 30.0) -> bool:
        deadline = self.now + timeout
        while not done():
            self._collect()
            timers = [t for road in self.roads.values() if (t := road.get_timer()) is not None]
            moments = [t for t, *_ in self.queue] + timers
            if not moments or min(moments) > deadline:
                return False
            self.now = max(self.now, min(moments))
            due = [item for item in self.queue if item[0] <= self.now]
            self.queue = [item for item in self.queue if item[0] > self.now]
            for _, source, destination, datagrams in due:
                self._deliver(source, self.roads[destination], datagrams)
            for road in self.roads.values():
                when = road.get_timer()
                if when is not None and when <= self.now:
                    road.handle_timer(self.now)
        return True


def _gro(datagrams: list[bytes]) -> Iterator[tuple[list[bytes], int]]:
    train: list[bytes] = []
    for datagram in datagrams:
        if train and (len(datagram) > len(train[0]) or len(train[-1]) < len(train[0])):
            yield train, len(train[0])
            train = []
        train.append(datagram)
    if train:
        yield train, len(train[0])


@dataclass
class Outcome:
    sent: list[tuple[tuple[str, int], bytes]]
    events: dict[str, list[Event]]
    received: list[object]


def _exchange(monkeypatch: pytest.MonkeyPatch, kernel: trains.Kernel, *, gro: bool,
              **conditions: float) -> Outcome:
    seeded = random.Random(15)
    monkeypatch.setattr(nacl.utils, "random", seeded.randbytes)
    monkeypatch.setattr(box_module, "_random", seeded.randbytes)
    monkeypatch.setattr(trains, "KERNEL", kernel)
    pair = road_pair(seed=4, main_config=NATIVE, minion_config=NATIVE)
    assert pair.connect()
    roads = {MAIN_HA: pair.main.road, MINION_HA: pair.minion.road}
    net = GroNet(roads, gro, seed=7, now=pair.net.now, **conditions)
    minion, main, now = pair.minion.road, pair.main.road, net.now
    bulk = [{"n": n, "blob": bytes([n]) * 150_000} for n in range(3)]
    small = [{"n": n, "text": "x" * (n * 7)} for n in range(40)]
    for n in range(3):
        minion.send_message("main", bulk[n], now)
        for body in small[n * 10 : n * 10 + 10]:
            minion.send_message("main", body, now)
    minion.send_messages("main", small[30:], now)
    main.send_messages("minion", small[:20], now)
    expected = len(bulk) + len(small)
    assert net.run_until(lambda: len(pair.main.received()) == expected)
    assert net.run_until(lambda: sum(e.count for e in pair.minion.of(MessageDelivered)) == expected)
    assert sorted(b["n"] for b in pair.main.received() if "blob" in b) == [0, 1, 2]  # type: ignore[index]
    return Outcome(
        net.log,
        {"main": pair.main.events, "minion": pair.minion.events},
        pair.main.received(),
    )


CONDITIONS = [
    pytest.param({}, id="clean"),
    pytest.param({"loss": 0.03, "duplicate": 0.02, "corrupt": 0.01}, id="lossy"),
]


@pytest.mark.skipif(trains.COMPILED is None, reason="no compiled kernel to compare with")
@pytest.mark.parametrize("conditions", CONDITIONS)
def test_the_fallback_sends_and_reports_exactly_what_the_compiled_kernel_does(
    monkeypatch: pytest.MonkeyPatch, conditions: dict[str, float]
) -> None:
    assert trains.COMPILED is not None
    compiled = _exchange(monkeypatch, trains.COMPILED, gro=True, **conditions)
    fallback = _exchange(monkeypatch, trains.PyKernel(), gro=True, **conditions)
    assert len(compiled.sent) > 300
    assert compiled.sent == fallback.sent
    assert compiled.events == fallback.events


@pytest.mark.parametrize("conditions", CONDITIONS)
def test_gro_trains_are_taken_as_the_datagrams_one_by_one(
    monkeypatch: pytest.MonkeyPatch, conditions: dict[str, float]
) -> None:
    trained = _exchange(monkeypatch, trains.KERNEL, gro=True, **conditions)
    single = _exchange(monkeypatch, trains.KERNEL, gro=False, **conditions)
    assert trained.sent == single.sent
    assert trained.events == single.events
    assert [type(e) for e in trained.events["main"]].count(MessageReceived) == 43


def test_a_train_can_be_the_first_native_traffic(monkeypatch: pytest.MonkeyPatch) -> None:
    # The replay window allocates its bits at the first mark: a session whose first
    # datagrams come as one GRO train must open them all the same.
    pair = road_pair(seed=5, main_config=NATIVE, minion_config=NATIVE)
    assert pair.connect()
    roads = {MAIN_HA: pair.main.road, MINION_HA: pair.minion.road}
    net = GroNet(roads, True, now=pair.net.now)
    taken: list[bool] = []
    receive_train = pair.main.road.receive_train

    def spy(data: memoryview, segment: int, source: tuple[str, int], now: float) -> bool:
        taken.append(receive_train(data, segment, source, now))
        return taken[-1]

    monkeypatch.setattr(pair.main.road, "receive_train", spy)
    blob = {"blob": b"b" * 100_000}
    pair.minion.road.send_message("main", blob, net.now)
    assert net.run_until(lambda: pair.main.received() == [blob])
    assert taken and taken[0]
