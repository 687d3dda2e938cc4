"""The native receiver's replay window (a fixed bit ring, see ``_ReplayWindow``)."""

from __future__ import annotations

import random

from raetsalt.engine.replay import WINDOW as REPLAY_WINDOW
from raetsalt.engine.replay import ReplayWindow as _ReplayWindow


class _Reference:
    """The rule spelled out with a set: seen, or too far below the highest."""

    def __init__(self) -> None:
        self.accepted: set[int] = set()
        self.highest = 0

    def seen(self, counter: int) -> bool:
        return counter in self.accepted or counter + REPLAY_WINDOW <= self.highest

    def mark(self, counter: int) -> None:
        self.accepted.add(counter)
        self.highest = max(self.highest, counter)


def test_in_order_counters_are_new_once() -> None:
    window = _ReplayWindow()
    for counter in range(1, 3 * REPLAY_WINDOW):
        assert not window.seen(counter)
        window.mark(counter)
        assert window.seen(counter)
    assert window.seen(REPLAY_WINDOW)  # fell out of the window long ago


def test_skipped_counters_may_arrive_late_within_the_window() -> None:
    window = _ReplayWindow()
    for counter in range(1, REPLAY_WINDOW + 10):  # fill every slot once
        window.mark(counter)
    window.mark(REPLAY_WINDOW + 1000)  # skip 990 counters whose slots were in use
    for late in range(REPLAY_WINDOW + 10, REPLAY_WINDOW + 1000):
        assert not window.seen(late)
    window.mark(REPLAY_WINDOW + 500)
    assert window.seen(REPLAY_WINDOW + 500)
    assert not window.seen(REPLAY_WINDOW + 501)


def test_a_jump_beyond_the_window_forgets_everything_below() -> None:
    window = _ReplayWindow()
    for counter in range(1, 100):
        window.mark(counter)
    window.mark(10 * REPLAY_WINDOW)
    assert window.seen(50)  # below the horizon: refused
    assert not window.seen(10 * REPLAY_WINDOW - 1)
    assert window.seen(10 * REPLAY_WINDOW)


def test_matches_the_set_rule_under_reordering_and_jumps() -> None:
    rng = random.Random(7)
    window, reference = _ReplayWindow(), _Reference()
    counter = 0
    for _ in range(200_000):
        step = rng.choice([1, 1, 1, 2, 7, 64, 300, 5000, -3, -40, -9000, 70000])
        counter = max(1, counter + step) if step > 0 else max(1, reference.highest + step)
        assert window.seen(counter) == reference.seen(counter), counter
        if not reference.seen(counter):
            window.mark(counter)
            reference.mark(counter)


def test_message_tids_wrap_and_stay_seen() -> None:
    from raetsalt.engine.replay import TID_WINDOW, TidWindow

    window = TidWindow()
    tids = [0xFFFFFFFF - 5 + i for i in range(5)] + [0xFFFFFFFF, 1, 2, 3]
    for tid in tids:
        assert not window.seen(tid)
        window.mark(tid)
    assert all(window.seen(tid) for tid in tids)
    assert not window.seen(4)  # newer, after the wrap
    assert window.seen(0xFFFFFFFF - 2 * TID_WINDOW)  # far behind: counts as seen
    fresh = TidWindow()
    assert not fresh.seen(123456) and not fresh.window.bits  # no memory until used
