"""The one replay window: which counters of a session were already accepted.

``ReplayWindow`` keeps one bit per counter for the last ``WINDOW`` counters up to the
highest accepted one, in a fixed ring (8 KiB), so memory and the cost per packet are
constant: no set that grows with traffic and has to be rebuilt (a 131072-entry set took
milliseconds to prune, a stall every 65536 packets).  Counters at or below
``highest - WINDOW`` count as seen: a late duplicate is refused, however late (raet
forgot a message after 600 s and delivered a replay again, quirk Q2).

Native packets use their 64-bit counters directly.  raet-profile messages are numbered
by 32-bit transaction ids that wrap from 0xffffffff to 1; ``TidWindow`` unwraps them
(serial-number arithmetic) onto the same window.  A window belongs to one session key:
a new session starts a fresh one.
"""

from __future__ import annotations

WINDOW = 65536
"""Counters this far below the highest accepted one are refused as replays (native)."""
TID_WINDOW = 8192
"""The window for raet-profile message tids (one message per tid: a smaller ring, 1 KiB
per remote, allocated with the first message)."""
_TID_SPAN = 1 << 32
_TID_HALF = 1 << 31


class ReplayWindow:
    """Which of the last ``size`` counters (a power of two) up to the highest were
    accepted."""

    __slots__ = ("bits", "highest", "size", "mask")

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self.mask = size - 1
        self.bits = bytearray()  # allocated by the first mark
        self.highest = 0

    def seen(self, counter: int) -> bool:
        if counter > self.highest:
            return False
        if counter + self.size <= self.highest:
            return True
        index = counter & self.mask
        return bool(self.bits[index >> 3] >> (index & 7) & 1)

    def mark(self, counter: int) -> None:
        if not self.bits:
            self.bits = bytearray(self.size // 8)
        if counter > self.highest:
            if counter - self.highest > 1:
                # The slots of the skipped counters still hold counters that just left
                # the window: clear them so the skipped ones can arrive late.
                self._clear(self.highest + 1, counter)
            self.highest = counter
        index = counter & self.mask
        self.bits[index >> 3] |= 1 << (index & 7)

    def _clear(self, first: int, stop: int) -> None:
        """Forget counters ``first`` up to (not including) ``stop``."""
        if stop - first >= self.size:
            self.bits = bytearray(self.size // 8)
            return
        bits, mask = self.bits, self.mask
        counter = first
        while counter < stop and counter & 7:  # up to a byte boundary, bit by bit
            index = counter & mask
            bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
            counter += 1
        whole = (stop - counter) >> 3
        if whole > 0:  # whole bytes, possibly wrapping around the ring
            start = (counter & mask) >> 3
            head = min(whole, len(bits) - start)
            bits[start : start + head] = bytes(head)
            if whole > head:
                bits[: whole - head] = bytes(whole - head)
            counter += whole << 3
        while counter < stop:
            index = counter & mask
            bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
            counter += 1


class TidWindow:
    """A ``ReplayWindow`` over 32-bit transaction ids that wrap (never 0).

    A tid is placed relative to the highest one accepted: up to half the id space ahead
    is newer, anything else is older.  The first tid of a session may be any value.
    """

    __slots__ = ("window",)

    def __init__(self) -> None:
        self.window = ReplayWindow(TID_WINDOW)

    def _unwrap(self, tid: int) -> int:
        highest = self.window.highest
        if highest == 0:
            return tid
        delta = (tid - highest) % _TID_SPAN
        return highest + delta if delta < _TID_HALF else highest - (_TID_SPAN - delta)

    def seen(self, tid: int) -> bool:
        counter = self._unwrap(tid)
        return counter < 1 or self.window.seen(counter)

    def mark(self, tid: int) -> None:
        counter = self._unwrap(tid)
        if counter >= 1:
            self.window.mark(counter)
