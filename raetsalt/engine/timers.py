"""Deadlines for many owners in one heap, and the redo back-off rule."""

from __future__ import annotations

import heapq
import itertools
from typing import Protocol


class Timed(Protocol):
    """Anything with a ``deadline`` the road should wake up for (``None``: none), and
    what to do then."""

    deadline: float | None

    def on_timer(self, now: float) -> None: ...


class TimerQueue:
    """A heap of deadlines with lazy invalidation.

    Re-arming an owner only pushes a new entry; an entry is live while it still equals the
    owner's ``deadline``.  That keeps ``arm`` O(log n) with thousands of remotes.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timed]] = []
        self._seq = itertools.count()

    def arm(self, owner: Timed, when: float | None) -> None:
        owner.deadline = when
        if when is not None:
            heapq.heappush(self._heap, (when, next(self._seq), owner))

    def get_timer(self) -> float | None:
        """The earliest live deadline (absolute time), or None."""
        heap = self._heap
        while heap:
            when, _, owner = heap[0]
            if owner.deadline == when:
                return when
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[Timed]:
        """Remove and return the owners whose live deadline is at or before ``now``."""
        due: list[Timed] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, owner = heapq.heappop(heap)
            if owner.deadline == when:
                owner.deadline = None
                due.append(owner)
        return due


def backoff(current: float, minimum: float, maximum: float) -> float:
    """raet's redo rule: double the last interval, within [minimum, maximum]."""
    return min(max(minimum, current * 2.0), maximum)
