"""Loss recovery of a native channel: what is in flight, what was acknowledged, what is
lost, and the probe time-out (RFC 9002 sections 5 and 6, with the loss signal for the
congestion controller of section 7).

``Recovery`` keeps a record of every packet in flight, by counter (``on_sent``,
``on_sent_run``): when it went, its size, the frames it carries (the scheduler's, which
are told when their packet is acknowledged or lost) and the delivery count then (for
the controller's rate samples).  An ACK frame's ranges (``on_ack``) free the records
they name, give a round-trip sample when the largest acknowledged counter moves, and
feed the controller.  A packet is declared lost when ``reorder_threshold`` later packets
were acknowledged or it is older than 9/8 of the round trip allows; its frames are
queued again.  When the probe time-out fires (``on_timeout``) the oldest one or two
packets are sent again as probes, whose acks then reveal the real losses.  A loss
that turns out spurious (the packet is acknowledged after all) doubles the reorder
threshold, as RACK does.

**Skipped packet numbers** (RFC 9000 section 21.4).  A receiver that acknowledges
packets it never got (an "optimistic ack": everything up to the highest counter seen,
say) makes the controller grow the window past what the path carries, and its share of
a shared link with it.  So the channel now and then leaves a counter unused (``skip``,
``SKIP_GAP``: after 64 to 511 packets, drawn from the road's ``secret_rng``, the
system's CSPRNG), and an ack that names a skipped counter is an attack:
``on_ack`` raises ``BadPacket`` (``optimistic_ack``) before it frees or measures
anything, and the channel ends the session.  A skipped counter has no record, so it is
never declared lost nor sent again; it is forgotten once an ack passed above it without
naming it (an honest receiver's ranges have a hole there).

It touches nothing but the controller and its two callbacks, so it can be driven
alone (``tests/engine/native/test_recovery.py``).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from raetsalt.drops import DropReason
from raetsalt.engine.native.congestion import PERSISTENT_PTOS, Controller, Snapshot
from raetsalt.engine.native.frames import ACK_DELAY, MAX_ACK_RANGES
from raetsalt.engine.native.scheduler import Frame
from raetsalt.errors import BadPacket

PACKET_THRESHOLD = 3
"""Later packets acknowledged before an earlier one counts as lost (at first: it grows
when losses prove spurious, up to ``MAX_REORDER``)."""
MAX_REORDER = 1024
INITIAL_RTT = 0.05
MIN_PTO = 0.002
MAX_PTO = 2.0
PROBE_PACKETS = 2
"""Packets sent again when the probe time-out fires (RFC 9002 sends one or two probes):
the rest wait for the probes' acks, which declare real losses below them at once.
Re-sending everything stale made queueing delay (a full window behind a slow hop)
look like a lost window, and the spurious copies added to the queue."""
MAX_DECLARED = 4096
"""Counters declared lost remembered to notice spurious losses."""
SKIP_GAP = (64, 512)
"""A counter is skipped after a number of others drawn from this range (one in about
288 on average: a hole in the receiver's ack ranges that costs a few bytes)."""
MAX_SKIPPED = 32
"""Skipped counters remembered at most (the oldest go first)."""


@dataclass(slots=True)
class Sent:
    """A packet in flight."""

    at: float
    size: int
    frames: list[Frame]
    delivery: Snapshot
    """The delivery count when it was sent (``Controller.snapshot``, for rate samples)."""


class Recovery:
    """Sent-packet records, acknowledgements, loss detection and the probe time-out of
    one native channel (see the module docstring).

    ``acked(frames)`` is told the frames of every packet acknowledged, ``lost(frames)``
    those of every packet declared lost (it returns how many it will send again);
    ``stats`` counts retransmissions, spurious ones and congestion signals.
    """

    def __init__(
        self,
        cc: Controller,
        *,
        acked: Callable[[list[Frame]], None],
        lost: Callable[[list[Frame]], int],
        stats: Counter[str],
        rng: random.Random | None = None,
    ) -> None:
        self.cc = cc
        self._rng = rng if rng is not None else random.SystemRandom()
        self.skip_at = self._rng.randrange(*SKIP_GAP)
        """The counter to leave unused (``skip``: the channel calls it when it gets
        there)."""
        self._skipped: list[int] = []  # ascending
        self._acked = acked
        self._lost = lost
        self.stats = stats
        self.counter = 0
        """The last packet counter used (for a record or not)."""
        # Packets sent, by counter - _sent_base: a Sent while in flight, else None.
        self._sent: list[Sent | None] = []
        self._sent_base = 1
        self._head = 0  # index of the oldest packet in flight (or len(_sent))
        self.bytes_in_flight = 0
        """Bytes of the packets in flight: 0 exactly when none is (no datagram is empty)."""
        self.largest_acked = 0
        self.srtt = INITIAL_RTT
        self.rttvar = INITIAL_RTT / 2
        self.latest_rtt = 0.0
        self.rtt_sampled = False
        self.pto_count = 0
        self.pto = self._compute_pto()
        """The probe time-out: how long the oldest packet in flight may go unacked."""
        self._probed_at = 0.0  # when the probe time-out last fired (0: not since an ack)
        self.reorder_threshold = PACKET_THRESHOLD
        self.declared_lost: dict[int, None] = {}

    # -- what went ----------------------------------------------------------------------

    def on_sent(self, now: float, size: int, frames: list[Frame] | None) -> int:
        """The next counter went, in a datagram of ``size`` bytes carrying ``frames``
        (None: nothing to send again if it is lost, so no record); returns the counter."""
        counter = self.counter = self.counter + 1
        if frames is None:
            return counter
        sent = self._sent
        before = len(sent)
        index = counter - self._sent_base
        if before < index:  # counters used without a record
            sent.extend([None] * (index - before))
        sent.append(Sent(now, size, frames, self.cc.snapshot))
        self.bytes_in_flight += size
        if self._head >= before:  # nothing was in flight: the head moves to the new end
            self._trim()
        return counter

    def on_sent_run(self, now: float, frames: list[list[Frame]], size: int, last: int) -> None:
        """``len(frames)`` consecutive counters went (a burst of bulk pieces), each in a
        datagram of ``size`` bytes but the last, of ``last`` bytes."""
        sent = self._sent
        idle = self._head >= len(sent)  # nothing in flight: the head moves to the run
        # A slot for every counter up to the last one used, so the run's records sit
        # at their own counters.
        missing = self.counter - self._sent_base + 1 - len(sent)
        if missing > 0:
            sent.extend([None] * missing)
        delivery = self.cc.snapshot
        sent.extend([Sent(now, size, carried, delivery) for carried in frames])
        count = len(frames)
        record = sent[-1]
        assert record is not None
        record.size = last
        if idle:
            self._trim()
        self.counter += count
        self.bytes_in_flight += size * (count - 1) + last

    def skip(self) -> None:
        """Leave the next counter unused: no packet carries it, so an ack naming it was
        never earned (RFC 9000 21.4)."""
        counter = self.counter = self.counter + 1
        skipped = self._skipped
        skipped.append(counter)
        if len(skipped) > MAX_SKIPPED:
            del skipped[0]
        self.skip_at = counter + self._rng.randrange(*SKIP_GAP)

    def oldest_unacked(self) -> int:
        """The counter of the oldest packet in flight (the next one if none is): the
        receiver need not acknowledge below it (our LEAST frame)."""
        if self._head < len(self._sent):
            return self._sent_base + self._head
        return self.counter + 1

    def in_flight(self) -> bool:
        return self._head < len(self._sent)

    def record(self, counter: int) -> Sent | None:
        """The record of ``counter`` while it is in flight."""
        index = counter - self._sent_base
        if 0 <= index < len(self._sent):
            return self._sent[index]
        return None

    # -- acknowledgements ---------------------------------------------------------------

    def on_ack(self, ranges: list[tuple[int, int]], now: float) -> bool:
        """The ranges of an ACK frame (oldest first).  True if it acknowledged a packet
        in flight (the window may have opened)."""
        top = self.counter
        for first, last in ranges:
            if last < first or last > top:
                raise BadPacket("ack range names packets never sent", DropReason.BODY)
        skipped = self._skipped
        if skipped:
            low, high = skipped[0], skipped[-1]
            for first, last in ranges:
                if first <= high and last >= low:
                    for number in skipped:
                        if first <= number <= last:
                            raise BadPacket(
                                f"ack of packet {number}, which was never sent (optimistic ack)",
                                DropReason.OPTIMISTIC_ACK,
                            )
        if self.declared_lost:
            self._spurious(ranges)
        sent = self._sent
        base = self._sent_base
        head = self._head
        if head >= len(sent):
            return False
        newly_largest = 0
        newest: Sent | None = None
        oldest_at = 0.0
        freed = 0
        acked_frames = self._acked
        for first, last in ranges:
            start = first - base
            if start < head:
                start = head
            stop = last - base + 1
            if stop > len(sent):
                stop = len(sent)
            for index in range(start, stop):
                record = sent[index]
                if record is None:
                    continue
                sent[index] = None
                freed += record.size
                acked_frames(record.frames)
                counter = base + index
                if counter > newly_largest:
                    newly_largest = counter
                    newest = record
                if not oldest_at:
                    oldest_at = record.at  # ranges come in order: the oldest acked
        if newest is None:
            return False
        quiet_since = self.cc.acked_sent_at
        in_flight = self.bytes_in_flight
        self.bytes_in_flight = in_flight - freed
        self._trim()
        self.pto_count = 0
        self._probed_at = 0.0
        sample = None
        if newly_largest > self.largest_acked:
            self.largest_acked = newly_largest
            # Skipped counters this ack passed over without naming them: done with.
            while skipped and skipped[0] < newly_largest:
                del skipped[0]
            sample = self.latest_rtt = now - newest.at
            if not self.rtt_sampled:  # the first sample replaces the guess (RFC 9002)
                self.rtt_sampled = True
                self.srtt, self.rttvar = sample, sample / 2
            else:
                self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
                self.srtt = 0.875 * self.srtt + 0.125 * sample
        self.cc.on_acked(freed, in_flight, newest.at, newest.delivery, sample, self.srtt, now)
        self.pto = self._compute_pto()
        # The ranges reach down to the LEAST we sent (at or below our oldest packet in
        # flight) unless the receiver cut them (it keeps MAX_ACK_RANGES): below the lowest
        # range a cut ack says nothing, those packets are left to later acks or the probe.
        if self._head < len(self._sent):
            floor = min(first for first, _ in ranges) if len(ranges) >= MAX_ACK_RANGES else 0
            self._detect_lost(now, floor=floor, quiet=(quiet_since, oldest_at))
        return True

    def _trim(self) -> None:
        """Move ``_head`` past packets no longer in flight; drop the records behind it."""
        sent = self._sent
        head = self._head
        end = len(sent)
        while head < end and sent[head] is None:
            head += 1
        if head > 1024 and head * 2 > end:
            del sent[:head]
            self._sent_base += head
            head = 0
        self._head = head

    def _spurious(self, ranges: list[tuple[int, int]]) -> None:
        """Packets we declared lost were acknowledged after all: the path reorders, so
        wait for more later packets before declaring a loss (as RACK does)."""
        declared = self.declared_lost
        late: list[int] = []
        for first, last in ranges:
            # Walk whichever is shorter: the range or what was declared lost.
            if last - first < len(declared):
                late.extend(c for c in range(first, last + 1) if c in declared)
            else:
                late.extend(c for c in declared if first <= c <= last)
        if late:
            for counter in late:
                declared.pop(counter, None)
            self.reorder_threshold = min(self.reorder_threshold * 2, MAX_REORDER)
            self.stats["native_spurious_retransmit"] += len(late)
        # Below our oldest packet in flight the receiver keeps no ranges (LEAST): no ack
        # can come for those any more.
        least = self.oldest_unacked()
        while declared and next(iter(declared)) < least:
            del declared[next(iter(declared))]

    # -- loss ---------------------------------------------------------------------------

    def _detect_lost(self, now: float, *, floor: int, quiet: tuple[float, float]) -> None:
        """Declare lost what is below ``floor`` and too old or too far below the largest
        acked; ``quiet``: nothing sent between these times was acknowledged."""
        # RFC 9002 6.1.2: 9/8 of the larger of the smoothed and the latest round trip, so
        # a queue that is building (the latest above the average) is not taken for loss.
        rtt = self.srtt if self.srtt > self.latest_rtt else self.latest_rtt
        horizon = now - 1.125 * (rtt if rtt > MIN_PTO else MIN_PTO)
        threshold = self.largest_acked - self.reorder_threshold
        sent, base = self._sent, self._sent_base
        start = max(self._head, floor - base)
        stop = self.largest_acked - base
        lost = []
        oldest = newest = 0.0
        lost_bytes = 0
        for index in range(start, stop):
            record = sent[index]
            if record is not None and (base + index <= threshold or record.at <= horizon):
                lost.append(base + index)
                lost_bytes += record.size
                if not oldest:
                    oldest = record.at
                newest = record.at
        if not lost:
            return
        for counter in lost:
            self.declared_lost[counter] = None
        while len(self.declared_lost) > MAX_DECLARED:
            del self.declared_lost[next(iter(self.declared_lost))]
        self._requeue(lost)
        cc = self.cc
        reduced = cc.on_congestion(newest, now, lost_bytes, self.latest_rtt)
        if reduced is not None:
            self.stats["native_congestion" if reduced else "native_random_loss"] += 1
        # Persistent congestion (RFC 9002 7.6): the losses span three probe time-outs
        # and nothing sent between the oldest and the newest of them was acknowledged.
        span = (self.srtt + max(4 * self.rttvar, MIN_PTO) + ACK_DELAY) * PERSISTENT_PTOS
        if self.rtt_sampled and newest - oldest > span and quiet[0] < oldest and newest < quiet[1]:
            cc.on_persistent_congestion()
            self.stats["native_persistent_congestion"] += 1

    def _requeue(self, counters: list[int]) -> None:
        sent, base = self._sent, self._sent_base
        again = 0
        for counter in counters:
            record = sent[counter - base]
            if record is None:
                continue
            sent[counter - base] = None
            self.bytes_in_flight -= record.size
            again += self._lost(record.frames)
        self._trim()
        if again:
            self.stats["native_retransmit"] += again

    # -- the probe time-out ---------------------------------------------------------------

    def _compute_pto(self) -> float:
        # srtt + max(4 rttvar, MIN_PTO) + the receiver's ack delay (RFC 9002 6.2.1: ours
        # is ACK_DELAY, but a busy host adds to it, so an eighth of srtt if that is more),
        # at least MIN_PTO, doubled per unanswered probe (at most 2**10 times), at most
        # MAX_PTO; spelled without builtins (once per ack).
        variance = 4 * self.rttvar
        srtt = self.srtt
        delay = srtt / 8
        base = srtt + (variance if variance > MIN_PTO else MIN_PTO)
        base += delay if delay > ACK_DELAY else ACK_DELAY
        if base < MIN_PTO:
            base = MIN_PTO
        if self.pto_count:
            base *= 1 << (self.pto_count if self.pto_count < 10 else 10)
        return base if base < MAX_PTO else MAX_PTO

    def get_timer(self) -> float | None:
        """When the probe time-out fires for the oldest packet in flight (None: none)."""
        if self._head >= len(self._sent):
            return None
        record = self._sent[self._head]
        assert record is not None
        # After a probe the time-out counts from the probe, not the oldest packet.
        oldest = record.at
        return (oldest if oldest > self._probed_at else self._probed_at) + self.pto

    def on_timeout(self, now: float) -> bool:
        """Send the oldest packets whose time-out passed again (at most
        ``PROBE_PACKETS``), as probes.  True if any."""
        # The same expression as in get_timer, so float rounding cannot leave a due
        # timer idle.
        pto, probed_at = self.pto, self._probed_at
        probes = []
        timed_out = 0
        newest_at = 0.0
        sent, base = self._sent, self._sent_base
        for index in range(self._head, len(sent)):  # oldest first
            record = sent[index]
            if record is None:
                continue
            if (record.at if record.at > probed_at else probed_at) + pto > now:
                break
            probes.append(base + index)
            timed_out += record.size
            newest_at = record.at
            if len(probes) == PROBE_PACKETS:
                break
        if not probes:
            return False
        self.pto_count += 1
        self.pto = self._compute_pto()
        self._probed_at = now
        self.cc.on_timeout(timed_out, newest_at)  # (lost, to its loss share)
        self._requeue(probes)
        return True

    # -- a new path -----------------------------------------------------------------------

    def new_path(self, cc: Controller) -> None:
        """The session moved to another host: ``cc`` starts afresh, and so does the
        round-trip estimate (RFC 9000 9.4)."""
        self.cc = cc
        self.srtt, self.rttvar, self.rtt_sampled = INITIAL_RTT, INITIAL_RTT / 2, False
        self.pto = self._compute_pto()
