"""Key decisions in the engine: operator commands take effect at once (no keep is read
or polled), and every record change is a persistence event, only when it changed."""

from __future__ import annotations

from raetsalt.engine.events import (
    Allowed,
    DeniedChanged,
    Departed,
    JoinPending,
    KeepEvent,
    RoleChanged,
    RoleRemoved,
)
from raetsalt.keep.policy import Action
from raetsalt.keep.records import Acceptance, AutoMode, KeyRef, KeyState
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import MAIN_HA, MINION_HA, road_pair

NEVER = {"auto": AutoMode.NEVER}


def _keep_events(road: object) -> list[KeepEvent]:
    out = []
    while (event := road.next_event()) is not None:  # type: ignore[attr-defined]
        if isinstance(event, KeepEvent):
            out.append(event)
    return out


def test_accepting_a_pending_key_answers_the_waiting_join_at_once() -> None:
    pair = road_pair(main_config=NEVER)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)))
    assert pair.accept("minion")
    accepted_at = pair.net.now
    assert pair.until(lambda: bool(pair.main.of(Allowed)) and bool(pair.minion.of(Allowed)))
    # No polling: the response left with the command (one network trip, not 0.5 s).
    assert pair.net.now - accepted_at < 0.05


def test_a_deleted_pending_key_stays_deleted() -> None:
    """The old engine re-read the keep for a pending join every 0.5 s and wrote the key
    back; now the deletion ends the waiting join and nothing writes the key again until
    the minion asks again (Salt: it then shows up as new)."""
    pair = road_pair(main_config=NEVER)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)))
    pair.net.detach(MINION_HA)  # the minion is gone (a "ghost")
    assert pair.main.decide(Action.DELETE, "minion", pair.net.now)
    assert pair.main_keep.load_role("minion") is None
    pair.until(lambda: False, timeout=300)
    assert pair.main_keep.load_role("minion") is None
    assert "minion" not in pair.main.road.remotes_by_name
    assert not pair.main.road.joins


def test_deleting_an_accepted_key_drops_the_session_and_the_minion_joins_again() -> None:
    pair = road_pair(main_config=NEVER)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)))
    assert pair.accept("minion")
    assert pair.until(lambda: bool(pair.minion.of(Allowed)))
    assert pair.main.decide(Action.DELETE, "minion", pair.net.now)
    assert [e.role for e in pair.main.of(Departed)] == ["minion"]
    assert "minion" not in pair.main.road.remotes_by_name
    # The minion's next alive is answered "unjoined": it joins again, pending (re-auth).
    pending_before = len(pair.main.of(JoinPending))
    assert pair.until(lambda: len(pair.main.of(JoinPending)) > pending_before, timeout=10)
    record = pair.main_keep.load_role("minion")
    assert record is not None and record.acceptance is Acceptance.PENDING


def test_an_operator_action_on_a_key_that_changed_does_nothing() -> None:
    pair = road_pair(main_config=NEVER)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)))
    stale = KeyRef("minion", KeyState.PENDING, "0" * 64, "1" * 64)
    assert not pair.main.road.change_key(Action.ACCEPT, stale, pair.net.now)
    assert not pair.main.road.change_key(Action.DELETE, stale, pair.net.now)
    assert pair.main_keep.load_role("minion").acceptance is Acceptance.PENDING  # type: ignore[union-attr]


def test_a_repeated_join_writes_nothing() -> None:
    """Storage only when something changed: a re-allow of a known minion writes no
    role and (within its reserved session block) no remote record."""
    pair = road_pair()
    assert pair.connect()
    pair.main.drain()
    road = pair.main.road
    for _ in range(5):
        road.allow(road.remote("minion").uid, pair.net.now)
        pair.until(lambda: False, timeout=2)
    assert not _keep_events(road)


def test_role_events_are_the_keep_changes() -> None:
    pair = road_pair(main_config=NEVER)
    road = pair.main.road
    road.receive_datagram(join_request("web1"), ("10.1.1.1", 4000), pair.net.now)
    events = _keep_events(road)
    assert any(isinstance(e, RoleChanged) and e.record.role == "web1" for e in events)
    ref = KeyRef("web1", KeyState.PENDING, *_keys(road, "web1"))
    assert road.change_key(Action.DELETE, ref, pair.net.now)
    assert any(isinstance(e, RoleRemoved) for e in _keep_events(road))
    # A second key for a pending id is denied and recorded as such.
    road.receive_datagram(join_request("web2"), ("10.1.1.2", 4000), pair.net.now)
    road.receive_datagram(join_request("web2"), ("10.1.1.2", 4001), pair.net.now)
    assert any(isinstance(e, DeniedChanged) and e.role == "web2" for e in _keep_events(road))


def _keys(road: object, role: str) -> tuple[str, str]:
    record = road.keys.roles[role]  # type: ignore[attr-defined]
    return record.verhex, record.pubhex
