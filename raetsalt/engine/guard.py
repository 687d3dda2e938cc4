"""What a road remembers about remotes it no longer has.

* **Departed remotes.**  When an operator deletes (or rejects) a key, the road forgets
  the remote but remembers its verify key for a while: authenticated packets it still
  sends are answered ``unjoined``, so it joins again at once (Salt's re-auth).

Every table is bounded (``MAX_ENTRIES``, oldest forgotten first).
"""

from __future__ import annotations

from typing import TypeVar

from raetsalt.crypto import Verifier

K = TypeVar("K")
V = TypeVar("V")

MAX_ENTRIES = 4096


def _bounded_put(table: dict[K, V], key: K, value: V) -> None:
    """Insert ``key`` as the newest entry, forgetting the oldest beyond ``MAX_ENTRIES``."""
    table.pop(key, None)
    if len(table) >= MAX_ENTRIES:
        del table[next(iter(table))]
    table[key] = value


class Guard:
    """The tables behind the limits (module docstring)."""

    def __init__(self) -> None:
        self._departed: dict[int, tuple[Verifier, float]] = {}

    # -- departed remotes ---------------------------------------------------------------

    def depart(self, uid: int, verifier: Verifier, until: float) -> None:
        _bounded_put(self._departed, uid, (verifier, until))

    def departed(self, uid: int, now: float) -> Verifier | None:
        """The verify key of a remote that departed with ``uid``, while remembered."""
        entry = self._departed.get(uid)
        if entry is None:
            return None
        verifier, until = entry
        if now > until:
            del self._departed[uid]
            return None
        return verifier

    def forget_departed(self, uid: int) -> None:
        self._departed.pop(uid, None)
