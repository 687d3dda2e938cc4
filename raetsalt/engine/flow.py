"""How much a native channel may have in flight: the one gate its sending passes.

``SendWindow.allowance`` is asked before every datagram with new frames ("may I send N
bytes now?"), and told when express frames go (``on_sent``) and what the network did
(``on_acked``, ``on_lost``).  A congestion controller or pacer (issue 16) replaces or
wraps this class; the channel and its scheduler do not change.

Today it is a byte window, ``RoadConfig.native_window``, below the receiver's socket
buffer so a fast sender never overruns it.  Bulk bytes in flight wait in the receiver's
socket, and on both ends' CPUs, in front of anything sent after them; so while express
messages flow (within ``QUIET_HOLD`` of the last one sent) the bulk stream may have only
``QUIET_WINDOW`` in flight, in datagrams of at most ``QUIET_PIECE``: a ping sent during
a transfer waits behind about one small datagram of bulk work on each end instead of a
whole window (issue 15; measured on loopback with 4 x 1 MiB outstanding: p50 0.75 ms
instead of 1.6 ms with a 64 KiB quiet window of 64 KB datagrams, the transfer meanwhile
at about half speed; see the fast path's report for the smaller units).  A transfer
alone runs at the full window in whole datagrams.  Express frames may go
``EXPRESS_EXTRA`` beyond the window, so they never wait for bulk acknowledgements.
"""

from __future__ import annotations

EXPRESS_EXTRA = 64 * 1024
"""Bytes of express frames allowed beyond the window."""
QUIET_WINDOW = 32 * 1024
"""Bulk bytes in flight while express messages flow."""
QUIET_PIECE = 16 * 1024
"""Largest bulk datagram while express messages flow: the unit of bulk work (sealing,
sending, reading, opening) a small message may find in its way on either end."""
QUIET_HOLD = 0.2
"""Seconds after the last express frame during which bulk gets the quiet window."""


class SendWindow:
    """Bytes a native channel may have unacknowledged (see the module docstring)."""

    __slots__ = ("limit", "quiet", "express_at")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.quiet = min(limit, QUIET_WINDOW)
        self.express_at = -QUIET_HOLD

    def allowance(self, in_flight: int, now: float, *, express: bool = False) -> int:
        """Bytes that may be sent now on top of ``in_flight``."""
        if express:
            return self.limit + EXPRESS_EXTRA - in_flight
        if now - self.express_at < QUIET_HOLD:
            return self.quiet - in_flight
        return self.limit - in_flight

    def quiet_now(self, now: float) -> bool:
        """Whether express messages flow (bulk gets ``QUIET_WINDOW`` and ``QUIET_PIECE``)."""
        return now - self.express_at < QUIET_HOLD

    def on_sent(self, now: float, *, express: bool) -> None:
        if express:
            self.express_at = now

    def on_acked(self, acked: int, rtt: float | None, now: float) -> None:
        """``acked`` bytes left the network; ``rtt``: a fresh sample, if the ack gave one
        (for a congestion controller; the fixed window needs neither)."""

    def on_lost(self, lost: int, now: float) -> None:
        """``lost`` bytes were declared lost (the window is not cut: loss on these paths
        is rarely congestion; issue 16 decides otherwise)."""
