"""How much a native channel may send, and when: the one gate its sending passes.

``SendWindow.allowance`` is asked before every datagram with new frames ("may I have N
more bytes in flight?"), the controller's pacer (``Controller.paced``) whether one may go
now, and the gate is told what went (``on_sent``).  The window is the congestion
controller's (``native/congestion.py``: NewReno with slow start exit, recovery and a
bandwidth-based reduction, paced), which the channel tells what the network did; it is
never more than ``RoadConfig.native_window``, which stays below the receiver's socket
buffer so a fast sender never overruns it.

Bulk bytes in flight wait in queues (a router's, the receiver's socket, both ends' CPUs)
in front of anything sent after them; so while express messages flow (within
``QUIET_HOLD`` of the last one sent) the bulk stream may have only the path's measured
bandwidth-delay product in flight, and at least ``QUIET_WINDOW``, in datagrams of at
most ``QUIET_PIECE``: a ping sent during a transfer waits behind about one small datagram
of bulk work on each end instead of a whole window (measured on loopback with
4 x 1 MiB outstanding: p50 0.75 ms instead of 1.6 ms with a 64 KiB quiet window of 64 KB
datagrams; see the fast path's report for the smaller units), and on a long path the
link stays busy without a standing queue.  A transfer alone runs at the full window in
whole datagrams.  Express frames may go ``EXPRESS_EXTRA`` beyond the window and are not
held by the pacer, so they never wait for bulk acknowledgements.
"""

from __future__ import annotations

from raetsalt.engine.native.congestion import Controller

EXPRESS_EXTRA = 64 * 1024
"""Bytes of express frames allowed beyond the window."""
QUIET_WINDOW = 32 * 1024
"""Bulk bytes in flight while express messages flow, unless the path holds more."""
QUIET_PIECE = 16 * 1024
"""Largest bulk datagram while express messages flow: the unit of bulk work (sealing,
sending, reading, opening) a small message may find in its way on either end."""
QUIET_HOLD = 0.2
"""Seconds after the last express frame during which bulk gets the quiet window."""


class SendWindow:
    """The gate of one native channel (see the module docstring)."""

    __slots__ = ("cc", "express_at")

    def __init__(self, cc: Controller) -> None:
        self.cc = cc
        self.express_at = -QUIET_HOLD

    def allowance(self, in_flight: int, now: float, *, express: bool = False) -> int:
        """Bytes that may be in flight now on top of ``in_flight``."""
        cwnd = self.cc.cwnd
        if express:
            return cwnd + EXPRESS_EXTRA - in_flight
        if now - self.express_at < QUIET_HOLD:
            quiet = self.cc.bdp()
            if quiet < QUIET_WINDOW:
                quiet = QUIET_WINDOW
            if quiet < cwnd:
                return quiet - in_flight
        return cwnd - in_flight

    def quiet_now(self, now: float) -> bool:
        """Whether express messages flow (bulk gets ``QUIET_WINDOW`` and ``QUIET_PIECE``)."""
        return now - self.express_at < QUIET_HOLD

    def on_sent(self, now: float, size: int, *, express: bool) -> None:
        """A datagram of ``size`` bytes with new or lost frames went (paced or not)."""
        self.cc.spend(size)
        if express:
            self.express_at = now
