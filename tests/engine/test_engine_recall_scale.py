"""A restarted main with 10,000 known minions calls them all back within a minute, at its
handshake rate and never above it, with at most ``recall_window`` calls at a time
(engine/recall.py), on a manual clock.

The road around ``Recall`` is a model (``ModelMain``): its ``allow`` is a call that a
main able to finish ``capacity`` handshakes a second completes in turn (a queue served
at that rate, plus the round trip), so the test measures the pacing, not the crypto of
10,000 real handshakes.  The admission (``busy.Admission``) and the guard are the
road's own.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from raetsalt.engine.busy import Admission
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.guard import Guard
from raetsalt.engine.recall import Recall
from raetsalt.engine.remote import Link, Remote
from raetsalt.wire.enums import TransactionKind

MINIONS = 10_000
TARGET = 60.0
"""Seconds in which every minion must be back (the scale target)."""


@dataclass
class _Call:
    kind: TransactionKind = TransactionKind.ALLOW
    initiator: bool = True


@dataclass
class _Local:
    main: bool = True


@dataclass
class ModelMain:
    """The part of a road ``Recall`` uses, with allows that finish at ``capacity``/s."""

    config: RoadConfig
    capacity: float
    rtt: float = 0.002
    loss: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(5))
    stats: Counter[str] = field(default_factory=Counter)
    remotes: dict[int, Remote] = field(default_factory=dict)
    local: _Local = field(default_factory=_Local)
    timer: float | None = None
    busy_until: float = 0.0
    done: list[tuple[float, int, bool]] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)
    most_at_once: int = 0
    calling: int = 0
    back: int = 0

    def __post_init__(self) -> None:
        self.admission = Admission.for_config(self.config)
        self.guard = Guard(factor=self.config.amplification, burst=self.config.new_ids_burst,
                           rate=self.config.new_ids_per_second)
        for uid in range(2, MINIONS + 2):
            remote = Remote(uid=uid, name=f"m{uid}", ha=("10.0.0.1", uid))
            remote.link = Link.JOINED
            self.remotes[uid] = remote

    def arm(self, owner: Any, when: float | None) -> None:
        self.timer = when

    def allow(self, uid: int, now: float) -> None:
        remote = self.remotes[uid]
        remote.transactions[(True, 0, uid)] = _Call()  # type: ignore[assignment]
        self.calls.append(now)
        answered = self.rng.random() >= self.loss
        # The main serves handshakes one after the other at its capacity; an unanswered
        # call ends at the allow's time-out.
        self.busy_until = max(self.busy_until, now + self.rtt) + 1.0 / self.capacity
        ends = self.busy_until if answered else now + 4.0
        heapq.heappush(self.done, (ends, uid, answered))
        self.calling += 1
        self.most_at_once = max(self.most_at_once, self.calling)

    def run(self, recall: Recall, until: float) -> float:
        """Run the clock until every remote is allowed (or ``until``); when that was."""
        now = 0.0
        while now <= until:
            if self.back + len(self.lost) == MINIONS:
                return now
            nexts = [t for t in (self.timer, self.done[0][0] if self.done else None)
                     if t is not None]
            if not nexts:
                return now
            now = max(now, min(nexts))
            while self.done and self.done[0][0] <= now:
                _, uid, answered = heapq.heappop(self.done)
                remote = self.remotes[uid]
                remote.transactions.clear()
                self.calling -= 1
                if answered:
                    remote.link = Link.ALLOWED
                    self.back += 1
                else:
                    self.lost.add(uid)
            if self.timer is not None and self.timer <= now:
                self.timer = None
                recall.on_timer(now)
        return now

    lost: set[int] = field(default_factory=set)


def _most_in_a_second(times: list[float]) -> int:
    most, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.parametrize(("rate", "capacity"), [
    (2000.0, 2000.0),  # the default rate, a main that keeps up with it
    (2000.0, 200.0),   # the default rate, a main that finishes 200 handshakes a second
    (250.0, 1000.0),   # a rate set below what the main could do: the rate holds
])
def test_ten_thousand_minions_are_called_back_within_a_minute_at_the_rate(
    rate: float, capacity: float,
) -> None:
    config = RoadConfig(handshake_rate=rate, handshake_burst=rate / 2, recall_window=256)
    main = ModelMain(config, capacity=capacity)
    recall = Recall.after_restart(main)  # type: ignore[arg-type]
    assert recall is not None
    took = main.run(recall, until=10 * TARGET)
    assert all(r.allowed for r in main.remotes.values())
    assert main.stats["recall_allow"] == MINIONS  # each called once
    assert took <= TARGET, took
    # Never above the rate: within any second, the burst plus a second's tokens.
    assert _most_in_a_second(main.calls) <= rate / 2 + rate + 1
    assert main.most_at_once <= config.recall_window
    # ... and as fast as the slower of the rate and the main allow (within 20 %).
    assert took <= MINIONS / min(rate, capacity) * 1.2 + 1.0


def test_a_lost_tenth_costs_their_time_outs_and_slows_no_one_else_beyond_the_target() -> None:
    config = RoadConfig(handshake_rate=2000.0, handshake_burst=1000.0, recall_window=256)
    main = ModelMain(config, capacity=300.0, loss=0.1)
    recall = Recall.after_restart(main)  # type: ignore[arg-type]
    assert recall is not None
    took = main.run(recall, until=10 * TARGET)
    back = sum(r.allowed for r in main.remotes.values())
    assert back + len(main.lost) == MINIONS and len(main.lost) > MINIONS * 0.05
    assert main.stats["recall_allow"] == MINIONS  # no retry of the lost
    assert took <= TARGET, took
