"""``DropLog``: what a daemon's road drops, in the log, at a bounded rate.

Every datagram the road drops is counted (``road.stats``) and reported as a
``PacketDropped`` event; an operator needs to see that it happens (a minion whose ids
are stale, a forger, a flood) without a line per datagram.  The first drop of a reason
is logged at once, at WARNING; later ones of that reason are summed and logged at most
once per ``period`` seconds (count, the last source address, the last detail).  The
table has one entry per ``DropReason``, so it is bounded whatever arrives.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from raetsalt.drivers.udp import format_ha
from raetsalt.drops import DropReason
from raetsalt.engine.events import PacketDropped
from raetsalt.log import clip

log = logging.getLogger(__name__)

PERIOD = 60.0
"""Seconds between two lines about drops of one reason."""
ROUTINE = frozenset({DropReason.STALE, DropReason.REPLAY})
"""Late duplicates and retransmissions any lossy path makes: logged at DEBUG only."""


@dataclass
class _Tally:
    logged_at: float
    count: int = 0
    address: tuple[str, int] = ("", 0)
    detail: str = ""


class DropLog:
    """Rate-limited WARNING lines about dropped datagrams (module docstring)."""

    def __init__(self, what: str, *, period: float = PERIOD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.period = period
        self.clock = clock
        self._tallies: dict[str, _Tally] = {}

    def note(self, event: PacketDropped) -> None:
        now = self.clock()
        reason = event.reason.value
        tally = self._tallies.get(reason)
        if tally is None:
            self._tallies[reason] = _Tally(logged_at=now)
            self._log(reason, 1, event.address, event.detail, first=True)
            return
        tally.count += 1
        tally.address, tally.detail = event.address, event.detail
        self.flush(now)

    def flush(self, now: float | None = None) -> None:
        """Log the sums whose period is over."""
        now = self.clock() if now is None else now
        for reason, tally in self._tallies.items():
            if tally.count and now - tally.logged_at >= self.period:
                self._log(reason, tally.count, tally.address, tally.detail, first=False)
                tally.count, tally.logged_at = 0, now

    def _log(self, reason: str, count: int, address: tuple[str, int], detail: str,
             *, first: bool) -> None:
        where = format_ha(address) if address[0] else "-"
        level = logging.DEBUG if reason in ROUTINE else logging.WARNING
        if first:
            log.log(level, "%s dropped a datagram from %s (%s: %s); further drops of this kind "
                        "are summed here every %.0f s", self.what, where, reason,
                        clip(detail, bare=True), self.period)
        else:
            log.log(level, "%s dropped %d more datagrams (%s: %s), the last from %s", self.what,
                        count, reason, clip(detail, bare=True), where)
