"""How much a native channel may have in flight: the one gate its sending passes.

``SendWindow.allowance`` is asked before every datagram with new frames ("may I send N
bytes now?"), and told what happens to them (``on_sent``, ``on_acked``, ``on_lost``).  A
congestion controller or pacer (issue 16) replaces or wraps this class; the channel and
its scheduler do not change.

Today it is a byte window capped by ``RoadConfig.native_window`` (below the receiver's
socket buffer, so a fast sender never overruns it) that keeps the queue it builds short:
it tracks the smallest round trip seen and shrinks while round trips run more than
``target`` above it (the bytes in flight only wait in the receiver's socket then), and
grows back by what was acknowledged while they do not.  A short queue is what lets an
express message sent now overtake the bulk bytes already on their way (issue 15: a ping
behind a megabyte stream), without a smaller window on paths with a long round trip.
Express frames may go ``EXPRESS_EXTRA`` beyond the window, so they never wait for bulk
acknowledgements.
"""

from __future__ import annotations

EXPRESS_EXTRA = 64 * 1024
"""Bytes of express frames allowed beyond the window."""
FLOOR = 64 * 1024
"""The window never shrinks below this."""
TARGET = 0.0005
"""Round-trip time above the smallest seen that counts as a queue (seconds)."""
MIN_RTT_LIFETIME = 10.0
"""The smallest round trip is forgotten after this long (the path may have changed)."""


class SendWindow:
    """Bytes a native channel may have unacknowledged (see the module docstring)."""

    __slots__ = ("limit", "window", "min_rtt", "min_rtt_at", "target")

    def __init__(self, limit: int, *, target: float = TARGET) -> None:
        self.limit = limit
        self.window = limit if limit < FLOOR else max(FLOOR, limit)
        self.min_rtt = 0.0
        self.min_rtt_at = 0.0
        self.target = target

    def allowance(self, in_flight: int, *, express: bool = False) -> int:
        """Bytes that may be sent now on top of ``in_flight``."""
        room = self.window - in_flight
        return room + EXPRESS_EXTRA if express else room

    def on_acked(self, acked: int, rtt: float | None, now: float) -> None:
        """``acked`` bytes left the network; ``rtt``: a fresh sample, if the ack gave one."""
        if rtt is not None:
            if not self.min_rtt or rtt < self.min_rtt or now - self.min_rtt_at > MIN_RTT_LIFETIME:
                self.min_rtt, self.min_rtt_at = rtt, now
            if rtt > self.min_rtt + self.target:
                shrunk = self.window - (acked >> 1)
                self.window = shrunk if shrunk > FLOOR else min(FLOOR, self.limit)
                return
        grown = self.window + acked
        self.window = grown if grown < self.limit else self.limit

    def on_lost(self, lost: int, now: float) -> None:
        """``lost`` bytes were declared lost (the window is not cut: loss on these paths
        is rarely congestion; issue 16 decides otherwise)."""
