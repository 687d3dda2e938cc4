"""A minion follows a main that moved (same keys, new address).

As first found: after the master came back at a new address, the minion's join found the
master's name already taken by the record of its old address and failed with
``name_taken`` forever.  The estate with that name, role and keys is the same estate:
the new remote takes it over, and its session ids continue from the old ones.
"""

from __future__ import annotations

from raetsalt.engine.events import Allowed, TransactionFailed
from raetsalt.testing.pair import MAIN_HA, MINION_HA, make_peer, road_pair

NEW_HA = ("10.0.0.9", 4606)


def test_a_restarted_minion_joins_its_main_at_a_new_address() -> None:
    pair = road_pair(seed=8)
    assert pair.connect()
    old_sid = pair.minion.road.remote("main").sid
    # The main comes back elsewhere with its keep; the minion restarts with the new
    # address in its config (and its old keep, which names the main at the old one).
    pair.net.detach(MAIN_HA)
    pair.net.detach(MINION_HA)
    pair.main.drain()
    pair.main = make_peer(pair.main.keep, NEW_HA, "main", main=True, seed=81)
    pair.net.attach(NEW_HA, pair.main.road)
    pair.restart_minion()
    pair.minion.road.connect(NEW_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.minion.of(Allowed)), timeout=30)
    assert not [e for e in pair.minion.of(TransactionFailed) if e.reason == "name_taken"]
    remote = pair.minion.road.remote("main")
    assert remote.ha == NEW_HA and list(pair.minion.road.remotes_by_name) == ["main"]
    assert remote.sid > old_sid  # sessions continue: the main's checks still pass
    records = pair.minion_keep.load_remotes()
    assert [(r.name, r.ha) for r in records] == [("main", NEW_HA)]
    pair.main.road.send_message("minion", {"job": "after the move"}, pair.net.now)
    assert pair.until(lambda: {"job": "after the move"} in pair.minion.received(), timeout=10)


def test_a_running_minion_re_pointed_at_the_new_address_reconnects() -> None:
    pair = road_pair(seed=9)
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    pair.main.drain()
    pair.main = make_peer(pair.main.keep, NEW_HA, "main", main=True, seed=91)
    pair.net.attach(NEW_HA, pair.main.road)
    allowed = len(pair.minion.of(Allowed))
    pair.minion.road.connect(NEW_HA, pair.net.now, name="main")  # what re-resolving does
    assert pair.until(lambda: len(pair.minion.of(Allowed)) > allowed, timeout=30)
    assert pair.minion.road.remote("main").ha == NEW_HA


def test_another_estate_under_the_name_is_still_refused() -> None:
    """Same name, other keys: not the estate we know (it may be an impostor)."""
    from raetsalt.keep.store import MemoryKeep

    pair = road_pair(seed=10)
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    impostor = make_peer(MemoryKeep(), NEW_HA, "main", main=True, seed=101)
    pair.net.attach(NEW_HA, impostor.road)
    pair.restart_minion()
    pair.minion.road.connect(NEW_HA, pair.net.now)
    pair.until(lambda: False, timeout=15)
    assert not pair.minion.of(Allowed)
    assert pair.minion.of(TransactionFailed)
    assert pair.minion.road.remote("main").ha == MAIN_HA  # the known one is untouched
