"""A restart of either side (same keep) re-establishes the session by itself."""

from __future__ import annotations

import pytest

from raetsalt.engine.events import Allowed, JoinRejected
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import MAIN_HA, MINION_HA, road_pair


@pytest.mark.parametrize("loss", [0.0, 0.1])
def test_main_restart_with_its_keep(loss: float) -> None:
    pair = road_pair(Conditions(loss=loss, jitter=0.002), seed=3)
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    pair.until(lambda: False, timeout=5)  # the minion notices the silence
    pair.restart_main()
    assert pair.until(lambda: bool(pair.main.of(Allowed)), timeout=30)
    pair.minion.road.send_message("main", {"after": "restart"}, pair.net.now)
    pair.main.road.send_message("minion", {"back": 1}, pair.net.now)
    assert pair.until(
        lambda: (
            pair.main.received() == [{"after": "restart"}] and {"back": 1} in pair.minion.received()
        )
    )


@pytest.mark.parametrize("loss", [0.0, 0.1])
def test_minion_restart_with_its_keep(loss: float) -> None:
    pair = road_pair(Conditions(loss=loss, jitter=0.002), seed=4)
    assert pair.connect()
    pair.net.detach(MINION_HA)
    pair.restart_minion()
    pair.minion.road.connect(MAIN_HA, pair.net.now, name="main")
    assert pair.until(lambda: bool(pair.minion.of(Allowed)), timeout=30)
    assert not pair.minion.of(JoinRejected)
    pair.main.road.send_message("minion", {"hello": "again"}, pair.net.now)
    assert pair.until(lambda: pair.minion.received() == [{"hello": "again"}])


def test_main_that_forgot_its_remotes_gets_a_fresh_join() -> None:
    """The main keeps its identity but lost its remote records: the minion's ids are
    unknown there, so it is told to renew and joins afresh by itself."""
    from raetsalt.keep.store import MemoryKeep

    pair = road_pair()
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    identity = pair.main_keep.load_local()
    forgetful = MemoryKeep()
    assert identity is not None
    forgetful.save_local(identity)
    pair.restart_main(forgetful)
    assert pair.until(
        lambda: bool(pair.main.of(Allowed)) and pair.minion.road.remote("main").allowed, timeout=60
    )
    pair.minion.road.send_message("main", {"x": 1}, pair.net.now)
    assert pair.until(lambda: pair.main.received() == [{"x": 1}])


def test_main_with_new_keys_is_refused_by_the_minion() -> None:
    """A main that comes back with a different key is not trusted silently (Salt's
    minion_master.pub pinning); the minion's keep records the new key as denied."""
    from raetsalt.keep.store import MemoryKeep

    pair = road_pair()
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    pair.restart_main(MemoryKeep())
    assert pair.until(lambda: any(e.here for e in pair.minion.of(JoinRejected)), timeout=60)
    assert "main" in pair.minion_keep.list_denied()
