"""Bulk pieces shrink while express messages flow (``flow.QUIET_PIECE``) and grow again
after: one message then travels in pieces of two sizes, and must still arrive whole,
exactly once, and be confirmed once, under loss, duplication and reordering."""

from __future__ import annotations

import pytest

from raetsalt.engine.events import MessageDelivered
from raetsalt.engine.native.flow import QUIET_HOLD, QUIET_PIECE
from raetsalt.engine.native.frames import is_native
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import road_pair

BIG = {"native": True, "native_datagram_size": 60_000}  # loopback-sized datagrams


@pytest.mark.parametrize("seed", [1, 2])
def test_a_transfer_in_pieces_of_two_sizes_arrives_whole(seed: int) -> None:
    network = Conditions(loss=0.05, duplicate=0.03, jitter=0.002)
    pair = road_pair(network, seed=seed, main_config=BIG, minion_config=BIG)
    assert pair.connect()
    sizes: list[int] = []
    original = pair.minion.road.datagrams_to_send

    def tap(now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = original(now)
        sizes.extend(len(data) for data, _ in out if is_native(bytes(data[:2])))
        return out

    pair.minion.road.datagrams_to_send = tap  # type: ignore[method-assign]
    minion, net = pair.minion.road, pair.net
    blobs = [{"blob": bytes([n]) * 3_000_000} for n in range(2)]
    for blob in blobs:
        minion.send_message("main", blob, net.now)
    # Pings for a while (small pieces), then silence (whole datagrams again).
    pings = 0
    quiet_until = net.now + 0.05
    while net.now < quiet_until:
        minion.send_message("main", {"ping": pings}, net.now)
        pings += 1
        pair.until(lambda: False, timeout=0.002)
    assert pair.until(lambda: len(pair.main.received()) == pings + 2, timeout=QUIET_HOLD + 30)
    received = pair.main.received()
    assert [b for b in received if "blob" in b] == blobs  # type: ignore[operator]
    assert [b["ping"] for b in received if "ping" in b] == list(range(pings))  # type: ignore[index]
    assert pair.until(
        lambda: sum(e.count for e in pair.minion.of(MessageDelivered)) == pings + 2, timeout=30
    )
    assert len(pair.minion.of(MessageDelivered)) == pings + 2  # each confirmed once
    assert any(size <= QUIET_PIECE for size in sizes if size > 1000)
    assert any(size > QUIET_PIECE for size in sizes)
