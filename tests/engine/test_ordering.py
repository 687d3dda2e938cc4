"""The ordering each profile promises, under seeded loss, duplication and reordering.

* raet profile: every message to a remote in the order sent (one transaction at a time).
* native profile: per stream.  Messages up to ``native_express_size`` travel on the express
  stream, larger ones on the bulk stream; each stream arrives in the order sent, exactly
  once, whatever the network does, and an express message is never held back by a bulk
  transfer sent before it.  ``send_messages`` batches keep their order too and are
  confirmed by one ``MessageDelivered`` whose ``count`` covers the batch.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from raetsalt.engine import RoadConfig
from raetsalt.engine.events import MessageDelivered, TransactionFailed
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import MAIN_HA, Pair, road_pair

EXPRESS = RoadConfig().native_express_size
NETWORKS = {
    "loss10": Conditions(loss=0.10, duplicate=0.05, jitter=0.004),
    "loss30": Conditions(loss=0.30, duplicate=0.10, jitter=0.004),
}


def _pair(network: str, seed: int, native: bool) -> Pair:
    settings = {"native": native}
    pair = road_pair(NETWORKS[network], seed=seed, main_config=settings, minion_config=settings)
    assert pair.connect()
    return pair


def _mix(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Messages of random sizes, mostly small, some beyond the express size."""
    out = []
    for n in range(count):
        size = rng.choice([10, 200, 3000, 9000]) if rng.random() < 0.8 else rng.randint(
            EXPRESS + 1, 4 * EXPRESS
        )
        out.append({"n": n, "pad": "p" * size})
    return out


def _express(body: dict[str, Any]) -> bool:
    return len(msgpack.packb(body)) <= EXPRESS


def _delivered(pair: Pair) -> list[int]:
    mids = []
    for event in pair.minion.of(MessageDelivered):
        mids.extend(range(event.mid, event.mid + event.count))
    return mids


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("seed", range(6))
def test_native_streams_arrive_in_order_exactly_once(network: str, seed: int) -> None:
    rng = random.Random(seed)
    pair = _pair(network, seed, native=True)
    sent = _mix(rng, 40)
    mids = []
    position = 0
    while position < len(sent):  # single messages and batches, interleaved
        take = rng.randint(1, 6)
        chunk = sent[position : position + take]
        if rng.random() < 0.5:
            mids.extend(pair.minion.road.send_messages("main", chunk, pair.net.now))
        else:
            mids.extend(pair.minion.road.send_message("main", b, pair.net.now) for b in chunk)
        position += take
    assert pair.until(lambda: len(pair.main.received()) == len(sent), timeout=120)
    pair.until(lambda: False, timeout=3.0)  # late duplicates and retransmissions settle
    got = pair.main.received()
    assert sorted(b["n"] for b in got) == list(range(len(sent)))  # each exactly once
    assert [b for b in got if _express(b)] == [b for b in sent if _express(b)]
    assert [b for b in got if not _express(b)] == [b for b in sent if not _express(b)]
    assert sorted(_delivered(pair)) == sorted(mids)  # each confirmed exactly once
    assert not pair.minion.of(TransactionFailed)


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("seed", range(4))
def test_raet_profile_keeps_every_message_in_send_order(network: str, seed: int) -> None:
    rng = random.Random(seed)
    pair = _pair(network, seed, native=False)
    sent = _mix(rng, 12)
    pair.minion.road.send_messages("main", sent[:6], pair.net.now)
    for body in sent[6:]:
        pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == len(sent), timeout=300)
    pair.until(lambda: False, timeout=3.0)
    assert pair.main.received() == sent
    assert _delivered(pair) == list(range(1, len(sent) + 1))


@pytest.mark.parametrize("seed", range(3))
def test_express_message_overtakes_a_bulk_transfer_sent_before_it(seed: int) -> None:
    pair = _pair("loss10", seed, native=True)
    bulk = {"bulk": "b" * (1024 * 1024)}
    pair.minion.road.send_message("main", bulk, pair.net.now)
    pair.minion.road.send_message("main", {"ping": 1}, pair.net.now)
    assert pair.until(lambda: bool(pair.main.received()), timeout=60)
    assert pair.main.received()[0] == {"ping": 1}
    assert pair.until(lambda: len(pair.main.received()) == 2, timeout=300)
    assert pair.main.received()[1] == bulk


def test_batch_is_confirmed_by_one_event() -> None:
    pair = _pair("loss10", 1, native=True)
    bodies = [{"n": n} for n in range(500)]
    mids = pair.minion.road.send_messages("main", bodies, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 500, timeout=60)
    pair.until(lambda: bool(pair.minion.of(MessageDelivered)), timeout=10)
    [event] = pair.minion.of(MessageDelivered)
    assert (event.mid, event.count) == (mids.start, 500)
    assert pair.main.received() == bodies


def test_an_expired_message_fails_and_later_ones_of_its_stream_still_arrive() -> None:
    pair = road_pair(
        seed=2,
        main_config={"native": True, "reassembly_timeout": 2.0},
        minion_config={"native": True, "message_timeout": 1.0},
    )
    assert pair.connect()
    pair.net.detach(MAIN_HA)  # the main is unreachable: the first message expires
    lost = pair.minion.road.send_message("main", {"lost": True}, pair.net.now)
    pair.until(lambda: bool(pair.minion.of(TransactionFailed)), timeout=5)
    assert [e.mid for e in pair.minion.of(TransactionFailed)] == [lost]
    pair.net.attach(MAIN_HA, pair.main.road)
    later = [{"n": n} for n in range(3)]
    for body in later:
        pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 3, timeout=10)
    assert pair.main.received() == later  # after the main gave up on the gap
    assert lost not in _delivered(pair)


@pytest.mark.parametrize("seed", range(3))
def test_bulk_retransmissions_are_not_taken_for_express_traffic(seed: int) -> None:
    """Only express frames make the flow gate hold bulk to its quiet window; frames of a
    bulk transfer sent again (first on every eighth datagram) must not."""
    # A small window keeps bulk queued while losses are being repaired.
    settings = {"native": True, "native_window": 128 * 1024}
    pair = road_pair(NETWORKS["loss30"], seed=seed, main_config=settings, minion_config=settings)
    assert pair.connect()
    for n in range(2):
        pair.minion.road.send_message("main", {"bulk": str(n) * (512 * 1024)}, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 2, timeout=300)
    channel = pair.minion.road.remote("main").channel
    assert pair.minion.road.stats["native_retransmit"] > 8
    assert channel.flow.express_at < 0  # never set: no express frame was sent
