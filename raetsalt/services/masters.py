"""Which master a minion holds its session with, when it lists several (sans-IO).

A minion's ``master`` may be a list.  How it is used (``master_type``):

* ``str`` (Salt's default): every listed master is connected at once (hot
  multi-master); nothing is chosen, so this module is not involved.
* ``failover``: one session, with the first master of the list that answers; on loss
  the next one (cyclically), as Salt's failover moves the lost master to the end of the
  list.  ``random_master`` shuffles the list once at start (with ``master_failback``,
  only the masters after the first, as Salt does).
* a cluster (the minion's ``cluster_id`` set): one session, the list ordered by a
  rendezvous (highest random weight) hash of the minion's id with each master, so the
  minions of a fleet spread evenly over the masters, each minion always prefers the same
  one, and when a master is lost only its own minions move (each to its own next
  choice), spread over the survivors.

Loss is the road's own knowledge: the session's presence (alive probes) fails, or joins
keep failing; the driver reports a ``LinkState`` for the held master and for a failback
probe.  Nothing is polled while the held master answers.

``master_failback``: while not on the first master of the order, every
``failback_interval`` seconds the first one is tried (a join and allow, without leaving
the current one); when it answers, the minion moves back and releases the other.  A
probe that does not connect within ``probe_window`` seconds is abandoned.

The state machine takes ``now`` and link states in and gives ``Action``s out: ``Hold``
(connect and keep a session: the master now held), ``Probe`` (connect without holding),
``Release`` (stop keeping the session and end it).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Action",
    "Hold",
    "LinkState",
    "MasterChoice",
    "Probe",
    "Release",
    "failover_order",
    "rendezvous_order",
]

LinkState = Literal["connecting", "connected", "pending", "rejected", "down"]
"""A master's session as the driver sees it: ``down`` is a session lost (presence
failed) or joins that keep failing; ``pending``/``rejected`` are key decisions (the
minion stays: they hold on every master of a cluster alike)."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Connect to ``master`` and make it the master this minion serves."""

    master: str
    previous: str | None
    why: str


@dataclass(frozen=True, slots=True)
class Probe:
    """Connect to ``master`` to see whether it answers, keeping the held one."""

    master: str


@dataclass(frozen=True, slots=True)
class Release:
    """Stop keeping a session with ``master`` and end the one there is."""

    master: str


Action = Hold | Probe | Release


def rendezvous_order(minion_id: str, masters: Sequence[str]) -> list[str]:
    """``masters`` by decreasing rendezvous weight for ``minion_id`` (ties, only for
    equal names, keep the list's order).  The weight is SHA-256 of the id and the
    master's name: stable across processes, releases and machines."""

    def weight(master: str) -> bytes:
        return hashlib.sha256(f"{minion_id}\0{master}".encode()).digest()

    return sorted(masters, key=weight, reverse=True)


def failover_order(masters: Sequence[str], *, random_master: bool, failback: bool,
                   rng: random.Random) -> list[str]:
    """Salt's failover order: as listed, shuffled with ``random_master`` (the first
    kept first with ``failback``: it is the one to come back to)."""
    order = list(masters)
    if random_master:
        if failback:
            rest = order[1:]
            rng.shuffle(rest)
            order[1:] = rest
        else:
            rng.shuffle(order)
    return order


class MasterChoice:
    """One session among an ordered list of masters (see the module's text).

    :param order: the masters, most preferred first (``failover_order`` or
        ``rendezvous_order``); duplicates are dropped.
    :param connect_timeout: seconds a master may stay ``connecting`` before the next is
        tried (a master that never answers; a refused join ends sooner: ``down``).
    """

    def __init__(
        self,
        order: Sequence[str],
        *,
        failback: bool = False,
        failback_interval: float = 60.0,
        probe_window: float = 10.0,
        connect_timeout: float = 30.0,
    ) -> None:
        unique = list(dict.fromkeys(order))
        if not unique:
            raise ValueError("no master to choose from")
        self.order = unique
        self.failback = failback and len(unique) > 1
        self.failback_interval = max(1.0, failback_interval)
        self.probe_window = max(1.0, probe_window)
        self.connect_timeout = max(1.0, connect_timeout)
        self.index = 0
        self.since = 0.0
        """When the held master was chosen."""
        self.probing_since: float | None = None
        self.next_probe: float | None = None
        self.moves = 0
        """Moves to another master (losses and failbacks)."""
        self._started = False
        self._up = False
        """The held master was connected at the last step."""

    @property
    def held(self) -> str:
        return self.order[self.index]

    @property
    def probing(self) -> str | None:
        return self.order[0] if self.probing_since is not None else None

    def start(self, now: float) -> list[Action]:
        """The first master of the order is held."""
        if self._started:
            return []
        self._started = True
        self.since = now
        return [Hold(self.held, None, "start")]

    def deadline(self) -> float | None:
        """When ``step`` has something to decide even if no state changes."""
        times = [] if self._up else [self.since + self.connect_timeout]
        if self.probing_since is not None:
            times.append(self.probing_since + self.probe_window)
        elif self.next_probe is not None:
            times.append(self.next_probe)
        return min(times, default=None)

    def step(self, now: float, held: LinkState, probe: LinkState | None = None) -> list[Action]:
        """Decide on the held master's state (and the failback probe's, when probing)."""
        if not self._started:
            return self.start(now)
        actions: list[Action] = []
        self._up = held == "connected"
        if self.probing_since is not None:
            actions.extend(self._probe_step(now, probe))
            if actions:
                return actions
        match held:
            case "connected":
                self.since = now  # healthy: a later loss counts from the loss
                if self.failback and self.index != 0 and self.probing_since is None:
                    if self.next_probe is None:
                        self.next_probe = now + self.failback_interval
                    elif now >= self.next_probe:
                        self.probing_since = now
                        actions.append(Probe(self.order[0]))
            case "down":
                actions.extend(self._move(now, "lost"))
            case "connecting":
                if now - self.since >= self.connect_timeout:
                    actions.extend(self._move(now, "no answer"))
            case "pending" | "rejected":
                self.since = now  # a key decision, not a failure: stay
        return actions

    def _move(self, now: float, why: str) -> list[Action]:
        if len(self.order) == 1:
            self.since = now  # nowhere else: the road keeps trying this one
            return []
        previous = self.held
        actions: list[Action] = []
        if self.probing_since is not None:
            self.probing_since = None
            if self.index != 0:
                actions.append(Release(self.order[0]))
        self.index = (self.index + 1) % len(self.order)
        self.since = now
        self._up = False
        self.moves += 1
        self.next_probe = now + self.failback_interval if self.failback else None
        actions.append(Release(previous))
        actions.append(Hold(self.held, previous, why))
        return actions

    def _probe_step(self, now: float, probe: LinkState | None) -> list[Action]:
        assert self.probing_since is not None
        if probe == "connected":
            previous = self.held
            self.probing_since = None
            self.next_probe = None
            self.index = 0
            self.since = now
            self._up = True
            self.moves += 1
            return [Release(previous), Hold(self.held, previous, "failback")]
        if probe == "down" or now - self.probing_since >= self.probe_window:
            self.probing_since = None
            self.next_probe = now + self.failback_interval
            return [Release(self.order[0])]
        return []
