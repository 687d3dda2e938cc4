"""The choice of a minion's master among several (pure; manual clock)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.services.masters import (
    Hold,
    MasterChoice,
    Probe,
    Release,
    failover_order,
    rendezvous_order,
)

MASTERS = ["m1:4506", "m2:4506", "m3:4506"]


def test_rendezvous_spreads_minions_evenly_and_moves_only_the_lost_masters_minions() -> None:
    ids = [f"minion{i}" for i in range(3000)]
    first = {i: rendezvous_order(i, MASTERS)[0] for i in ids}
    counts = Counter(first.values())
    assert set(counts) == set(MASTERS)
    assert all(800 <= n <= 1200 for n in counts.values()), counts
    # m2 lost: the minions of m1 and m3 stay; m2's spread over both survivors.
    survivors = [m for m in MASTERS if m != "m2:4506"]
    after = {i: rendezvous_order(i, survivors)[0] for i in ids}
    assert all(after[i] == first[i] for i in ids if first[i] != "m2:4506")
    moved = Counter(after[i] for i in ids if first[i] == "m2:4506")
    assert set(moved) == set(survivors) and min(moved.values()) > 300, moved
    # ...and each moved minion goes to its own second choice.
    assert all(after[i] == rendezvous_order(i, MASTERS)[1]
               for i in ids if first[i] == "m2:4506")


@given(st.text(min_size=1, max_size=20), st.permutations(MASTERS))
def test_rendezvous_order_does_not_depend_on_the_listed_order(minion: str,
                                                             listed: list[str]) -> None:
    assert rendezvous_order(minion, listed) == rendezvous_order(minion, MASTERS)


def test_failover_order_is_salts() -> None:
    rng = random.Random(3)
    assert failover_order(MASTERS, random_master=False, failback=True, rng=rng) == MASTERS
    for _ in range(20):  # with failback the first stays first
        assert failover_order(MASTERS, random_master=True, failback=True, rng=rng)[0] == "m1:4506"
    seen = {failover_order(MASTERS, random_master=True, failback=False, rng=rng)[0]
            for _ in range(50)}
    assert seen == set(MASTERS)


def test_a_lost_master_is_left_for_the_next_and_the_list_wraps() -> None:
    choice = MasterChoice(MASTERS)
    assert choice.start(0.0) == [Hold("m1:4506", None, "start")]
    assert choice.step(1.0, "connected") == []
    assert choice.step(100.0, "connected") == []  # healthy: nothing, however long
    assert choice.step(101.0, "down") == [Release("m1:4506"),
                                          Hold("m2:4506", "m1:4506", "lost")]
    assert choice.step(102.0, "down") == [Release("m2:4506"),
                                          Hold("m3:4506", "m2:4506", "lost")]
    assert choice.step(103.0, "down") == [Release("m3:4506"),
                                          Hold("m1:4506", "m3:4506", "lost")]
    assert choice.moves == 3


def test_a_master_that_never_answers_is_left_after_connect_timeout() -> None:
    choice = MasterChoice(MASTERS, connect_timeout=30.0)
    choice.start(0.0)
    assert choice.step(29.0, "connecting") == []
    assert choice.deadline() == 30.0
    assert choice.step(30.0, "connecting") == [Release("m1:4506"),
                                               Hold("m2:4506", "m1:4506", "no answer")]
    assert choice.step(31.0, "connected") == []


def test_pending_or_rejected_keys_do_not_move_the_minion() -> None:
    choice = MasterChoice(MASTERS, connect_timeout=5.0)
    choice.start(0.0)
    for t in range(1, 50):
        assert choice.step(float(t), "pending" if t % 2 else "rejected") == []


def test_a_single_master_is_never_released() -> None:
    choice = MasterChoice(["m1:4506"], failback=True)
    choice.start(0.0)
    assert choice.step(1.0, "down") == []
    assert choice.step(100.0, "connecting") == []


def test_failback_probes_the_first_master_and_moves_back_when_it_answers() -> None:
    choice = MasterChoice(MASTERS, failback=True, failback_interval=60.0, probe_window=10.0)
    choice.start(0.0)
    choice.step(1.0, "connected")
    assert choice.step(2.0, "down")[-1] == Hold("m2:4506", "m1:4506", "lost")
    assert choice.step(3.0, "connected") == []
    assert choice.deadline() == 62.0
    assert choice.step(61.0, "connected") == []
    assert choice.step(62.0, "connected") == [Probe("m1:4506")]
    assert choice.probing == "m1:4506"
    # The probe fails: abandoned after the window, tried again an interval later.
    assert choice.step(70.0, "connected", "connecting") == []
    assert choice.step(72.0, "connected", "connecting") == [Release("m1:4506")]
    assert choice.held == "m2:4506"
    assert choice.step(131.0, "connected") == []
    assert choice.step(132.0, "connected") == [Probe("m1:4506")]
    assert choice.step(133.0, "connected", "connected") == [
        Release("m2:4506"), Hold("m1:4506", "m2:4506", "failback")]
    assert choice.held == "m1:4506" and choice.probing is None
    assert choice.step(1000.0, "connected") == []  # on the first: no more probes


def test_losing_the_held_master_while_probing_ends_the_probe() -> None:
    choice = MasterChoice(MASTERS, failback=True, failback_interval=10.0)
    choice.start(0.0)
    choice.step(0.0, "down")  # on m2
    choice.step(1.0, "connected")
    assert choice.step(11.0, "connected") == [Probe("m1:4506")]
    assert choice.step(12.0, "down", "connecting") == [
        Release("m1:4506"), Release("m2:4506"), Hold("m3:4506", "m2:4506", "lost")]
    assert choice.probing is None


def test_without_failback_there_is_no_probe() -> None:
    choice = MasterChoice(MASTERS)
    choice.start(0.0)
    choice.step(0.0, "down")
    for t in range(1, 10000, 97):
        assert choice.step(float(t), "connected") == []


def test_no_master_is_an_error() -> None:
    with pytest.raises(ValueError):
        MasterChoice([])
