"""Build a main and a minion road on a FakeNet and watch their events."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from raetsalt.engine import Road, RoadConfig
from raetsalt.engine.events import Allowed, Event, MessageReceived
from raetsalt.keep.records import AutoMode, Keep
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions, FakeNet

E = TypeVar("E", bound=Event)

MAIN_HA = ("10.0.0.1", 4506)
MINION_HA = ("10.0.0.2", 4510)


@dataclass
class Node:
    """A road plus everything it has reported."""

    road: Road
    events: list[Event] = field(default_factory=list)

    def drain(self) -> list[Event]:
        fresh = []
        while (event := self.road.next_event()) is not None:
            fresh.append(event)
        self.events.extend(fresh)
        return fresh

    def of(self, kind: type[E]) -> list[E]:
        self.drain()
        return [e for e in self.events if isinstance(e, kind)]

    def received(self) -> list[object]:
        return [e.body for e in self.of(MessageReceived)]


@dataclass
class Pair:
    net: FakeNet
    main: Node
    minion: Node
    main_keep: Keep
    minion_keep: Keep

    def until(self, done: Callable[[], bool], timeout: float = 60.0) -> bool:
        return self.net.run_until(done, timeout=timeout)

    def connect(self, timeout: float = 60.0) -> bool:
        self.minion.road.connect(MAIN_HA, self.net.now)
        return self.until(
            lambda: bool(self.main.of(Allowed)) and bool(self.minion.of(Allowed)), timeout
        )

    def restart_main(self, **overrides: Any) -> None:
        self.main = Node(
            make_road(
                self.main_keep, MAIN_HA, "main", main=True, seed=self.net.seed + 100, **overrides
            )
        )
        self.net.attach(MAIN_HA, self.main.road)

    def restart_minion(self, **overrides: Any) -> None:
        self.minion = Node(
            make_road(self.minion_keep, MINION_HA, "minion", seed=self.net.seed + 200, **overrides)
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
    settings: dict[str, Any] = {"auto": AutoMode.ONCE}
    settings.update(config)
    return Road(
        keep=keep,
        ha=ha,
        name=name,
        main=main,
        config=RoadConfig(**settings),
        rng=random.Random(seed),
    )


def road_pair(
    conditions: Conditions | None = None,
    *,
    seed: int = 0,
    main_config: dict[str, Any] | None = None,
    minion_config: dict[str, Any] | None = None,
) -> Pair:
    """A main at ``MAIN_HA`` and a minion at ``MINION_HA`` on one seeded FakeNet, not yet joined."""
    net = FakeNet(conditions or Conditions(), seed=seed)
    main_keep, minion_keep = MemoryKeep(), MemoryKeep()
    main = Node(
        make_road(main_keep, MAIN_HA, "main", main=True, seed=seed + 1, **(main_config or {}))
    )
    minion = Node(
        make_road(minion_keep, MINION_HA, "minion", seed=seed + 2, **(minion_config or {}))
    )
    net.attach(MAIN_HA, main.road)
    net.attach(MINION_HA, minion.road)
    return Pair(net, main, minion, main_keep, minion_keep)
