"""Joins of new ids are unauthenticated, so what they can add is bounded: at most
``max_pending`` keys wait for an operator (further new ids are dropped, the limit reported
once each time it is reached), each source address gets a burst of new ids and then a
trickle, and join state is bounded with the least recently asking joiner going first.
The accepted minions are served throughout."""

from __future__ import annotations

from raetsalt.engine.events import Allowed, JoinPending, PendingLimitReached
from raetsalt.keep.policy import Action
from raetsalt.keep.records import AutoMode
from raetsalt.testing.fakenet import RawHost
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import MAIN_HA, road_pair

NEVER = {"auto": AutoMode.NEVER}


def test_pending_keys_are_capped_and_the_limit_is_reported_once() -> None:
    pair = road_pair(main_config={**NEVER, "max_pending": 5})
    road = pair.main.road
    for n in range(50):
        road.receive_datagram(join_request(f"forged{n}"), (f"10.9.{n}.1", 4000), pair.net.now)
    assert road.keys.pending == 5
    assert road.stats["drop_pending_limit"] == 45
    assert len(pair.main.of(PendingLimitReached)) == 1
    assert len(pair.main_keep.list_roles()) == 5
    # An operator clears one: there is room for one more, and a later overflow is
    # reported again.
    assert pair.main.decide(Action.DELETE, "forged0", pair.net.now)
    road.receive_datagram(join_request("late1"), ("10.9.200.1", 4000), pair.net.now)
    road.receive_datagram(join_request("late2"), ("10.9.201.1", 4000), pair.net.now)
    assert "late1" in road.keys.roles and "late2" not in road.keys.roles
    assert len(pair.main.of(PendingLimitReached)) == 2


def test_new_ids_from_one_address_get_a_burst_then_a_trickle() -> None:
    pair = road_pair(main_config={**NEVER, "new_ids_burst": 20, "new_ids_per_second": 2.0})
    road = pair.main.road
    now = pair.net.now
    for n in range(100):
        road.receive_datagram(join_request(f"burst{n}", tid=n + 1), ("10.8.0.1", 5000), now)
    assert road.keys.pending == 20 and road.stats["drop_rate_limit"] == 80
    for n in range(10):  # ten more over the next five seconds: all admitted
        road.receive_datagram(
            join_request(f"later{n}", tid=n + 1001), ("10.8.0.1", 5000), now + 0.5 * (n + 1)
        )
    assert road.keys.pending == 30
    # Another address is not affected (another port of the same host neither: minions
    # behind one NAT).
    road.receive_datagram(join_request("other"), ("10.8.0.2", 4000), now + 5)
    road.receive_datagram(join_request("neighbour"), ("10.8.0.1", 5001), now + 5)
    assert {"other", "neighbour"} <= set(road.keys.roles)


def test_the_accepted_minion_is_served_during_a_flood_of_new_ids() -> None:
    pair = road_pair(main_config={**NEVER, "max_pending": 100})
    attacker = RawHost()
    pair.net.attach(("10.66.0.1", 666), attacker)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(JoinPending)))
    assert pair.accept("minion")
    assert pair.until(lambda: bool(pair.minion.of(Allowed)))
    for n in range(3000):
        attacker.send(join_request(f"flood{n}", tid=n + 1), MAIN_HA)
    for n in range(20):
        pair.main.road.send_message("minion", {"ping": n}, pair.net.now)
        assert pair.until(lambda n=n: {"ping": n} in pair.minion.received(), timeout=2)
    assert pair.main.road.keys.pending <= 100
    assert attacker.received_bytes <= 3 * attacker.sent_bytes


def test_a_join_flood_cannot_keep_a_real_minion_out() -> None:
    """Join state is bounded, and the slot of the joiner that asked least recently goes
    first: forged requests churn through the slots while the real one keeps asking."""
    pair = road_pair(main_config={"max_joins": 64, "new_ids_burst": 100_000})
    attacker = RawHost()
    pair.net.attach(("10.66.0.1", 666), attacker)
    for n in range(5000):
        attacker.send(join_request(f"flood{n}", tid=n + 1), MAIN_HA)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.minion.of(Allowed)), timeout=30)
    assert len(pair.main.road.joins) <= 64
    # Beyond three quarters of the slots the flood is taken only at the slots' turnover
    # (engine/busy.py) and answered "busy" otherwise; what it does take churns.
    stats = pair.main.road.stats
    assert stats["handshake_busy"] > 4000 and stats["join_evicted"] + len(pair.main.road.joins) > 48
