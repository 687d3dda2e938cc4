"""A main and a crowd of minions on one FakeNet, all with sessions (manual clock)."""

from __future__ import annotations

from collections.abc import Callable

from raetsalt.engine.events import Allowed
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.pair import MAIN_HA, Pair, Peer, make_peer, road_pair

QUIET = {"presence_period": 30.0}
"""Minions that would not probe their main for 30 s."""


def fleet(count: int, *, subnet: str = "10.0.2",
          before: Callable[[Pair], None] | None = None) -> tuple[Pair, list[Peer]]:
    """The pair's minion and ``count`` more (at ``subnet``.N), connected to a main
    without a handshake rate; ``before`` gets the pair before anyone connects."""
    pair = road_pair(minion_config=QUIET, main_config={"handshake_rate": 0.0, **QUIET})
    if before is not None:
        before(pair)
    assert pair.connect()
    minions = []
    for index in range(count):
        ha = (f"{subnet}.{index}", 4510)
        peer = make_peer(MemoryKeep(), ha, f"minion{index}", seed=index, **QUIET)
        pair.net.attach(ha, peer.road)
        peer.road.connect(MAIN_HA, pair.net.now)
        minions.append(peer)
    assert pair.until(lambda: all(p.of(Allowed) for p in minions), timeout=60.0)
    return pair, [pair.minion, *minions]
