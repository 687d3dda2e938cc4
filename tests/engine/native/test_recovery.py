"""Loss recovery of a native channel alone (``raetsalt.engine.native.recovery``): records
of packets in flight, acknowledgements and round-trip samples, loss by packet and time
threshold, spurious losses, the probe time-out, and a cut ack.  No channel, no network:
packets are "sent" by calling ``on_sent`` at chosen times, their frames are tokens."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from raetsalt.engine.native.congestion import Controller
from raetsalt.engine.native.frames import ACK_DELAY, MAX_ACK_RANGES
from raetsalt.engine.native.recovery import (
    INITIAL_RTT,
    MAX_PTO,
    MIN_PTO,
    PACKET_THRESHOLD,
    PROBE_PACKETS,
    Recovery,
)
from raetsalt.errors import BadPacket

SIZE = 1200


class Harness:
    """A ``Recovery`` and what it told its callbacks."""

    def __init__(self) -> None:
        self.acked: list[Any] = []
        self.lost: list[Any] = []
        self.stats: Counter[str] = Counter()
        self.cc = Controller(SIZE, 64 * SIZE)
        self.recovery = Recovery(self.cc, acked=self._acked, lost=self._lost, stats=self.stats)

    def _acked(self, frames: list[Any]) -> None:
        self.acked.extend(frames)

    def _lost(self, frames: list[Any]) -> int:
        self.lost.extend(frames)
        return len(frames)

    def send(self, count: int, at: float) -> list[int]:
        """``count`` packets at ``at``, each carrying the token of its counter."""
        rec = self.recovery
        return [rec.on_sent(at, SIZE, [("frame", rec.counter + 1)]) for _ in range(count)]


def tokens(*counters: int) -> list[tuple[str, int]]:
    return [("frame", counter) for counter in counters]


def test_records_in_flight_and_an_ack_frees_them_with_a_round_trip_sample() -> None:
    h = Harness()
    rec = h.recovery
    assert h.send(3, at=1.0) == [1, 2, 3]
    assert rec.bytes_in_flight == 3 * SIZE and rec.in_flight()
    assert rec.oldest_unacked() == 1
    assert rec.srtt == INITIAL_RTT and not rec.rtt_sampled
    assert rec.on_ack([(1, 2)], now=1.04)
    assert h.acked == tokens(1, 2) and h.lost == []
    assert rec.bytes_in_flight == SIZE and rec.oldest_unacked() == 3
    assert rec.rtt_sampled and rec.srtt == pytest.approx(0.04)  # the first sample replaces
    assert rec.rttvar == pytest.approx(0.02)
    assert rec.largest_acked == 2
    # A second sample is smoothed (RFC 9002 5.3).
    assert rec.on_ack([(3, 3)], now=1.08)
    assert rec.srtt == pytest.approx(0.875 * 0.04 + 0.125 * 0.08)
    assert not rec.in_flight() and rec.oldest_unacked() == 4
    assert rec.get_timer() is None


def test_an_ack_of_nothing_in_flight_changes_nothing() -> None:
    h = Harness()
    rec = h.recovery
    h.send(2, at=0.0)
    assert rec.on_ack([(1, 2)], now=0.01)
    assert not rec.on_ack([(1, 2)], now=0.02)  # (a repeated ack)
    assert h.acked == tokens(1, 2) and rec.largest_acked == 2


@pytest.mark.parametrize("ranges", [[(2, 1)], [(1, 4)], [(1, 1), (5, 9)]])
def test_an_ack_naming_packets_never_sent_is_refused(ranges: list[tuple[int, int]]) -> None:
    h = Harness()
    h.send(3, at=0.0)
    with pytest.raises(BadPacket, match="never sent"):
        h.recovery.on_ack(ranges, now=0.01)
    assert h.acked == [] and h.recovery.bytes_in_flight == 3 * SIZE


def test_a_packet_is_lost_when_enough_later_packets_are_acknowledged() -> None:
    h = Harness()
    rec = h.recovery
    h.send(6, at=0.0)
    # 6 acked: 6 - PACKET_THRESHOLD = 3, so 1, 2 and 3 are lost; 4 and 5 may be reordered.
    rec.on_ack([(6, 6)], now=0.01)
    assert h.lost == tokens(1, 2, 3)
    assert h.stats["native_retransmit"] == 3
    assert rec.bytes_in_flight == 2 * SIZE
    assert rec.oldest_unacked() == 4
    assert PACKET_THRESHOLD == 3


def test_a_packet_is_lost_when_older_than_the_round_trip_allows() -> None:
    h = Harness()
    rec = h.recovery
    h.send(1, at=0.0)
    h.send(1, at=0.1)
    rec.on_ack([(2, 2)], now=0.11)  # a 10 ms round trip: packet 1 is 110 ms old
    assert h.lost == tokens(1)
    # Within 9/8 of the round trip a packet below the largest acked is not lost yet.
    h2 = Harness()
    h2.send(2, at=0.0)
    h2.recovery.on_ack([(2, 2)], now=0.015)  # packet 1 is one round trip old
    assert h2.lost == []


def test_a_loss_that_proves_spurious_makes_the_threshold_larger() -> None:
    h = Harness()
    rec = h.recovery
    h.send(5, at=0.0)
    rec.on_ack([(5, 5)], now=0.01)
    assert h.lost == tokens(1, 2)
    assert set(rec.declared_lost) == {1, 2}
    rec.on_ack([(1, 1), (5, 5)], now=0.011)  # packet 1 was only late
    assert h.stats["native_spurious_retransmit"] == 1
    assert rec.reorder_threshold == 2 * PACKET_THRESHOLD


def test_the_probe_time_out_sends_the_oldest_packets_again_and_backs_off() -> None:
    h = Harness()
    rec = h.recovery
    h.send(4, at=0.0)
    pto = rec.pto
    # srtt + max(4 rttvar, MIN_PTO) + max(srtt / 8, ACK_DELAY), before any sample
    expected = INITIAL_RTT + max(2 * INITIAL_RTT, MIN_PTO) + max(INITIAL_RTT / 8, ACK_DELAY)
    assert pto == pytest.approx(expected)
    assert rec.get_timer() == pytest.approx(pto)
    assert not rec.on_timeout(pto / 2)
    assert h.lost == []
    assert rec.on_timeout(pto)
    assert h.lost == tokens(1, 2)  # PROBE_PACKETS, oldest first
    assert PROBE_PACKETS == 2
    assert rec.pto_count == 1 and rec.pto == pytest.approx(2 * pto)
    # The next time-out counts from the probe, with the doubled time-out.
    assert rec.get_timer() == pytest.approx(pto + 2 * pto)
    assert rec.on_timeout(3 * pto)
    assert h.lost == tokens(1, 2, 3, 4) and rec.pto_count == 2
    assert not rec.in_flight()
    # An ack resets the back-off.
    h.send(1, at=1.0)
    rec.on_ack([(5, 5)], now=1.01)
    assert rec.pto_count == 0 and rec.pto < pto


def test_the_probe_time_out_is_capped() -> None:
    h = Harness()
    rec = h.recovery
    h.send(40, at=0.0)
    now = 0.0
    for _ in range(20):
        when = rec.get_timer()
        if when is None:
            break
        now = when
        rec.on_timeout(now)
        assert rec.pto <= MAX_PTO
    assert rec.pto == MAX_PTO


def test_counters_without_records_keep_later_records_at_their_own_counters() -> None:
    h = Harness()
    rec = h.recovery
    assert rec.on_sent(0.0, SIZE, None) == 1  # e.g. a key frame: nothing to send again
    assert rec.on_sent(0.0, SIZE, None) == 2
    h.send(1, at=0.0)  # counter 3
    rec.on_sent_run(0.0, [tokens(4), tokens(5), tokens(6)], SIZE, SIZE + 1)
    assert rec.counter == 6
    assert rec.bytes_in_flight == 4 * SIZE + 1
    for counter in (3, 4, 5, 6):
        record = rec.record(counter)
        assert record is not None and record.frames == tokens(counter)
    record = rec.record(6)
    assert record is not None and record.size == SIZE + 1
    assert rec.record(1) is None and rec.record(2) is None
    assert rec.oldest_unacked() == 3
    rec.on_ack([(4, 4)], now=0.01)
    assert h.acked == tokens(4)


def test_below_a_cut_ack_nothing_is_declared_lost() -> None:
    # A receiver keeps MAX_ACK_RANGES ranges: an ack that has that many says nothing
    # about what lies below its lowest range, so those packets wait (later ack or probe).
    h = Harness()
    rec = h.recovery
    h.send(3 * MAX_ACK_RANGES + 10, at=0.0)
    ranges = [(10 + 2 * i, 10 + 2 * i) for i in range(MAX_ACK_RANGES)]  # every other one
    rec.on_ack(ranges, now=0.001)
    lost = {counter for _, counter in h.lost}
    assert lost and min(lost) >= 10  # 1..9 lie below the cut: not declared
    assert all(counter % 2 == 1 for counter in lost)
    # A full ack's ranges reach its LEAST: then the head's losses are declared.
    h2 = Harness()
    h2.send(8, at=0.0)
    h2.recovery.on_ack([(5, 8)], now=0.001)
    assert {counter for _, counter in h2.lost} == {1, 2, 3, 4}


def test_a_new_path_starts_the_estimates_afresh() -> None:
    h = Harness()
    rec = h.recovery
    h.send(1, at=0.0)
    rec.on_ack([(1, 1)], now=0.3)
    assert rec.srtt == pytest.approx(0.3)
    fresh = Controller(SIZE, 64 * SIZE)
    rec.new_path(fresh)
    assert rec.cc is fresh and rec.srtt == INITIAL_RTT and not rec.rtt_sampled
