"""Join and key acceptance between two roads (pending, accepted, rejected, denied)."""

from __future__ import annotations

from raetsalt.engine.events import Allowed, Joined, JoinPending, JoinRejected, MessageReceived
from raetsalt.keep.policy import Action
from raetsalt.keep.records import Acceptance, AutoMode
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.pair import MAIN_HA, make_peer, make_road, road_pair


def test_pending_until_an_operator_accepts_then_joins_without_restart() -> None:
    pair = road_pair(main_config={"auto": AutoMode.NEVER})
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)), timeout=5)
    role = pair.main_keep.load_role("minion")
    assert role is not None and role.acceptance is Acceptance.PENDING
    # Nothing completes while the key is pending, however long we wait.
    pair.until(lambda: False, timeout=30)
    assert not pair.main.of(Joined)
    assert pair.minion.of(JoinPending) and pair.minion.of(JoinPending)[0].here is False
    assert pair.accept("minion")  # the operator's command, no restart
    accepted_at = pair.net.now
    assert pair.until(
        lambda: bool(pair.main.of(Allowed)) and bool(pair.minion.of(Allowed)), timeout=10
    )
    assert pair.net.now - accepted_at < 2.0


def test_rejected_key_is_refused() -> None:
    pair = road_pair(main_config={"auto": AutoMode.NEVER})
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)), timeout=5)
    assert pair.main.decide(Action.REJECT, "minion", pair.net.now)
    assert pair.until(lambda: bool(pair.minion.of(JoinRejected)), timeout=10)
    assert pair.minion.of(JoinRejected)[0].here is False
    assert not pair.main.of(Joined)


def test_same_name_with_new_keys_is_denied_and_the_original_keeps_working() -> None:
    pair = road_pair()
    assert pair.connect()
    # An impostor (or a rebuilt minion) with the same name and fresh keys.
    impostor = make_peer(MemoryKeep(), ("10.0.0.9", 4510), "minion", seed=99)
    pair.net.attach(("10.0.0.9", 4510), impostor.road)
    impostor.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(impostor.of(JoinRejected)), timeout=10)
    denied = pair.main_keep.list_denied()
    assert (
        list(denied) == ["minion"]
        and denied["minion"][0][0] == impostor.road.local.signer.verify_key.hex()
    )
    assert pair.main.road.remote("minion").ha == ("10.0.0.2", 4510)  # not hijacked
    pair.minion.road.send_message("main", {"still": "here"}, pair.net.now)
    assert pair.until(lambda: pair.main.received() == [{"still": "here"}], timeout=10)


def test_vacuous_join_to_a_non_main_is_dropped_silently() -> None:
    pair = road_pair()
    other = make_road(MemoryKeep(), ("10.0.0.3", 4510), "other", seed=7)
    pair.net.attach(("10.0.0.3", 4510), other)
    other.connect(("10.0.0.2", 4510), pair.net.now)  # the minion is not a main
    pair.until(lambda: False, timeout=3)
    assert pair.minion.road.stats["drop_not_main"] >= 1
    assert "other" not in pair.minion.road.remotes_by_name


def test_both_directions_of_messages_after_join() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.main.road.send_message("minion", {"to": "minion"}, pair.net.now)
    pair.minion.road.send_message("main", {"to": "main"}, pair.net.now)
    assert pair.until(
        lambda: bool(pair.main.of(MessageReceived)) and bool(pair.minion.of(MessageReceived))
    )
    assert pair.minion.received() == [{"to": "minion"}]
    assert pair.main.received() == [{"to": "main"}]
