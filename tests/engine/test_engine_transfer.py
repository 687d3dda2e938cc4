"""Join, allow, alive and messages over a lossy, duplicating, reordering net."""

from __future__ import annotations

import hashlib

import msgpack
import pytest

from raetsalt.engine import RoadConfig
from raetsalt.engine.events import (
    Allowed,
    MessageDelivered,
    MessageReceived,
    PresenceChanged,
    TransactionFailed,
)
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import Pair, road_pair

SEEDS = range(20)
NETWORKS = {
    "clean": Conditions(),
    "loss10": Conditions(loss=0.10, duplicate=0.05, jitter=0.003),
    "loss30": Conditions(loss=0.30, duplicate=0.05, jitter=0.003),
}


def _bodies(seed: int, sizes: list[int]) -> list[dict[str, object]]:
    # Distinct, seed-dependent content so a mix-up between messages cannot pass.
    out = []
    for n, size in enumerate(sizes):
        block = hashlib.sha256(f"{seed}:{n}".encode()).hexdigest()
        out.append({"n": n, "data": (block * (size // len(block) + 1))[:size]})
    return out


PROFILES = {"raet": {"native": False}, "native": {"native": True}}


def _pair(network: str, seed: int, profile: str) -> Pair:
    settings = PROFILES[profile]
    return road_pair(NETWORKS[network], seed=seed, main_config=settings, minion_config=settings)


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("seed", SEEDS)
def test_small_and_segmented_messages_arrive_once_in_order(
    network: str, seed: int, profile: str
) -> None:
    pair = _pair(network, seed, profile)
    assert pair.connect(), "join + allow did not complete"
    assert {e.profile for e in pair.minion.of(Allowed)} == {profile}
    sent = _bodies(seed, [100, 65536, 100, 3000])
    back = _bodies(seed + 1000, [100, 65536])
    for body in sent:
        pair.minion.road.send_message("main", body, pair.net.now)
    for body in back:
        pair.main.road.send_message("minion", body, pair.net.now)
    assert pair.until(
        lambda: len(pair.main.received()) == len(sent) and len(pair.minion.received()) == len(back)
    )
    # Let retransmissions and late duplicates settle, then check nothing arrived twice.
    pair.until(lambda: False, timeout=5.0)
    assert_order(profile, pair.main.received(), sent)
    assert_order(profile, pair.minion.received(), back)
    delivered = [e.mid for e in pair.minion.of(MessageDelivered)]
    assert sorted(delivered) == [1, 2, 3, 4]
    if profile == "raet":
        assert delivered == [1, 2, 3, 4]


def assert_order(profile: str, received: list[object], sent: list[dict[str, object]]) -> None:
    """Everything arrived once; in send order on the raet profile, in send order per
    stream (small: express, large: bulk) on the native one."""
    assert sorted(received, key=repr) == sorted(sent, key=repr)
    if profile == "raet":
        assert received == sent
        return
    express = RoadConfig().native_express_size

    def small(body: object) -> bool:
        return len(msgpack.packb(body)) <= express

    assert [b for b in received if small(b)] == [b for b in sent if small(b)]
    assert [b for b in received if not small(b)] == [b for b in sent if not small(b)]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("seed", SEEDS)
def test_one_mebibyte_message(network: str, seed: int, profile: str) -> None:
    pair = _pair(network, seed, profile)
    assert pair.connect()
    body = _bodies(seed, [1 << 20])[0]
    pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 1, timeout=300)
    pair.until(lambda: False, timeout=2.0)
    assert pair.main.received() == [body]


@pytest.mark.parametrize("seed", range(5))
def test_alive_keeps_presence_and_detects_silence(seed: int) -> None:
    pair = road_pair(NETWORKS["loss10"], seed=seed)
    assert pair.connect()
    start = pair.net.now
    # Idle for 20 s: alives flow both ways and nobody is declared dead.
    pair.until(lambda: False, timeout=20.0)
    assert pair.net.now >= start + 20.0
    assert pair.main.road.remote("minion").alive is True
    assert not [e for e in pair.minion.of(PresenceChanged) if not e.alive]
    assert pair.minion.road.stats["tx"] > 10  # alives were really sent
    # The minion vanishes: the main notices within period + alive time-out.
    pair.net.detach(("10.0.0.2", 4510))
    gone = pair.net.now
    assert pair.until(lambda: pair.main.road.remote("minion").alive is False, timeout=10.0)
    assert pair.net.now - gone <= 1.0 + 2.0 + 0.5


def test_message_to_a_vanished_remote_times_out_as_an_event() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.net.detach(("10.0.0.1", 4506))
    mid = pair.minion.road.send_message("main", {"x": 1}, pair.net.now)
    assert pair.until(
        lambda: any(
            e.kind == "message" and e.mid == mid for e in pair.minion.of(TransactionFailed)
        ),
        timeout=60,
    )
    assert not pair.main.of(MessageReceived)
