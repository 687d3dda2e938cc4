"""A clock that only moves when a test says so.

Sans-IO code takes ``now: float`` as an argument; tests keep one ``ManualClock`` and pass
``clock.now`` (or call ``clock()``) so that timers fire exactly when the test advances time.
"""

from __future__ import annotations

from raetsalt.errors import LocalError


class ManualClock:
    """Monotonic seconds, starting at ``start``; changes only through :meth:`advance`."""

    __slots__ = ("now",)

    def __init__(self, start: float = 0.0) -> None:
        self.now: float = float(start)

    def __call__(self) -> float:
        """Return ``now``, so the clock can stand in for ``time.monotonic``."""
        return self.now

    def advance(self, dt: float) -> float:
        """Move forward by ``dt`` seconds and return the new ``now``.

        Raises LocalError for a negative ``dt``: the engine relies on a monotonic clock, and
        a test that steps backwards is almost always a bug in the test.
        """
        if dt < 0:
            raise LocalError(f"ManualClock cannot go backwards (dt={dt!r})")
        self.now += float(dt)
        return self.now

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now!r})"
