"""RoadStack's busy poll on real loopback sockets: after a request to a near peer the
wait polls before it sleeps (``spin_hits`` when the answer is there, ``spin_misses``
when the budget ran out first); never with ``busy_poll=0`` nor for a peer whose round
trip is longer than the budget is worth."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed, MessageDelivered, MessageReceived
from raetsalt.engine.road import RoadConfig
from raetsalt.keep.records import AutoMode

pytestmark = pytest.mark.integration

# Budgets far above any loopback round trip, so the spin is decided by the road's state,
# not by how fast this machine is: a spin that finds its answer waiting ends at once;
# one that finds nothing spins for SHORT.
GENEROUS = 10.0
SHORT = 0.1
PASSES = 2000
"""Wake-ups a step may take before the test fails (instead of hanging)."""


def passes() -> range:
    return range(PASSES)


@contextmanager
def stacks(tmp_path: Path, busy_poll: float) -> Iterator[tuple[RoadStack, RoadStack, int]]:
    """A main and a minion on loopback (native profile), joined, with one message each
    way delivered (a round trip measured)."""
    main = RoadStack(tmp_path / "main", ("127.0.0.1", 0), name="main", main=True,
                     auto=AutoMode.ONCE, config=RoadConfig(), busy_poll=busy_poll)
    minion = RoadStack(tmp_path / "minion", ("127.0.0.1", 0), name="minion",
                       auto=AutoMode.ONCE, config=RoadConfig(), busy_poll=busy_poll)
    with main, minion:
        uid = minion.connect(main.address)
        allowed = {main: False, minion: False}
        for _ in passes():
            for stack in (main, minion):
                allowed[stack] |= any(isinstance(e, Allowed) for e in stack.service(0.01))
            if all(allowed.values()):
                break
        else:
            raise AssertionError("the stacks did not join")
        minion.send(uid, {"warm": 1})
        answered = delivered = False
        for _ in passes():
            for event in main.service(0.01):
                if isinstance(event, MessageReceived):
                    main.send(event.remote, {"warm": 2})
            for event in minion.service(0.01):
                answered |= isinstance(event, MessageReceived)
                delivered |= isinstance(event, MessageDelivered)
            if answered and delivered:
                break
        else:
            raise AssertionError("the warm-up exchange did not complete")
        minion.stats.clear()
        yield main, minion, uid


def answer(main: RoadStack) -> None:
    """The main takes the request waiting on its socket and answers it at once."""
    for _ in passes():
        for event in main.service(1.0):
            if isinstance(event, MessageReceived):
                main.send(event.remote, {"pong": event.body["ping"]})
                main.flush()
                return
    raise AssertionError("no request came")


def pong(minion: RoadStack) -> list[object]:
    """The bodies of the first wake-up that brings messages to ``minion``."""
    for _ in passes():
        got = [e.body for e in minion.service(5.0) if isinstance(e, MessageReceived)]
        if got:
            return got
    raise AssertionError("no answer came")


def test_the_answer_of_a_request_is_taken_by_the_spin(tmp_path: Path) -> None:
    with stacks(tmp_path, GENEROUS) as (main, minion, uid):
        minion.send(uid, {"ping": 1})
        assert minion.service(0.0) == []  # sent; nothing came yet
        answer(main)
        events = minion.service(5.0)
        assert [e.body for e in events if isinstance(e, MessageReceived)] == [{"pong": 1}]
        assert (minion.stats["spin_hits"], minion.stats["spin_misses"]) == (1, 0)


def test_a_spin_that_finds_nothing_gives_up_and_the_wait_goes_on(tmp_path: Path) -> None:
    with stacks(tmp_path, SHORT) as (main, minion, uid):
        minion.send(uid, {"ping": 1})
        minion.service(0.0)
        minion.service(0.5)
        assert minion.stats["spin_misses"] == 1 and minion.stats["spin_hits"] == 0
        answer(main)  # the request is still answered, after the sleep
        assert pong(minion) == [{"pong": 1}]


@pytest.mark.parametrize("budget", [0.0, 1e-9])
def test_no_spin_when_turned_off_or_the_peer_is_too_far(tmp_path: Path, budget: float) -> None:
    """0 turns it off; with a budget of 1 ns every real round trip is too long for it."""
    with stacks(tmp_path, budget) as (main, minion, uid):
        minion.send(uid, {"ping": 1})
        minion.service(0.0)
        answer(main)
        assert pong(minion) == [{"pong": 1}]
        assert minion.stats["spin_hits"] == minion.stats["spin_misses"] == 0


def test_an_embedding_loop_spins_through_spin(tmp_path: Path) -> None:
    """``spin()`` is the busy poll for a loop with a selector of its own: True once the
    answer is there, and only once per send."""
    with stacks(tmp_path, GENEROUS) as (main, minion, uid):
        minion.send(uid, {"ping": 1})
        minion.flush()
        answer(main)
        assert minion.spin() is True
        assert minion.spin() is False  # the budget belongs to the last send
        got = [e.body for e in minion.service_ready() if isinstance(e, MessageReceived)]
        assert got == [{"pong": 1}]


def test_a_spin_ends_with_the_callers_time_out(tmp_path: Path) -> None:
    """``service(timeout)`` spins no longer than its time-out, whatever the budget: read
    on a clock that moves 1 ms at each reading, a 10 s spin would read it 10,000 times."""
    import time

    with stacks(tmp_path, GENEROUS) as (main, minion, uid):
        minion.send(uid, {"ping": 1})
        minion.service(0.0)
        readings = [time.monotonic()]

        def ticking() -> float:
            readings.append(readings[-1] + 0.001)
            return readings[-1]

        minion.clock = ticking
        minion.service(0.05)
        assert minion.stats["spin_misses"] == 1
        assert len(readings) < 200
