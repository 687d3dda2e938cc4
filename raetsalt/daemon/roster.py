"""The master's ``Roster`` (``raetsalt.services.ports``): which minions are accepted and
what the road knows about each, read from the engine's records in memory (never the
keep on disk)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from raetsalt.node import Node
from raetsalt.services.ports import MinionState


class RoadRoster:
    """``Roster`` over a master's road (its records in memory: no keep reads)."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def accepted(self) -> list[str]:
        return self.node.stack.road.keys.accepted()

    def remote_name(self, minion: str) -> str | None:
        road = self.node.stack.road
        remote = road.remotes_by_name.get(minion)
        if remote is not None and (remote.role or remote.name) == minion:
            return remote.name
        for remote in road.remotes.values():
            if remote.role == minion:
                return remote.name
        return None

    def state(self, minion: str) -> MinionState:
        name = self.remote_name(minion)
        if name is None:
            return MinionState()
        remote = self.node.stack.road.remote(name)
        return MinionState(True, bool(remote.joined), remote.allowed, remote.alive is True,
                           str(remote.ha[0]))


class ClusterRoster(RoadRoster):
    """``Roster`` of a master of a cluster: its own road's minions and those another
    master holds (``held_elsewhere``: the ids the masters' road reported), which count
    as connected: a job for them goes through the master holding them."""

    def __init__(self, node: Node) -> None:
        super().__init__(node)
        self.held_elsewhere: Callable[[], Mapping[str, object]] = dict

    def accepted(self) -> list[str]:
        local = super().accepted()
        elsewhere = self.held_elsewhere()
        if not elsewhere:
            return local
        return sorted(set(local).union(elsewhere))

    def state(self, minion: str) -> MinionState:
        state = super().state(minion)
        if not state.up and minion in self.held_elsewhere():
            return MinionState(True, True, True, True, None)
        return state
