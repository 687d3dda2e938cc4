"""Which transaction ids of one session were already used, within a sliding window."""

from __future__ import annotations

_WRAP = 1 << 32
_HALF = 1 << 31


class ReplayWindow:
    """Remembers message transaction ids seen in the current session.

    raet forgets a finished message after 600 s and then delivers a replay again (quirk Q2).
    Here a tid counts as seen forever within the session: either it is in the recent set, or
    it lies more than ``size`` ids behind the highest one seen, which is treated as seen too.
    A new session (new remote sid) starts a fresh window.
    """

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self.highest: int | None = None
        self._recent: set[int] = set()

    def seen(self, tid: int) -> bool:
        if self.highest is None:
            return False
        behind = (self.highest - tid) % _WRAP
        if behind < _HALF and behind >= self.size:
            return True
        return tid in self._recent

    def record(self, tid: int) -> None:
        if self.highest is None or 0 < (tid - self.highest) % _WRAP < _HALF:
            self.highest = tid
        self._recent.add(tid)
        if len(self._recent) > 2 * self.size:
            high = self.highest
            self._recent = {t for t in self._recent if (high - t) % _WRAP < self.size}

    def reset(self) -> None:
        self.highest = None
        self._recent.clear()
