"""When a minion refreshes its mine, sans-IO: Salt's ``mine_interval``.

Salt's minion schedules ``mine.update`` every ``mine_interval`` minutes (default 60)
and once at start, when ``mine_enabled`` (default true).  A raetsalt minion does the
same without a scheduler: the first run comes when its first pillar arrives after it
started (then the master is reachable and ``mine_functions`` from pillar are known),
the next ones every ``mine_interval`` minutes after the last one started.  A run is
skipped while the previous one is still going (Salt's ``maxrunning`` is 2; one is
enough for data that only the newest run decides), and when neither the minion
config nor the pillar names any ``mine_functions``.  The runs are local jobs: their
result is not returned to the master's job cache (Salt's ``mine_return_job``
default); a failure is logged by the minion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_INTERVAL = 60
"""Minutes (Salt's ``mine_interval``)."""
MINE_FUN = "mine.update"
JOB_KIND = "mine"


class MineClock:
    """The mine refreshes of one minion (``opts``: its config)."""

    def __init__(self, opts: Mapping[str, Any]) -> None:
        minutes = opts.get("mine_interval", DEFAULT_INTERVAL)
        enabled = bool(opts.get("mine_enabled", True))
        self.period: float | None = (float(minutes) * 60.0
                                     if enabled and isinstance(minutes, int | float)
                                     and not isinstance(minutes, bool) and minutes > 0
                                     else None)
        self.configured = opts.get("mine_functions") or {}
        self.next: float | None = None
        self.running: str | None = None
        """The jid of the last run started."""
        self.runs = 0

    def on_pillar(self, pillar: Mapping[str, Any], now: float, busy: bool = False) -> bool:
        """A pillar arrived; True when the first run is due now (``busy``: the last
        run is still going)."""
        if self.period is None or self.next is not None:
            return False
        self.next = now + self.period
        return self._wanted(pillar, busy)

    def get_timer(self) -> float | None:
        return self.next

    def handle_timer(self, pillar: Mapping[str, Any], now: float, busy: bool = False
                     ) -> bool:
        """True when a run is due now (the next one is then scheduled)."""
        if self.next is None or self.period is None or now < self.next:
            return False
        self.next = now + self.period
        return self._wanted(pillar, busy)

    def started(self, jid: str) -> None:
        self.running = jid
        self.runs += 1

    def _wanted(self, pillar: Mapping[str, Any], busy: bool) -> bool:
        return not busy and bool(self.configured or pillar.get("mine_functions"))
