"""Build a main and a minion road on a FakeNet and watch their events.

Each road is a ``Peer``: the road, what it reported, and its keep, which the peer keeps
up to date with the road's persistence events (what a driver's writer does), so tests
can look at ``pair.main_keep`` as an operator would look at the keep's files.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from raetsalt.engine import Road, RoadConfig
from raetsalt.engine.events import Allowed, Event, KeepEvent, MessageReceived
from raetsalt.engine.native.channel import Channel
from raetsalt.keep.policy import Action
from raetsalt.keep.records import AutoMode, Keep, KeyRef, KeyState
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions, FakeNet

E = TypeVar("E", bound=Event)

MAIN_HA = ("10.0.0.1", 4506)
MINION_HA = ("10.0.0.2", 4510)


@dataclass
class Peer:
    """A road, everything it has reported, and its keep (kept current)."""

    road: Road
    keep: Keep = field(default_factory=MemoryKeep)
    events: list[Event] = field(default_factory=list)

    def drain(self) -> list[Event]:
        """Take the road's new events; persistence goes to the keep, the rest is kept."""
        fresh: list[Event] = []
        writes = []
        while (event := self.road.next_event()) is not None:
            if isinstance(event, KeepEvent):
                writes.append(event.write())
            else:
                fresh.append(event)
        if writes:
            self.keep.commit(writes)
        self.events.extend(fresh)
        return fresh

    def of(self, kind: type[E]) -> list[E]:
        self.drain()
        return [e for e in self.events if isinstance(e, kind)]

    def received(self) -> list[object]:
        return [e.body for e in self.of(MessageReceived)]

    def decide(self, action: str, role: str, now: float, state: KeyState | None = None) -> bool:
        """An operator's ``action`` (accept / reject / delete) on the key of ``role`` as
        the road holds it now (or on its only denied pair, with ``state`` DENIED)."""
        if state is KeyState.DENIED:
            (verhex, pubhex), *_ = self.road.keys.denied[role]
        else:
            record = self.road.keys.roles[role]
            state, verhex, pubhex = KeyState.of(record.acceptance), record.verhex, record.pubhex
        done = self.road.change_key(action, KeyRef(role, state, verhex, pubhex), now)
        self.drain()
        return done


@dataclass
class Pair:
    net: FakeNet
    main: Peer
    minion: Peer

    @property
    def main_keep(self) -> Keep:
        self.main.drain()
        return self.main.keep

    @property
    def minion_keep(self) -> Keep:
        self.minion.drain()
        return self.minion.keep

    def until(self, done: Callable[[], bool], timeout: float = 60.0) -> bool:
        return self.net.run_until(done, timeout=timeout)

    def connect(self, timeout: float = 60.0) -> bool:
        self.minion.road.connect(MAIN_HA, self.net.now)
        return self.until(
            lambda: bool(self.main.of(Allowed)) and bool(self.minion.of(Allowed)), timeout
        )

    def channel(self, side: str) -> Channel:
        """The native channel of ``side`` ("main" or "minion") with the other one."""
        road, other = (self.main.road, "minion") if side == "main" else (self.minion.road, "main")
        channel = road.remote(other).channel
        assert isinstance(channel, Channel), "no native session"
        return channel

    def accept(self, role: str = "minion") -> bool:
        return self.main.decide(Action.ACCEPT, role, self.net.now)

    def restart_main(self, keep: Keep | None = None, **overrides: Any) -> None:
        """The main starts again from its keep (or ``keep``): what it had written."""
        self.main.drain()
        self.main = make_peer(
            keep or self.main.keep, MAIN_HA, "main", main=True, seed=self.net.seed + 100,
            **overrides,
        )
        self.net.attach(MAIN_HA, self.main.road)

    def restart_minion(self, **overrides: Any) -> None:
        self.minion.drain()
        self.minion = make_peer(
            self.minion.keep, MINION_HA, "minion", seed=self.net.seed + 200, **overrides
        )
        self.net.attach(MINION_HA, self.minion.road)


def make_road(
    keep: Keep,
    ha: tuple[str, int],
    name: str,
    *,
    main: bool = False,
    seed: int = 0,
    **config: Any,
) -> Road:
    """A road over what ``keep`` holds (auto-accept ``once`` unless ``auto`` is given)."""
    settings: dict[str, Any] = {"auto": AutoMode.ONCE}
    settings.update(config)
    return Road(
        state=keep.load_state(),
        ha=ha,
        name=name,
        main=main,
        config=RoadConfig(**settings),
        rng=random.Random(seed),
    )


def make_peer(keep: Keep, ha: tuple[str, int], name: str, **settings: Any) -> Peer:
    """``make_road`` (same arguments) wrapped in a ``Peer`` whose keep records what the
    road reports."""
    peer = Peer(make_road(keep, ha, name, **settings), keep)
    peer.drain()
    return peer


def road_pair(
    conditions: Conditions | None = None,
    *,
    seed: int = 0,
    main_config: dict[str, Any] | None = None,
    minion_config: dict[str, Any] | None = None,
) -> Pair:
    """A main at ``MAIN_HA`` and a minion at ``MINION_HA`` on one seeded FakeNet, not yet joined."""
    net = FakeNet(conditions or Conditions(), seed=seed)
    main = make_peer(MemoryKeep(), MAIN_HA, "main", main=True, seed=seed + 1, **(main_config or {}))
    minion = make_peer(MemoryKeep(), MINION_HA, "minion", seed=seed + 2, **(minion_config or {}))
    net.attach(MAIN_HA, main.road)
    net.attach(MINION_HA, minion.road)
    return Pair(net, main, minion)
