"""Congestion control and pacing for a native channel.

**The controller** is NewReno as RFC 9002 (section 7) specifies it, with the loss signal
only (no ECN):

* *slow start* from an initial window of ten datagrams, at most 14,720 bytes unless
  that is fewer than ``LOSS_DETECTION_DATAGRAMS``; the window grows by every byte
  acknowledged;
* *slow start exit* before the first loss, as HyStart++ (RFC 9406) does: when the
  round trip of a round rises by ``clamp(min/8, 4 ms, 16 ms)`` over the previous round's,
  the window grows four times slower for up to ``CSS_ROUNDS`` rounds (conservative slow
  start, back to slow start if the rise was noise), then congestion avoidance.  So a
  transfer into a short router queue does not overflow it by a whole window;
* *congestion avoidance*: one datagram per window acknowledged (one per round trip);
* *recovery*: the first loss of a packet sent after the last reduction reduces the
  window once; losses of packets sent before it do not again (one reduction per round
  trip of losses);
* *persistent congestion*: losses spanning three probe time-outs with nothing
  acknowledged in between reset the window to two datagrams and forget what was measured
  of the path;
* the window grows only while the sender uses at least half of it (a sender with little
  to send does not build a window it never tested).

**The reduction** is where it differs from plain NewReno (``LossResponse.HALVE``): by
default (``LossResponse.BANDWIDTH``) the window falls to the larger of half of it and
the path's measured bandwidth-delay product (the highest delivery rate of the last
``BANDWIDTH_ROUNDS`` round trips times the lowest round trip seen), never above the
window itself, as TCP Westwood+ does.  A queue overflow happens with more than the
bandwidth-delay product in flight, so the window falls to about that product: the queue
drains and the link stays busy.  A random loss (a lossy line, not a full queue) happens
with the queue short, so the window hardly falls: with 1 % random loss on a 20 Mbit/s,
50 ms path plain NewReno keeps about 15 % of the link (the Mathis limit) and this one
keeps most of it (``tests/engine/native/test_congestion.py``).  Competing flows still converge:
each falls by the same factor, the lowest round trip over the current one.

**Random loss** (``LossResponse.BANDWIDTH`` only): a loss declared while the latest round
trip is within ``clamp(min/8, 4 ms, 16 ms)`` of the lowest (no queue to overflow) and
while at most one byte in ``RANDOM_LOSS_SHARE`` of the last two round trips was lost
does not reduce the window at all (counted as ``native_random_loss``): with a sender
measuring its own rate, each such reduction would otherwise shave the bandwidth
estimate, and the window would settle below the path's.  More losses than that without
a queue are either a lossy line (10 % on a radio link, a relay) or a policer or tiny
queue the sender overruns: the loss count alone cannot tell them apart, what happens
when the sender slows down can.  So the window is reduced and the next round trip (at
least ``PROBE_DATAGRAMS``) is a probe, paced at ``PROBE_PACING`` of the measured
bandwidth: below what the path delivers, so a policer drops nothing, while a lossy line
goes on losing its share.  If the probe still loses more than one byte in
``RANDOM_LOSS_SHARE`` (and at least a quarter of the share before, at most
``MAX_LINE_SHARE``), the reduction is undone and the line's share is learned: from then
on losses up to ``LINE_SHARE_MARGIN`` times it (plus the one in ``RANDOM_LOSS_SHARE``),
or up to the share plus ``SHARE_SIGMAS`` standard deviations of as many draws as the
two round trips held datagrams (whichever is more: over a few dozen datagrams a 10 %
line loses 20 % often enough to cut the window a dozen times per 100 MiB), are the
line's.  A probe that loses less confirms congestion and forgets the share.  On
a line that loses ``p`` at random a policer can so see up to about ``p / 2 + 5 %`` more
(more over few datagrams)
before the window falls; without random loss it sees a few percent
(``tests/engine/native/test_congestion.py``).

Delivery rate is measured per acknowledged packet as the bytes acknowledged between
its sending and its acknowledgement over the longer of the two intervals (send and ack),
so a burst of acks cannot inflate it (the method BBR uses).

**The pacer** spreads a window over a round trip: a token bucket filled at ``2 x cwnd /
srtt`` in slow start and ``1.25 x cwnd / srtt`` afterwards (RFC 9002 7.7), holding at
most ``PACING_QUANTUM`` seconds of sending (and at least two datagrams), so a sender
never bursts a whole window at line rate into a router queue.  Where there is no
bottleneck (loopback) the rate is far above what the sender can make and pacing costs
nothing.
"""

from __future__ import annotations

import enum
import math
from collections import deque

INITIAL_DATAGRAMS = 10
MIN_INITIAL = 14720
MIN_DATAGRAMS = 2
LOSS_DETECTION_DATAGRAMS = 8
"""The initial window holds at least this many datagrams, however large: with fewer, a
loss has too few later packets acknowledged to be declared (``recovery.PACKET_THRESHOLD``)
and waits for the probe time-out (RFC 9002 has 2 of the 64 KB datagrams of loopback)."""
"""The smallest window, in datagrams (after persistent congestion)."""
LOSS_REDUCTION = 0.5
PERSISTENT_PTOS = 3
"""Losses spanning this many probe time-outs (and nothing acked) are persistent congestion."""
BANDWIDTH_ROUNDS = 6
"""Round trips over which the highest delivery rate is the bandwidth estimate."""
SLOW_START_PACING = 2.0
AVOIDANCE_PACING = 1.25
PACING_QUANTUM = 0.002
"""Seconds of sending the pacer lets go at once (the timers' granularity is ~1 ms)."""
HYSTART_SAMPLES = 8
HYSTART_MIN_RISE = 0.004
HYSTART_MAX_RISE = 0.016
CSS_DIVISOR = 4
CSS_ROUNDS = 5
RANDOM_LOSS_SHARE = 20
"""Losses of at most one byte in this many acknowledged (in two round trips) can be random."""
SHARE_DATAGRAMS = 16
"""Fewer datagrams than this (acknowledged and lost in two round trips) tell no loss share:
their losses do not reduce the window when there is no queue (the first round trips of
64 KB datagrams on loopback; 32 cost some FakeNet seeds of 1,400 B a third of the rate)."""
LINE_SHARE_MARGIN = 1.5
"""Once a probe found the line losing a share at random, losses up to this times that
share (plus the above) can be random too."""
SHARE_SIGMAS = 3.0
"""Losses within this many standard deviations above a learned line share (binomial, over
the datagrams of two round trips) can be the line's too."""
MAX_LINE_SHARE = 0.25
"""The most a line is believed to lose at random; more is congestion."""
PROBE_DATAGRAMS = 32
"""The probe after a reduction lasts a window, and at least this many datagrams."""
PROBE_LAG = 4
"""Datagrams acknowledged beyond the probe's window before its verdict: a loss is
declared when three later packets are acknowledged (``recovery.PACKET_THRESHOLD``)."""
PROBE_PACING = 0.9
"""The probe's pacing rate, times the measured bandwidth: below what the path delivers,
so a policer or a tiny queue drops nothing while it runs, and a lossy line still does."""
_NEVER = float("inf")


class LossResponse(enum.Enum):
    """How the window falls on a congestion event (module docstring)."""

    BANDWIDTH = "bandwidth"
    HALVE = "halve"


Snapshot = tuple[int, float, float]
"""What a packet remembers of the delivery count when it is sent: (bytes delivered,
when the last of them was acknowledged, when the packet acknowledged last was sent)."""


class Controller:
    """The congestion window of one native channel (module docstring).

    ``mss`` is the channel's datagram size; ``limit`` the most the window may reach (the
    receiver's buffer: ``RoadConfig.native_window``).
    """

    __slots__ = (
        "mss",
        "limit",
        "response",
        "cwnd",
        "ssthresh",
        "recovery_start",
        "min_rtt",
        "srtt",
        "delivered",
        "delivered_at",
        "acked_sent_at",
        "snapshot",
        "_round",
        "_round_start",
        "_bandwidth",
        "_max_rate",
        "_bdp",
        "_rate",
        "_burst",
        "_last_round_rtt",
        "_round_rtt",
        "_recent_rtts",
        "_css_baseline",
        "_css_rounds",
        "_tokens",
        "_stamp",
        "_acked_round",
        "_acked_last",
        "_lost_round",
        "_lost_last",
        "_probe_window",
        "_probe_share",
        "_probe_acked",
        "_probe_lost",
        "_undo",
        "_line_share",
        "_pacing_stale",
    )

    def __init__(self, mss: int, limit: int, response: LossResponse = LossResponse.BANDWIDTH):
        self.mss = mss
        self.limit = max(limit, MIN_DATAGRAMS * mss)
        self.response = response
        # RFC 9002: min(10 datagrams, max(14,720 bytes, 2 datagrams))
        initial = min(INITIAL_DATAGRAMS * mss, max(MIN_INITIAL, LOSS_DETECTION_DATAGRAMS * mss))
        self.cwnd = min(self.limit, initial)
        self.ssthresh = _NEVER
        self.recovery_start = -_NEVER
        self.min_rtt = _NEVER
        self.srtt = 0.0
        self.delivered = 0
        self.delivered_at = 0.0
        self.acked_sent_at = 0.0
        self.snapshot: Snapshot = (0, 0.0, 0.0)
        self._round = 0
        self._round_start = -_NEVER
        self._bandwidth: deque[tuple[int, float]] = deque()  # (round, highest rate in it)
        self._max_rate = 0.0
        self._bdp = 0
        self._rate = _NEVER
        self._burst = 0.0
        self._last_round_rtt = _NEVER
        self._round_rtt = _NEVER
        self._recent_rtts: deque[float] = deque(maxlen=HYSTART_SAMPLES)
        self._css_baseline = 0.0  # > 0: in conservative slow start
        self._css_rounds = 0
        self._tokens = float(self.cwnd)
        self._pacing_stale = False
        self._stamp = 0.0
        # Bytes acknowledged and declared lost in this round trip and the one before.
        self._acked_round = self._acked_last = 0
        self._lost_round = self._lost_last = 0
        # The round after a reduction for losses without a queue (the probe, see
        # ``_verdict``): its window (0: none), the loss share that prompted it, what of
        # it was acknowledged and lost, and the window and threshold before it.
        self._probe_window = 0
        self._probe_share = 0.0
        self._probe_acked = self._probe_lost = 0
        self._undo = (0, _NEVER)
        self._line_share = 0.0
        """The share of bytes the line loses at random, as a probe found it (0: none)."""

    # -- what the path is measured to be ------------------------------------------------

    def bandwidth(self) -> float:
        """Bytes per second: the highest delivery rate of the last few round trips."""
        return self._max_rate

    def bdp(self) -> int:
        """Bytes the path holds without a queue (0 until measured; kept up to date by
        every ack, as the flow gate asks for it before every datagram)."""
        return self._bdp

    def _measured(self) -> None:
        highest = 0.0
        for _, rate in self._bandwidth:
            if rate > highest:
                highest = rate
        self._max_rate = highest
        self._bdp = 0 if self.min_rtt == _NEVER else int(self._max_rate * self.min_rtt)

    @property
    def in_slow_start(self) -> bool:
        return self.cwnd < self.ssthresh

    # -- events -------------------------------------------------------------------------

    def on_acked(
        self,
        acked: int,
        in_flight: int,
        sent_at: float,
        snapshot: Snapshot,
        rtt: float | None,
        srtt: float,
        now: float,
    ) -> None:
        """``acked`` bytes were acknowledged, ``in_flight`` of them (and the rest) were in
        flight before; the newest of them was sent at ``sent_at`` with ``snapshot``;
        ``rtt``: the ack's round-trip sample, if it gave one."""
        self.srtt = srtt
        self.delivered += acked
        self.delivered_at = now
        if sent_at > self.acked_sent_at:
            self.acked_sent_at = sent_at
        self.snapshot = (self.delivered, now, self.acked_sent_at)
        new_round = sent_at >= self._round_start
        if new_round:
            self._round += 1
            self._round_start = now
            self._acked_last, self._acked_round = self._acked_round, 0
            self._lost_last, self._lost_round = self._lost_round, 0
        self._acked_round += acked
        if self._probe_window and sent_at > self.recovery_start:
            self._probe_acked += acked
            if self._probe_acked + self._probe_lost >= self._probe_window:
                self._verdict()
        # The window grows only while in use (a sender with little to send does not
        # build a window it never tested), and not from acks of what was sent before
        # the last reduction.
        in_use = 2 * in_flight >= self.cwnd
        delivered, delivered_at, first_sent = snapshot
        if delivered_at > 0.0:
            interval = now - delivered_at
            if sent_at - first_sent > interval:
                interval = sent_at - first_sent
            if interval > 0.0:
                rate = (self.delivered - delivered) / interval
                # A sender not using its window measures its own pace, not the path's:
                # such a sample counts only above the estimate (as BBR's app-limited ones).
                if in_use or rate > self._max_rate:
                    self._sample_rate(rate)
        # (a sample of 0 says only that the driver's clock did not move between the send
        # and the ack, on loopback: as the lowest it would make the path hold nothing)
        if rtt is not None and 0.0 < rtt < self.min_rtt:
            self.min_rtt = rtt
            self._measured()
        if not in_use:  # (request/response: the window and the pacer wait, nearly free)
            self._pacing_stale = True  # srtt moved: worked out when the pacer is next asked
            return
        if rtt is not None and self.cwnd < self.ssthresh:
            self._hystart(rtt, new_round)
        if sent_at > self.recovery_start:
            if self.cwnd < self.ssthresh:
                self.cwnd += acked // CSS_DIVISOR if self._css_baseline else acked
            else:
                self.cwnd += self.mss * acked // self.cwnd
            if self.cwnd > self.limit:
                self.cwnd = self.limit
        self._set_pacing()

    def _sample_rate(self, rate: float) -> None:
        samples = self._bandwidth
        if samples and samples[-1][0] == self._round:
            if rate <= samples[-1][1]:
                return
            samples[-1] = (self._round, rate)
        else:
            samples.append((self._round, rate))
        stale = False
        while samples[0][0] <= self._round - BANDWIDTH_ROUNDS:
            stale = samples.popleft()[1] >= self._max_rate or stale
        if stale:  # the highest left the window: look for the next (rarely)
            self._measured()
        elif rate > self._max_rate:  # (once per ack: no pass over the samples)
            self._max_rate = rate
            if self.min_rtt != _NEVER:
                self._bdp = int(rate * self.min_rtt)

    def _hystart(self, rtt: float, new_round: bool) -> None:
        """Slow start exit on a rising round trip (RFC 9406, with one change: the round's
        figure is the lowest of the last ``HYSTART_SAMPLES`` samples, not of the first
        ones, so a queue that builds within a round is seen in that round, not after the
        window doubled once more)."""
        if new_round:
            self._last_round_rtt = self._round_rtt
            self._round_rtt = _NEVER
            if self._css_baseline:
                self._css_rounds += 1
                if self._css_rounds >= CSS_ROUNDS:
                    self.ssthresh = self.cwnd  # congestion avoidance from here
                    self._css_baseline = 0.0
                    return
        if rtt < self._round_rtt:
            self._round_rtt = rtt
        recent = self._recent_rtts
        recent.append(rtt)
        if len(recent) < HYSTART_SAMPLES:
            return
        current = min(recent)
        if self._css_baseline:
            if current < self._css_baseline:  # the rise was noise: slow start again
                self._css_baseline = 0.0
            return
        last = self._last_round_rtt
        if last == _NEVER:
            return
        rise = min(max(last / 8, HYSTART_MIN_RISE), HYSTART_MAX_RISE)
        if current >= last + rise:
            self._css_baseline = current
            self._css_rounds = 0

    def on_congestion(
        self, sent_at: float, now: float, lost: int = 0, rtt: float = 0.0
    ) -> bool | None:
        """``lost`` bytes were declared lost, the newest of them sent at ``sent_at``, when
        the latest round trip was ``rtt``.  True: the window was reduced; None: that was
        still the last reduction's episode (one reduction per round trip, or the round
        that probes a reduction); False: taken for random loss, not congestion (below)."""
        self._lost_round += lost
        if sent_at <= self.recovery_start:
            return None
        queue_free = False
        if self.response is LossResponse.BANDWIDTH:
            if self._probe_window:
                self._probe_lost += lost
                if self._probe_acked + self._probe_lost < self._probe_window:
                    return None
                if self._verdict():
                    return False
            queue_free = self._queue_free(rtt)
            if queue_free and self._few_lost():
                return False
        cwnd, ssthresh = self.cwnd, self.ssthresh
        self.recovery_start = now
        self._css_baseline = 0.0
        target = int(cwnd * LOSS_REDUCTION)
        if self.response is LossResponse.BANDWIDTH:
            bdp = self.bdp()
            if bdp > target:
                target = bdp if bdp < cwnd else cwnd
        floor = MIN_DATAGRAMS * self.mss
        self.cwnd = self.ssthresh = target if target > floor else floor
        if queue_free:  # many losses without a queue: does the smaller window lose less?
            # (PROBE_LAG more: losses are declared a few acks late, and must count)
            self._probe_window = max(self.cwnd, PROBE_DATAGRAMS * self.mss) + PROBE_LAG * self.mss
            acked = self._acked_round + self._acked_last
            self._probe_share = (self._lost_round + self._lost_last) / acked if acked else 1.0
            self._probe_acked = self._probe_lost = 0
            self._undo = (cwnd, ssthresh)
        self._set_pacing()
        return True

    def on_timeout(self, lost: int, sent_at: float) -> None:
        """``lost`` bytes, the newest of them sent at ``sent_at``, went unacknowledged for
        a probe time-out and are sent again.  Not a congestion event (RFC 9002 reduces
        the window on declared losses only), but lost all the same to a running probe,
        which with a small window would otherwise see only the few losses that later
        acks reveal (and judge a lossy line congested)."""
        if self._probe_window and sent_at > self.recovery_start:
            self._probe_lost += lost
            if self._probe_acked + self._probe_lost >= self._probe_window:
                self._verdict()

    def _queue_free(self, rtt: float) -> bool:
        """Whether the latest round trip is within ``clamp(min/8, 4 ms, 16 ms)`` of the
        lowest: (almost) no queue in front of the loss, so no queue overflowed."""
        if self.min_rtt == _NEVER or not rtt:
            return False
        allowed = self.min_rtt / 8
        allowed = HYSTART_MIN_RISE if allowed < HYSTART_MIN_RISE else allowed
        allowed = HYSTART_MAX_RISE if allowed > HYSTART_MAX_RISE else allowed
        return rtt - self.min_rtt < allowed

    def _few_lost(self) -> bool:
        """Whether the losses of the last two round trips are few enough to be the line's
        (a queue-free loss with these does not reduce the window): at most one byte in
        ``RANDOM_LOSS_SHARE``, or up to half as much again as a probe found the line to
        lose, or that share plus ``SHARE_SIGMAS`` standard deviations of as many draws
        (the spread of a few dozen datagrams).  Too many losses at once never count as
        random: a policer that drops without queueing still makes the window fall.
        Losses among fewer than ``SHARE_DATAGRAMS`` datagrams are too few to tell a share
        and do not reduce either."""
        acked = self._acked_round + self._acked_last
        lost = self._lost_round + self._lost_last
        if acked + lost < SHARE_DATAGRAMS * self.mss:
            return True
        share = self._line_share
        allowed = 1 / RANDOM_LOSS_SHARE + LINE_SHARE_MARGIN * share
        if share:
            spread = SHARE_SIGMAS * math.sqrt(share * (1.0 - share) * self.mss / (acked + lost))
            allowed = max(allowed, 1 / RANDOM_LOSS_SHARE + share + spread)
        return lost <= allowed * acked

    def _verdict(self) -> bool:
        """The probe is over: True if the line loses at random, which undoes the
        reduction and teaches ``_few_lost`` the line's share; False if the reduction
        stopped the losses (congestion: a policer, a tiny queue).  At random means the
        smaller window still lost more than one byte in ``RANDOM_LOSS_SHARE``, at least a
        quarter of the share before the reduction (which, from two short round trips,
        is noisy) and at most ``MAX_LINE_SHARE``."""
        seen = self._probe_acked + self._probe_lost
        lost = self._probe_lost
        self._probe_window = 0
        share = lost / seen
        if 1 / RANDOM_LOSS_SHARE < share <= MAX_LINE_SHARE and 4 * share >= self._probe_share:
            self._line_share = share
            cwnd, self.ssthresh = self._undo
            if cwnd > self.cwnd:
                self.cwnd = cwnd
            self._set_pacing()
            return True
        self._line_share = 0.0
        self._set_pacing()
        return False

    def on_persistent_congestion(self) -> None:
        """Everything sent over three probe time-outs was lost: start over (RFC 9002 7.6)."""
        self.cwnd = MIN_DATAGRAMS * self.mss
        self.recovery_start = -_NEVER
        self.min_rtt = _NEVER
        self._probe_window = 0
        self._line_share = 0.0
        self._bandwidth.clear()
        self._measured()
        self._set_pacing()

    # -- pacing -------------------------------------------------------------------------

    def pacing_rate(self) -> float:
        """Bytes per second the pacer lets go (``inf`` until there is a round trip)."""
        return self._rate

    def _set_pacing(self) -> None:
        """Work out the pacing rate and burst again (the window or round trip changed)."""
        self._pacing_stale = False
        if self.srtt <= 0.0:
            self._rate = _NEVER
            return
        gain = SLOW_START_PACING if self.cwnd < self.ssthresh else AVOIDANCE_PACING
        rate = gain * self.cwnd / self.srtt
        if self._probe_window and rate > PROBE_PACING * self._max_rate > 0.0:
            rate = PROBE_PACING * self._max_rate  # the probe sends below the path's rate
        self._rate = rate
        burst = rate * PACING_QUANTUM
        self._burst = burst if burst > 2 * self.mss else 2.0 * self.mss

    def paced(self, now: float) -> float:
        """Bytes the pacer lets go now (may be below zero after express frames)."""
        if self._pacing_stale:
            self._set_pacing()
        rate = self._rate
        if rate == _NEVER:
            return _NEVER
        burst = self._burst
        tokens = self._tokens + (now - self._stamp) * rate
        self._tokens = tokens if tokens < burst else burst
        self._stamp = now
        return self._tokens

    def spend(self, size: int) -> None:
        """``size`` bytes went out (paced or not)."""
        self._tokens -= size

    def release_at(self, size: int) -> float:
        """When the pacer will let ``size`` bytes go (after a ``paced`` call)."""
        missing = size - self._tokens
        if missing <= 0:
            return self._stamp
        # A microsecond late, so float rounding cannot leave the bucket a hair short.
        return self._stamp + missing / self._rate + 1e-6
