"""How much a native channel may have in flight: the one gate its sending passes.

``SendWindow.allowance`` is asked before every datagram with new frames ("may I send N
bytes now?"), and told what happens to them (``on_sent``, ``on_acked``, ``on_lost``).  A
congestion controller or pacer (issue 16) replaces or wraps this class; the channel and
its scheduler do not change.

Today it is a byte window, ``RoadConfig.native_window``, below the receiver's socket
buffer so a fast sender never overruns it.  Bulk bytes in flight wait in the receiver's
socket in front of anything sent after them, so while express messages are being sent
(within ``QUIET_HOLD`` of the last one) the bulk stream gets a smaller window that keeps
that queue short: it tracks the smallest round trip seen and shrinks while round trips
run more than ``target`` above it, and grows back by what was acknowledged while they do
not.  A ping sent during a bulk transfer so waits behind a few round trips' worth of
bytes, not behind the whole window (issue 15), and a transfer alone runs at the full
window.  Express frames may go ``EXPRESS_EXTRA`` beyond the window, so they never wait
for bulk acknowledgements.
"""

from __future__ import annotations

EXPRESS_EXTRA = 64 * 1024
"""Bytes of express frames allowed beyond the window."""
FLOOR = 64 * 1024
"""The quiet window never shrinks below this."""
TARGET = 0.0005
"""Round-trip time above the smallest seen that counts as a queue (seconds)."""
QUIET_HOLD = 0.2
"""Seconds after the last express frame during which bulk gets the quiet window."""
MIN_RTT_LIFETIME = 10.0
"""The smallest round trip is forgotten after this long (the path may have changed)."""


class SendWindow:
    """Bytes a native channel may have unacknowledged (see the module docstring)."""

    __slots__ = ("limit", "quiet", "min_rtt", "min_rtt_at", "express_at", "target")

    def __init__(self, limit: int, *, target: float = TARGET) -> None:
        self.limit = limit
        self.quiet = limit if limit < FLOOR else FLOOR
        self.min_rtt = 0.0
        self.min_rtt_at = 0.0
        self.express_at = -QUIET_HOLD
        self.target = target

    def allowance(self, in_flight: int, now: float, *, express: bool = False) -> int:
        """Bytes that may be sent now on top of ``in_flight``."""
        if express:
            return self.limit + EXPRESS_EXTRA - in_flight
        if now - self.express_at < QUIET_HOLD:
            return self.quiet - in_flight
        return self.limit - in_flight

    def on_sent(self, now: float, *, express: bool) -> None:
        if express:
            self.express_at = now

    def on_acked(self, acked: int, rtt: float | None, now: float) -> None:
        """``acked`` bytes left the network; ``rtt``: a fresh sample, if the ack gave one."""
        if rtt is not None:
            if not self.min_rtt or rtt < self.min_rtt or now - self.min_rtt_at > MIN_RTT_LIFETIME:
                self.min_rtt, self.min_rtt_at = rtt, now
            if rtt > self.min_rtt + self.target:
                shrunk = self.quiet - (acked >> 1)
                self.quiet = shrunk if shrunk > FLOOR else min(FLOOR, self.limit)
                return
        grown = self.quiet + acked
        self.quiet = grown if grown < self.limit else self.limit

    def on_lost(self, lost: int, now: float) -> None:
        """``lost`` bytes were declared lost (the window is not cut: loss on these paths
        is rarely congestion; issue 16 decides otherwise)."""
