"""A joiner whose key is pending waits between its asks as Salt's minion does
(``acceptance_wait_time``, doubling up to ``acceptance_wait_time_max``), on the engine's
manual clock; the main's ``busy`` answer still comes first."""

from __future__ import annotations

import pytest

from raetsalt.engine.events import Allowed, JoinPending, TransactionFailed
from raetsalt.engine.join import MIN_ACCEPTANCE_WAIT, next_acceptance_wait
from raetsalt.engine.road import Road
from raetsalt.keep.policy import Action
from raetsalt.keep.records import AutoMode
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, road_pair
from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted


class JoinClock:
    """The main as FakeNet sees it, noting when join requests from the minion arrive
    and which join replies it sends back."""

    def __init__(self, road: Road) -> None:
        self.road = road
        self.asks: list[float] = []
        self.replies: list[tuple[float, PacketKind]] = []

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        kind = _join_kind(data)
        if address == MINION_HA and kind == PacketKind.REQUEST:
            self.asks.append(now)
        self.road.receive_datagram(data, address, now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = self.road.datagrams_to_send(now)
        for data, address in out:
            kind = _join_kind(bytes(data))
            if address == MINION_HA and kind is not None:
                self.replies.append((now, kind))
        return out

    def get_timer(self) -> float | None:
        return self.road.get_timer()

    def handle_timer(self, now: float) -> None:
        self.road.handle_timer(now)


def _join_kind(data: bytes) -> PacketKind | None:
    try:
        header = parse_packet_untrusted(data).header
    except Exception:  # noqa: BLE001 - native datagrams are no join packets
        return None
    if header.transaction_kind != TransactionKind.JOIN:
        return None
    return PacketKind(header.packet_kind)


def _pending_pair(conditions: Conditions | None = None, **minion: float) -> tuple[Pair, JoinClock]:
    pair = road_pair(conditions, main_config={"auto": AutoMode.NEVER}, minion_config=minion)
    clock = JoinClock(pair.main.road)
    pair.net.attach(MAIN_HA, clock)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    return pair, clock


def _gaps(times: list[float]) -> list[float]:
    return [round(b - a, 1) for a, b in zip(times, times[1:], strict=False)]


def test_the_wait_sequence_follows_salts_doubling_and_stops_at_the_ceiling() -> None:
    def sequence(base: float, ceiling: float, n: int = 6) -> list[float]:
        waits, wait = [], max(MIN_ACCEPTANCE_WAIT, base)
        for _ in range(n):
            waits.append(wait)
            wait = next_acceptance_wait(wait, base, ceiling)
        return waits

    assert sequence(10.0, 0.0) == [10.0] * 6  # Salt's defaults: no growth
    assert sequence(10.0, 5.0) == [10.0] * 6  # a ceiling below the wait: none either
    assert sequence(10.0, 80.0) == [10.0, 20.0, 40.0, 80.0, 80.0, 80.0]
    assert sequence(10.0, 25.0) == [10.0, 20.0, 25.0, 25.0, 25.0, 25.0]  # Salt: 40
    assert sequence(0.0, 0.0) == [MIN_ACCEPTANCE_WAIT] * 6  # never a flood


def test_a_pending_joiner_asks_every_acceptance_wait_time_by_default() -> None:
    pair, clock = _pending_pair()
    assert pair.until(lambda: bool(pair.minion.of(JoinPending)), timeout=5)
    pair.until(lambda: False, timeout=305)
    # Salt's 10 s, not raet's half second: 31 asks in five minutes, not 600.
    assert len(clock.asks) == 31
    assert set(_gaps(clock.asks)) == {10.0}
    assert {kind for _, kind in clock.replies} == {PacketKind.PEND}
    assert not pair.minion.of(TransactionFailed)  # one join, pending all along


def test_the_wait_doubles_up_to_acceptance_wait_time_max() -> None:
    pair, clock = _pending_pair(acceptance_wait_time=5.0, acceptance_wait_time_max=40.0)
    pair.until(lambda: False, timeout=300)
    assert _gaps(clock.asks) == [5.0, 10.0, 20.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0]


def test_duplicated_and_lost_packets_do_not_change_the_pace() -> None:
    """A duplicated ``pend`` must not advance the wait twice; a lost one must not stop
    the asks (the joiner asks again after the wait, answered or not)."""
    pair, clock = _pending_pair(
        Conditions(duplicate=0.5, loss=0.2), acceptance_wait_time=4.0,
        acceptance_wait_time_max=16.0,
    )
    pair.until(lambda: False, timeout=200)
    asks = sorted(set(round(t, 1) for t in clock.asks))  # duplicated requests count once
    gaps = _gaps(asks)
    assert gaps[:2] == [4.0, 8.0] or gaps[0] == 4.0
    assert all(gap >= 4.0 for gap in gaps)
    assert all(gap <= 16.0 + 0.1 for gap in gaps)
    assert len(asks) >= 200 / 16.0


def test_an_operator_accept_lets_the_waiting_minion_in_at_once() -> None:
    pair, clock = _pending_pair(acceptance_wait_time=60.0)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)), timeout=5)
    pair.until(lambda: False, timeout=20)
    assert pair.accept("minion")
    accepted_at = pair.net.now
    assert pair.until(lambda: bool(pair.minion.of(Allowed)), timeout=5)
    assert pair.net.now - accepted_at < 1.0  # the main answered the ask it held
    assert len(clock.asks) == 1


def test_a_deleted_pending_key_is_asked_for_again_only_after_the_wait() -> None:
    pair, clock = _pending_pair()
    assert pair.until(lambda: bool(pair.main.of(JoinPending)), timeout=5)
    pair.until(lambda: False, timeout=3)
    assert pair.main.decide(Action.DELETE, "minion", pair.net.now)
    deleted_at = pair.net.now
    assert pair.main_keep.load_role("minion") is None
    pair.until(lambda: pair.main_keep.load_role("minion") is not None, timeout=30)
    assert pair.net.now - deleted_at == pytest.approx(10.0 - 3.0, abs=0.1)
    assert len([t for t in clock.asks if t > deleted_at]) == 1


def test_a_busy_main_comes_first_and_the_wait_carries_over() -> None:
    pair, clock = _pending_pair(acceptance_wait_time=5.0, acceptance_wait_time_max=20.0,
                                busy_retry=1.0, retry_max=2.0)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)), timeout=5)
    pair.until(lambda: False, timeout=4.0)
    # The main restarts, loaded: the ask at 5 s is a join it does not hold, answered busy.
    pair.restart_main(auto=AutoMode.NEVER)
    clock.road = pair.main.road
    pair.net.attach(MAIN_HA, clock)
    pair.main.road.admission.loaded = True
    pair.until(lambda: bool(pair.minion.of(TransactionFailed)), timeout=5)
    assert [(f.kind, f.reason) for f in pair.minion.of(TransactionFailed)] == [("join", "busy")]
    busy_at = pair.net.now
    assert [kind for _, kind in clock.replies] == [PacketKind.PEND, PacketKind.BUSY]
    pair.main.road.admission.loaded = False
    pair.until(lambda: len(clock.asks) >= 3, timeout=10)
    # The busy answer's back-off, not the acceptance wait, set the next ask...
    assert clock.asks[2] - busy_at <= 2.0 + 0.1
    pair.until(lambda: False, timeout=60)
    # ... and the pending pace went on from where it was (5, then 10, then 20), not anew.
    pended = [t for t, kind in clock.replies if kind == PacketKind.PEND]
    assert _gaps(pended[1:])[:3] == [10.0, 20.0, 20.0]

