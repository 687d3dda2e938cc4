"""A minion's hold on one master among several: the driver of
``raetsalt.services.masters.MasterChoice`` on its road.

``MinionLink`` (``raetsalt.daemon.service``) owns one when the minion lists several
masters and holds one session (``master_type: failover``, or ``cluster_id`` set).  Each
pass of the minion flow's link step it reads each master's session from the road (the
presence the road keeps by itself: nothing is polled while the held master answers),
hands the states to the choice and carries out what it decides: a session kept with a
master (``RoadStack.connect``), one ended (``RoadStack.release``), the node's master
changed, one log line per move.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, assert_never

from raetsalt.config import parse_master_address
from raetsalt.drivers.udp import format_ha, resolve
from raetsalt.engine.events import Allowed, Joined, TransactionFailed
from raetsalt.errors import LocalError
from raetsalt.node import Node, NodeEvent
from raetsalt.services.masters import (
    Action,
    Hold,
    LinkState,
    MasterChoice,
    Probe,
    Release,
    failover_order,
    rendezvous_order,
)

log = logging.getLogger("raetsalt.daemon")

FAILED_JOINS = 2
"""Joins in a row that failed after which a master counts as down."""
DEFAULT_ALIVE_WAIT = 30.0
"""Seconds a master may be silent (or not yet answer) before the next is tried, when
``master_alive_interval`` is 0."""
DEFAULT_FAILBACK_INTERVAL = 60.0


def wants_switch(opts: Mapping[str, Any]) -> bool:
    """The minion holds one master among several (failover, or a cluster)."""
    masters = opts.get("__masters") or ()
    return len(masters) > 1 and (opts.get("master_type") == "failover"
                                 or bool(opts.get("cluster_id")))


def choice_from_opts(opts: Mapping[str, Any], rng: random.Random | None = None) -> MasterChoice:
    """The choice the opts describe (Salt's failover keys, or a cluster's rendezvous)."""
    masters = list(opts["__masters"])
    failback = bool(opts.get("master_failback"))
    alive = float(opts.get("master_alive_interval") or 0.0)
    if opts.get("cluster_id"):
        order = rendezvous_order(str(opts["id"]), masters)
    else:
        order = failover_order(masters, random_master=bool(opts.get("random_master")),
                               failback=failback, rng=rng or random.Random())
    interval = float(opts.get("master_failback_interval") or 0.0) or alive
    return MasterChoice(
        order,
        failback=failback,
        failback_interval=interval or DEFAULT_FAILBACK_INTERVAL,
        connect_timeout=alive or DEFAULT_ALIVE_WAIT,
        probe_window=max(5.0, 3 * float(opts.get("raet_alive_period") or 3.0)),
    )


class MasterSwitch:
    """Which master the node serves, kept on the road (see the module's text).

    :param on_hold: called with the uid and address of each master the node now serves.
    """

    def __init__(
        self,
        node: Node,
        opts: Mapping[str, Any],
        choice: MasterChoice,
        on_hold: Callable[[int, tuple[str, int]], None],
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.node = node
        self.opts = opts
        self.choice = choice
        self.on_hold = on_hold
        self.clock = clock or node.clock
        self.alive_wait = float(opts.get("master_alive_interval") or 0.0) or DEFAULT_ALIVE_WAIT
        self.uids: dict[str, int] = {}
        """master ("host:port" as listed) -> its remote's uid, once connected once."""
        self.failures: dict[int, int] = {}
        self.was_up: set[int] = set()
        self.last_up: dict[int, float] = {}
        self.pending = False
        self.rejected = False

    # -- what MinionLink calls ------------------------------------------------------------

    def start(self) -> None:
        self._perform(self.choice.start(self.clock()))

    def note(self, events: Iterable[NodeEvent]) -> None:
        """Count failed joins per master; a join or allow clears them."""
        by_name = self._names()
        for event in events:
            match event:
                case TransactionFailed(remote=name, kind="join", reason=reason) \
                        if name in by_name and reason != "busy":
                    # (a busy answer is a master alive but loaded: the road comes back
                    # at its hint; moving would only take the crowd to the next one)
                    uid = by_name[name]
                    self.failures[uid] = self.failures.get(uid, 0) + 1
                case Joined(remote=name) | Allowed(remote=name) if name in by_name:
                    self.failures[by_name[name]] = 0
                    if isinstance(event, Allowed) and event.adopted:
                        log.info("master %s: session started by an allow alone (a master "
                                 "of the cluster this minion joined before: no join)", name)
                case _:
                    pass

    def tick(self, *, pending: bool, rejected: bool) -> None:
        """Decide on the masters' sessions now (each pass of the link step)."""
        now = self.clock()
        held = self._state(self.choice.held, now, pending=pending, rejected=rejected)
        probing = self.choice.probing
        probe = (None if probing is None
                 else self._state(probing, now, pending=False, rejected=False))
        self._perform(self.choice.step(now, held, probe))

    def timeout(self) -> float | None:
        deadline = self.choice.deadline()
        return None if deadline is None else max(0.0, deadline - self.clock())

    # -- internals ------------------------------------------------------------------------

    def _names(self) -> dict[str, int]:
        names: dict[str, int] = {}
        for uid in self.uids.values():
            try:
                names[self.node.stack.road.remote(uid).name] = uid
            except LocalError:
                continue
        return names

    def _state(self, master: str, now: float, *, pending: bool, rejected: bool) -> LinkState:
        uid = self.uids.get(master)
        if uid is None:
            return "down"  # its address did not resolve
        try:
            remote = self.node.stack.road.remote(uid)
        except LocalError:
            return "down"
        if remote.allowed and remote.alive is not False:
            self.was_up.add(uid)
            self.last_up[uid] = now
            return "connected"
        if rejected:
            return "rejected"
        if pending:
            return "pending"
        if uid in self.was_up and remote.alive is False:
            return "down"  # the road's presence: the master stopped answering
        if self.failures.get(uid, 0) >= FAILED_JOINS:
            return "down"
        if uid in self.was_up and now - self.last_up.get(uid, now) >= self.alive_wait:
            return "down"
        return "connecting"

    def _connect(self, master: str) -> int | None:
        try:
            host, port = parse_master_address(master)
            _family, ha = resolve((host, port), self.node.stack.family)
        except (LocalError, ValueError) as exc:
            log.warning("master %s: %s", master, exc)
            return None
        uid = self.node.stack.connect(ha, like=self._cluster_model(ha))
        self.uids[master] = uid
        self.failures[uid] = 0
        self.was_up.discard(uid)
        self.last_up.pop(uid, None)
        return uid

    def _cluster_model(self, ha: tuple[str, int]) -> int | None:
        """In a cluster, a master we joined (all present the cluster's keys): the road
        may then start with the master at ``ha`` by an allow alone (``engine.adopt``)."""
        if not self.opts.get("cluster_id"):
            return None
        road = self.node.stack.road
        for uid in [self.node.master, *self.uids.values()]:
            remote = road.remotes.get(uid) if uid is not None else None
            if remote is not None and remote.joined and remote.fuid and remote.ha != ha:
                return uid
        return None

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            match action:
                case Hold(master=master, previous=previous, why=why):
                    if why == "failback" and master in self.uids:
                        uid: int | None = self.uids[master]  # the probe's session
                    else:
                        uid = self._connect(master)
                    if why == "failback":
                        log.warning("the first master %s is back: failing back from %s",
                                    master, previous)
                    elif previous is not None:
                        log.warning("master %s %s: moving to %s", previous, why, master)
                    if uid is not None:
                        self.node.master = uid
                        self.on_hold(uid, self.node.stack.road.remote(uid).ha)
                case Probe(master=master):
                    log.info("trying the first master %s again (master_failback)", master)
                    self._connect(master)
                case Release(master=master):
                    uid = self.uids.get(master)
                    if uid is not None and master != self.choice.held:
                        self.node.stack.release(uid)
                        log.debug("master %s released (%s)", master,
                                  format_ha(self.node.stack.road.remote(uid).ha))
                case _:
                    assert_never(action)
