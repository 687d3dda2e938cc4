"""What the job services need from outside, as small interfaces (sans-IO).

``MasterJobs`` (``raetsalt.services.master``) and the runners
(``raetsalt.services.runners``) see the road only through a ``Roster``, the job cache only
as a ``JobStore`` and the minion data cache only as a ``GrainsStore``; the daemon gives
them the adapters (``raetsalt.daemon.roster``, ``raetsalt.daemon.jobcache``,
``raetsalt.daemon.datacache``), tests give them memory.  A runner sees the master through
``RunnerContext``, so ``runners`` does not import ``master`` (and ``master`` imports
``runners`` one way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from raetsalt.targeting import MinionFacts


@dataclass(frozen=True, slots=True)
class MinionState:
    """A minion's road state: ``known`` (a remote exists, so a message can be queued for
    it), ``joined``, ``allowed`` (a session is up), ``alive`` (answering probes) and its
    last address."""

    known: bool = False
    joined: bool = False
    allowed: bool = False
    alive: bool = False
    ip: str | None = None

    @property
    def up(self) -> bool:
        """Connected and answering now: what ``manage.up`` reports."""
        return self.allowed and self.alive


class Roster(Protocol):
    """What the job service needs to know about the minions on the road."""

    def accepted(self) -> list[str]:
        """Ids of every minion with an accepted key."""
        ...

    def state(self, minion: str) -> MinionState:
        """The road's view of ``minion`` now."""
        ...


class JobStore(Protocol):
    """The job cache: publish records and returns (``raetsalt.daemon.jobcache.JobCache``).
    Writes raise ``OSError`` or ``KeepError``; the service answers with the error."""

    def save_load(self, jid: str, load: dict[str, Any]) -> None: ...

    def save_return(self, jid: str, minion: str, ret: dict[str, Any]) -> None: ...

    def get_load(self, jid: str) -> dict[str, Any] | None: ...

    def get_returns(self, jid: str) -> dict[str, dict[str, Any]]: ...

    def jids(self) -> list[str]: ...

    def clean(self, now: datetime, keep_hours: float) -> list[str]: ...


class GrainsStore(Protocol):
    """Where reported grains outlive a master restart
    (``raetsalt.daemon.datacache.MinionDataCache``)."""

    def load_all(self) -> dict[str, dict[str, Any]]: ...

    def save(self, minion: str, grains: Mapping[str, Any]) -> None: ...


@dataclass(slots=True)
class Gather:
    """What a runner returns when it must ask the minions first: publish ``fun`` (with
    ``arg``) to every minion that is up, collect the returns until all came or the
    time-out, then ``finish(returns)`` is the runner's result."""

    fun: str
    finish: Callable[[dict[str, Any]], Any]
    arg: list[Any] = field(default_factory=list)


class RunnerContext(Protocol):
    """The master as a runner sees it (``MasterJobs`` is one)."""

    opts: Mapping[str, Any]
    unrestricted: frozenset[str]

    @property
    def cache(self) -> JobStore: ...

    @property
    def roster(self) -> Roster: ...

    def minion_table(self) -> dict[str, MinionFacts]: ...

    def minion_states(self, minions: Iterable[str] | None = None) -> dict[str, MinionState]: ...

    def targeted(self, tgt: Any, tgt_type: str) -> list[str]: ...

    def mine_get(self, tgt: Any, fun: Any, tgt_type: str) -> dict[str, Any]: ...
