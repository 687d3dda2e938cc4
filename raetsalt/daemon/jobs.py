"""Thin wiring of the job services (``raetsalt.services``) onto a daemon's ``Node``.

``MasterService`` and ``MinionService`` take the node events the ``raetsalt node
service`` behaviour got from ``Node.service_ready``, keep those of the command protocol
(``raetsalt.services.protocol``), feed them to ``MasterJobs``/``MinionJobs`` and carry out
the actions: road sends, lane sends to client yards, bus events, job processes.  Both
are ``Wakeable`` (the skedder's waiter watches them): the master for its timers, the
minion for its job pipes.  The Salt bridge hooks in here too: the minion hands the jobs
Salt's loader runs to its zygote (``raetsalt.daemon.saltminion``), the master serves
minions' Salt requests and pillar (``raetsalt.daemon.saltmaster``).
"""

from __future__ import annotations

import logging
import os
import pwd
import selectors
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml

from raetsalt.daemon.access import REQUEST_SHARES, AccessGate
from raetsalt.daemon.cachewriter import QueuedDataCache, QueuedJobCache
from raetsalt.daemon.executor import ForkExecutor
from raetsalt.daemon.keys import SHARE_KEY, KeyService
from raetsalt.daemon.roster import RoadRoster
from raetsalt.daemon.saltmaster import MasterBridge
from raetsalt.engine.alive_native import announced_period, take_hint_untrusted
from raetsalt.engine.events import Allowed, MessageReceived
from raetsalt.errors import LocalError
from raetsalt.execution.grains import core_grains
from raetsalt.execution.loader import Context, Loader
from raetsalt.lane.page import MAX_PAGE_SIZE
from raetsalt.log import Throttle, clip
from raetsalt.manor import LocalMessage
from raetsalt.node import Node, NodeEvent
from raetsalt.services import protocol as p
from raetsalt.services.jids import new_jid
from raetsalt.services.master import (
    Fire,
    MasterJobs,
    Sink,
    ToMinion,
)
from raetsalt.services.minion import (
    JobOutcome,
    JobSpec,
    MinionJobs,
    Refresh,
    RefreshGrains,
    SaveGrains,
    Spawn,
    ToMaster,
    execute,
)
from raetsalt.services.peer import PeerRelay
from raetsalt.services.protocol import ToClient
from raetsalt.services.quota import MinionQuota, QuotaConfig

log = logging.getLogger("raetsalt.daemon")

CLIENT_ROOM = 8
"""Pages (lane) or page sizes (command socket) still queued for a client below which it
gets the returns that waited (``MasterJobs.answer_returns``)."""
RETURNS_RECHECK = 0.005
"""Seconds before the master looks again at a client that was behind."""

NOT_AUTHENTICATED = (
    "Minion failed to authenticate with the master, has the minion key been accepted?"
)


def flush_lane(node: Node) -> None:
    """Send what the manor queued (lane messages, bus events) now."""
    now = node.clock()
    node.uxd.send_all(node.manor.datagrams_to_send(now), node.manor, now)


def _remote_role(node: Node, remote_name: str) -> str:
    try:
        remote = node.stack.road.remote(remote_name)
    except LocalError:
        return remote_name
    return remote.role or remote.name


class _NoWake:
    """Wakeable parts for an object with timers only (no descriptors)."""

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        return None

    def unregister(self, selector: selectors.BaseSelector) -> None:
        return None


# ---------------------------------------------------------------------------- master


def unrestricted_users(opts: Mapping[str, Any]) -> set[str]:
    """Local users publisher_acl does not restrict: root, the user the master runs as
    and the configured ``user``."""
    users = {"root"}
    try:
        users.add(pwd.getpwuid(os.geteuid()).pw_name)
    except KeyError:
        users.add(str(os.geteuid()))
    if isinstance(opts.get("user"), str):
        users.add(opts["user"])
    return users


_PEER_SHARES = frozenset({p.SHARE_PEER_PUBLISH, p.SHARE_PEER_RUNNER})
_MINION_SHARES = frozenset({p.SHARE_HELLO, p.SHARE_SALT_REQ, p.SHARE_PILLAR_REFRESH,
                            p.SHARE_CLOCK_REQ})
_SERVED_SHARES = _MINION_SHARES | _PEER_SHARES | {p.SHARE_RETURN}
"""A minion's messages the per-minion message quota applies to."""


@dataclass(slots=True)
class MasterInbox:
    """A master's node events sorted by the step that serves them (``MasterService.sort``);
    each step empties its list."""

    requests: list[LocalMessage] = field(default_factory=list)
    """Clients' publish, runner and eauth token requests (lane)."""
    keys: list[LocalMessage] = field(default_factory=list)
    """``raetsalt-key`` commands (lane)."""
    peers: list[MessageReceived] = field(default_factory=list)
    """Minions' ``peer_publish``/``peer_runner`` (road)."""
    returns: list[MessageReceived] = field(default_factory=list)
    minions: list[MessageReceived] = field(default_factory=list)
    """Hello, clock requests, Salt file server and pillar requests (road)."""
    link: list[NodeEvent] = field(default_factory=list)
    """Everything else: the road's link events (joins, presence), other messages."""


class MasterService:
    """The master's job service on its node, with its access gate (who is asking:
    ``raetsalt.daemon.access``)."""

    def __init__(self, node: Node, opts: Mapping[str, Any],
                 utcnow: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.node = node
        self.roster = RoadRoster(node)
        self.quota = MinionQuota(QuotaConfig.from_opts(opts))
        """Per-minion limits on messages and returns (``raetsalt.services.quota``)."""
        self._quota_log = Throttle(60.0)
        self.jobs = MasterJobs(
            opts,
            QueuedJobCache(os.path.join(opts["cachedir"], "jobs"), process=True,
                           quota=self.quota, clock=node.clock),
            self.roster,
            estate=node.stack.road.name,
            data_cache=QueuedDataCache(os.path.join(opts["cachedir"], "minions")),
            utcnow=utcnow,
            unrestricted=unrestricted_users(opts),
        )
        self.sent_road = False
        self.announced = 0.0
        """The silence last asked of all connected minions (``_announce_alive``)."""
        self.gate = AccessGate(opts, opts["sock_dir"], node.manor.lane.yard_path,
                               self._send_answer, self._fire, estate=node.stack.road.name,
                               serving=self.jobs.serving)
        self.keys = KeyService(node, self.gate.lane_requester, self._send_answer)
        self.salt = MasterBridge(opts, node.stack.road.name, clock=node.clock)
        """Salt's file server and pillar for minions (``raetsalt.saltbridge``)."""
        self.jobs.pillars = self.salt.requests.pillars

    # Wakeable: the command socket, the eauth workers, the keep writer, the Salt workers.
    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self.gate.register(selector, data)
        self.keys.register(selector, data)
        self.salt.register(selector, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self.gate.unregister(selector)
        self.keys.unregister(selector)
        self.salt.unregister(selector)

    def timeout(self) -> float | None:
        timers = [t for t in (self.jobs.get_timer(), self.gate.get_timer()) if t is not None]
        waits = [w for w in (self.salt.timeout(),) if w is not None]
        if self.jobs.returns_waiting():
            waits.append(RETURNS_RECHECK)  # a client was behind: look again soon
        if timers:
            waits.append(max(0.0, min(timers) - self.node.clock()))
        return min(waits, default=None)

    # -- the flow's steps (``flows/master.flo``), in the order it runs them ---------------

    def sort(self, events: Iterable[NodeEvent], inbox: MasterInbox) -> None:
        """Routing: put each node event where the step that serves it looks; a minion's
        message over its quota is dropped here (counted, logged once a minute)."""
        now = self.node.clock()
        for event in events:
            if type(event) is MessageReceived:
                share = p.share_of(event.body) if isinstance(event.body, dict) else None
                if share in _SERVED_SHARES and not self._admit(event.remote, now):
                    continue
                if share == p.SHARE_RETURN:
                    inbox.returns.append(event)
                elif share in _PEER_SHARES:
                    inbox.peers.append(event)
                elif share in _MINION_SHARES:
                    inbox.minions.append(event)
                else:
                    inbox.link.append(event)
            elif type(event) is LocalMessage and event.share in REQUEST_SHARES:
                inbox.requests.append(event)
            elif type(event) is LocalMessage and event.share == SHARE_KEY:
                inbox.keys.append(event)
            else:
                inbox.link.append(event)

    def _admit(self, remote: str, now: float) -> bool:
        why = self.quota.admit_message(remote, now)
        if why is None:
            return True
        self.jobs.stats["minion_message_quota"] += 1
        times = self._quota_log.note(remote, now)
        if times:
            log.warning("messages of %s dropped: %s (%d since the last report)",
                        clip(_remote_role(self.node, remote)), why, times)
        return False

    def serve_keys(self, messages: list[LocalMessage]) -> None:
        """Operator key commands (``raetsalt-key``); they answer by themselves."""
        for event in messages:
            self.keys.on_request(event.source, event.body)
        messages.clear()
        self.keys.poll()

    def serve_requests(self, messages: list[LocalMessage], now: float) -> list[Any]:
        """Clients' publications and runners: who is asking (the access gate: local user,
        eauth), then the publisher_acl/eauth decision and the job publication."""
        actions: list[Any] = []
        for event in messages:
            for ready in self.gate.from_lane(event.source, event.share or "", event.body, now):
                actions.extend(self._dispatch(ready, now))
        messages.clear()
        for ready in self.gate.poll(now):
            actions.extend(self._dispatch(ready, now))
        return actions

    def check_peers(self, messages: list[MessageReceived], now: float) -> list[Any]:
        """Minions' ``publish.publish``/``publish.runner``: the ``peer``/``peer_run``
        decision.  What is refused is answered (returned); ``messages`` keeps the rest."""
        actions: list[Any] = []
        allowed = []
        for event in messages:
            refusal = self.jobs.check_peer(_remote_role(self.node, event.remote),
                                           p.share_of(event.body) or "", event.body, now)
            if refusal is None:
                allowed.append(event)
            else:
                actions.extend(refusal)
        messages[:] = allowed
        return actions

    def serve_peers(self, messages: list[MessageReceived], now: float) -> list[Any]:
        """Publish (or run) what ``check_peers`` let through, answering the minion."""
        actions: list[Any] = []
        for event in messages:
            minion = _remote_role(self.node, event.remote)
            if p.share_of(event.body) == p.SHARE_PEER_RUNNER:
                actions.extend(self.jobs.on_peer_runner(minion, event.body, now))
            else:
                actions.extend(self.jobs.on_peer_publish(minion, event.body, now))
        messages.clear()
        return actions

    def serve_returns(self, messages: list[MessageReceived], now: float) -> list[Any]:
        """Job returns: into the job cache, to the waiting client, on the bus."""
        actions: list[Any] = []
        for event in messages:
            actions.extend(self.jobs.on_return(_remote_role(self.node, event.remote),
                                               event.body))
        messages.clear()
        return actions

    def serve_minions(self, messages: list[MessageReceived], now: float) -> list[Any]:
        """A minion's hello (its grains), clock request, Salt file/pillar requests."""
        actions: list[Any] = []
        for event in messages:
            minion = _remote_role(self.node, event.remote)
            share = p.share_of(event.body)
            grains = self.jobs.grains.get(minion)
            if share == p.SHARE_HELLO:
                actions.extend(self.jobs.on_hello(minion, event.body))
                actions.extend(self.salt.on_hello(minion, self.jobs.grains.get(minion)))
            elif share == p.SHARE_SALT_REQ:
                actions.extend(self.salt.on_request(minion, event.body, grains))
            elif share == p.SHARE_PILLAR_REFRESH:
                actions.extend(self.salt.on_pillar_refresh(minion, grains))
            elif share == p.SHARE_CLOCK_REQ:
                road = self.node.stack.road
                alive = announced_period(road.config, len(road.remotes))
                actions.extend(self.jobs.on_clock_req(minion, alive))
        messages.clear()
        return actions

    def poll(self, now: float) -> list[Any]:
        """Time and the workers: job time-outs and gatherings, Salt's worker answers."""
        actions: list[Any] = list(self.salt.poll(self.jobs.grains))
        timer = self.jobs.get_timer()
        if timer is not None and timer <= now:
            actions.extend(self.jobs.handle_timer(now))
        actions.extend(self._announce_alive())
        actions.extend(self.jobs.answer_returns(self._keeping_up))
        if isinstance(self.jobs.cache, QueuedJobCache):
            self.jobs.cache.writer.commit_now()  # this pass's returns, to the writer process
        return actions

    def _keeping_up(self, sink: Sink) -> bool:
        """The client of ``sink`` has read (nearly) all we sent it: more may go.  A peer
        minion's answers go over the road, which has its own flow control."""
        if sink.yard is None:
            return True
        if self.gate.owns(sink.yard):
            assert self.gate.server is not None
            return self.gate.server.backlog(sink.yard) < CLIENT_ROOM * MAX_PAGE_SIZE
        return self.node.manor.lane.backlog(sink.yard) < CLIENT_ROOM

    def _announce_alive(self) -> list[Any]:
        """When the silence we ask of minions grew by a quarter (more minions), tell the
        connected ones at once: those that connected early would otherwise keep the
        shorter period until they reconnect (``raetsalt.engine.alive_native``)."""
        road = self.node.stack.road
        alive = announced_period(road.config, len(road.remotes))
        if alive <= self.announced * 1.25:
            return []
        self.announced = alive
        actions: list[Any] = []
        for remote in list(road.remotes.values()):
            if remote.allowed and not remote.main:
                actions.extend(self.jobs.on_clock_req(remote.role or remote.name, alive))
        return actions

    def handle(self, events: Iterable[NodeEvent]) -> list[NodeEvent]:
        """Every step at once (for embedding without the flow): serve the command
        protocol's messages, carry out the actions; return the other events."""
        now = self.node.clock()
        inbox = MasterInbox()
        self.sort(events, inbox)
        self.serve_keys(inbox.keys)
        actions = self.serve_requests(inbox.requests, now)
        actions.extend(self.check_peers(inbox.peers, now))
        actions.extend(self.serve_peers(inbox.peers, now))
        actions.extend(self.serve_returns(inbox.returns, now))
        actions.extend(self.serve_minions(inbox.minions, now))
        actions.extend(self.poll(now))
        self.perform(actions)
        return inbox.link

    def perform(self, actions: Iterable[Any]) -> None:
        node = self.node
        lane = False
        for action in actions:
            if type(action) is ToMinion:
                name = self.roster.remote_name(action.minion)
                if name is None:
                    continue
                try:
                    node.stack.send(name, action.body)
                    self.sent_road = True
                except LocalError as exc:
                    log.warning("job message for %s not sent: %s", action.minion, exc)
            elif type(action) is ToClient:
                lane |= self._to_client(action.yard, action.body)
            elif type(action) is Fire:
                lane = True
                node.manor.fire_event(action.tag, action.data)
        if lane:
            flush_lane(node)

    def close(self) -> None:
        self.gate.close()
        self.salt.close()
        if isinstance(self.jobs.cache, QueuedJobCache):
            self.jobs.cache.close()  # what is queued reaches the disk
        if isinstance(self.jobs.data_cache, QueuedDataCache):
            self.jobs.data_cache.close()

    def _dispatch(self, ready: Any, now: float) -> list[Any]:
        handler = self.jobs.on_publish if ready.share == p.SHARE_PUBLISH else self.jobs.on_runner
        return handler(ready.requester, ready.yard, ready.body, now)

    def _to_client(self, yard: str, body: dict[str, Any]) -> bool:
        """Send to a lane yard or a command-socket connection; True if the lane needs a
        flush."""
        if self.gate.owns(yard):
            assert self.gate.server is not None
            if not self.gate.server.send(yard, body):
                self.jobs.forget_client(yard)
            return False
        lane = self.node.manor.lane
        try:
            if not lane.send(body, yard):
                log.debug("client %s: its queue is full, a reply is dropped", yard)
        except LocalError as exc:
            returns = body.get("returns")
            if lane.has_yard(yard) and isinstance(returns, list) and len(returns) > 1:
                # Too large for one message (big returns): half of them in each.
                half = len(returns) // 2
                self._to_client(yard, {**body, "returns": returns[:half]})
                return self._to_client(yard, {**body, "returns": returns[half:]})
            log.debug("client %s gone: %s", yard, exc)
            self.jobs.forget_client(yard)
        return True

    def _send_answer(self, yard: str, body: dict[str, Any]) -> None:
        if self._to_client(yard, body):
            flush_lane(self.node)

    def _fire(self, tag: str, data: dict[str, Any]) -> None:
        self.node.manor.fire_event(tag, data)
        flush_lane(self.node)


# ---------------------------------------------------------------------------- minion


def static_grains_path(opts: Mapping[str, Any]) -> str:
    """Where ``grains.setval`` keeps grains: ``<conf_dir>/grains`` as in Salt (or
    ``<cachedir>/grains`` when there is no config directory)."""
    return os.path.join(opts.get("conf_dir") or opts["cachedir"], "grains")


def load_grains(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Core grains, overlaid with the saved static grains, then the config's ``grains``
    (which win, as in Salt)."""
    grains = core_grains(str(opts.get("id", "")), master=opts.get("master"))
    try:
        with open(static_grains_path(opts), encoding="utf-8") as handle:
            saved = yaml.safe_load(handle)
        if isinstance(saved, dict):
            grains.update(saved)
    except (OSError, yaml.YAMLError):
        pass
    grains.update(opts.get("grains") or {})
    return grains


def save_static_grains(opts: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    path = static_grains_path(opts)
    saved: dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
        if isinstance(loaded, dict):
            saved = loaded
    except (OSError, yaml.YAMLError):
        pass
    saved.update(values)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        yaml.safe_dump(saved, handle, default_flow_style=False)
    os.replace(tmp, path)


_FROM_MASTER = frozenset({p.SHARE_FUN, p.SHARE_CLOCK, p.SHARE_PILLAR, *p.LANE_ANSWERS})


@dataclass(slots=True)
class MinionInbox:
    """A minion's node events sorted by the step that serves them (``MinionService.sort``);
    each step empties its list but ``link`` (the flow's link step reads it last)."""

    master: list[MessageReceived] = field(default_factory=list)
    """The master's publications, clock, pillar and answers (road)."""
    requests: list[LocalMessage] = field(default_factory=list)
    """``raetsalt-call`` and job processes' ``publish.*`` requests (lane)."""
    link: list[NodeEvent] = field(default_factory=list)
    """The road's link events (join, allow, presence) and anything unhandled."""


class MinionService:
    """The minion's job service on its node.

    :param connected: tells whether the session with the master is up (``raetsalt-call``
        refuses to run without it, as Salt's salt-call does).
    """

    def __init__(
        self,
        node: Node,
        opts: Mapping[str, Any],
        connected: Callable[[], bool],
        *,
        loader: Loader | None = None,
        grains: dict[str, Any] | None = None,
        utcnow: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        from raetsalt.daemon.saltminion import minion_bridge

        self.node = node
        self.opts = opts
        self.connected = connected
        self.utcnow = utcnow
        self.executor = ForkExecutor(self._run_in_child)
        self.bridge = minion_bridge(opts, self.executor)
        """Salt's loader (``raetsalt.saltbridge``), or None: native functions only."""
        native_dirs = (opts.get("module_dirs") or ()) if self.bridge is None else ()
        self.loader = loader if loader is not None else Loader(native_dirs)
        self.jobs = MinionJobs(str(opts["id"]), grains if grains is not None
                               else load_grains(opts), estate=node.stack.road.name)
        self.relay = PeerRelay(node.stack.road.name)
        self.sent_road = False
        self._last_jid: str | None = None
        self._child_jobs: list[dict[str, Any]] = []
        """The other jobs at the last spawn (what the new job's saltutil.running sees)."""

    # Wakeable: the job pipes (and the Salt zygote's socket).
    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self.executor.register(selector, data)
        if self.bridge is not None:
            self.bridge.register(selector, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self.executor.unregister(selector)
        if self.bridge is not None:
            self.bridge.unregister(selector)

    def timeout(self) -> float | None:
        waits = [w for w in (self.executor.timeout(),
                             self.bridge.timeout() if self.bridge else None,
                             self._timer_wait()) if w is not None]
        return min(waits, default=None)

    def _timer_wait(self) -> float | None:
        timer = self.jobs.get_timer()
        return None if timer is None else max(0.0, timer - self.node.clock())

    # -- the flow's steps (``flows/minion.flo``), in the order it runs them ---------------

    def sort(self, events: Iterable[NodeEvent], inbox: MinionInbox) -> None:
        """Routing: the master's job messages, local requests, and the rest (link)."""
        master = self._master_name()
        for event in events:
            if type(event) is MessageReceived:
                share = p.share_of(event.body) if isinstance(event.body, dict) else None
                if event.remote == master and share in _FROM_MASTER:
                    inbox.master.append(event)
                else:
                    inbox.link.append(event)
            elif type(event) is LocalMessage and (event.share == p.SHARE_CALL
                                                  or self.relay.serves(event.share)):
                inbox.requests.append(event)
            else:
                inbox.link.append(event)

    def serve_master(self, messages: list[MessageReceived], now: float) -> list[Any]:
        """From the master: publications (run here when meant for this minion and still
        in time), its clock, the pillar, answers to relayed ``publish.*`` requests."""
        actions: list[Any] = []
        now_wall = self.utcnow().timestamp()
        for event in messages:
            share = p.share_of(event.body)
            if share == p.SHARE_FUN:
                actions.extend(self.jobs.on_publish(event.body, now, now_wall))
            elif share == p.SHARE_CLOCK:
                road = self.node.stack.road
                remote = road.remotes_by_name.get(event.remote)
                if remote is not None:
                    take_hint_untrusted(remote, event.body.get("alive"))
                actions.extend(self.jobs.on_clock(event.body, now, now_wall))
            elif share == p.SHARE_PILLAR:
                pillar = event.body.get("pillar")
                self.jobs.pillar = pillar if isinstance(pillar, dict) else {}
            else:
                assert share is not None
                actions.extend(self.relay.on_answer(share, event.body))
        messages.clear()
        return actions

    def serve_requests(self, messages: list[LocalMessage], now: float) -> list[Any]:
        """Local requests: ``raetsalt-call``, and ``publish.*`` from job processes, which
        go to the master (whose ``peer``/``peer_run`` rules decide)."""
        actions: list[Any] = []
        for event in messages:
            if event.share == p.SHARE_CALL:
                actions.extend(self._on_call(event))
            else:
                assert event.share is not None
                actions.extend(self.relay.on_request(event.source, event.share, event.body,
                                                     now, self.connected()))
        messages.clear()
        return actions

    def serve_link(self, events: list[NodeEvent]) -> list[Any]:
        """A (re)connection to the master: ask for its clock, say hello with the grains."""
        master = self._master_name()
        actions: list[Any] = []
        for event in events:
            if type(event) is Allowed and event.remote == master:
                actions.extend(self.jobs.ask_clock(self.utcnow().timestamp()))
                actions.extend(self._connected())
        return actions

    def poll(self, now: float) -> list[Any]:
        """Time and the job processes: finished jobs become returns, held publications
        their deadline, the Salt zygote's answers."""
        actions: list[Any] = []
        if self.bridge is not None:
            actions.extend(self.bridge.poll(self.jobs))
        timer = self.jobs.get_timer()
        if timer is not None and timer <= now:
            actions.extend(self.jobs.handle_timer(now, self.utcnow().timestamp()))
        for jid, data in self.executor.poll():
            outcome = None
            if data is not None:
                try:
                    outcome = JobOutcome.from_wire_untrusted(data)
                except Exception:  # noqa: BLE001 - a child's garbage is a failed job
                    outcome = None
            actions.extend(self.jobs.on_finished(jid, outcome))
        return actions

    def handle(self, events: Iterable[NodeEvent]) -> list[NodeEvent]:
        """Every step at once (for embedding without the flow); returns the link events."""
        now = self.node.clock()
        inbox = MinionInbox()
        self.sort(events, inbox)
        actions = self.serve_master(inbox.master, now)
        actions.extend(self.serve_requests(inbox.requests, now))
        actions.extend(self.serve_link(inbox.link))
        actions.extend(self.poll(now))
        self.perform(actions)
        return inbox.link

    def perform(self, actions: list[Any]) -> None:
        lane = False
        while actions:
            action = actions.pop(0)
            if type(action) is Spawn:
                actions.extend(self._spawn(action.spec))
            elif type(action) is ToMaster:
                self._to_master(action.body)
            elif type(action) is ToClient:
                lane = True
                try:
                    self.node.manor.lane.send(action.body, action.yard)
                except LocalError as exc:
                    log.debug("client %s gone: %s", action.yard, exc)
                    self.relay.forget_client(action.yard)
            elif type(action) is SaveGrains:
                try:
                    save_static_grains(self.opts, action.grains)
                except OSError as exc:
                    log.error("grains not saved to %s: %s", static_grains_path(self.opts), exc)
            elif type(action) is RefreshGrains and self.bridge is not None and self.bridge.active:
                self.bridge.reload()  # the zygote reports Salt's grains again
            elif type(action) is RefreshGrains:
                actions.extend(self.jobs.set_grains(load_grains(self.opts)))
            elif type(action) is Refresh and action.what == "pillar":
                self._to_master(p.road_message(self.jobs.estate, None, p.SHARE_PILLAR_REFRESH))
            elif type(action) is Refresh and self.bridge is not None:
                self.bridge.reload()
        if lane:
            flush_lane(self.node)

    def close(self) -> None:
        self.executor.close()
        if self.bridge is not None:
            self.bridge.close()

    # -- internals ------------------------------------------------------------------------

    def _connected(self) -> list[Any]:
        if self.bridge is not None and self.bridge.holds_hello():
            self.bridge.hello_due = True  # the hello carries Salt's grains once loaded
            return []
        return list(self.jobs.on_connected())

    def _master_name(self) -> str | None:
        uid = self.node.master
        if uid is None:
            return None
        try:
            return self.node.stack.road.remote(uid).name
        except LocalError:
            return None

    def _to_master(self, body: dict[str, Any]) -> None:
        if self.node.master is None:
            return
        try:
            self.node.stack.send(self.node.master, body)
            self.sent_road = True
        except LocalError as exc:
            log.warning("message for the master not sent: %s", exc)

    def _on_call(self, event: LocalMessage) -> list[Any]:
        req = event.body.get("req")
        if not isinstance(req, str):
            return []
        if not self.connected():
            return [ToClient(event.source, p.lane_reply(
                self.jobs.estate, event.source, p.SHARE_CALL_RET, req=req,
                error=NOT_AUTHENTICATED, code=2))]
        jid = new_jid(self.utcnow(), self._last_jid)
        self._last_jid = jid
        return list(self.jobs.on_call(event.source, event.body, jid))

    def _spawn(self, spec: JobSpec) -> list[Any]:
        if self.bridge is not None and self.bridge.wants(spec.fun, self.loader.functions):
            problem = self.bridge.submit(spec, self.jobs.grains, self.jobs.pillar)
            return [] if problem is None else list(self.jobs.on_spawn_failed(spec.jid, problem))
        self._child_jobs = [j for j in self.jobs.proc_list() if j["jid"] != spec.jid]
        try:
            pid = self.executor.spawn(spec.jid, spec)
        except OSError as exc:
            log.error("job %s not started: %s", spec.jid, exc)
            return list(self.jobs.on_spawn_failed(spec.jid, str(exc)))
        self.jobs.on_started(spec.jid, pid)
        return []

    def _run_in_child(self, spec: JobSpec) -> dict[str, Any]:
        """The job process: runs ``spec`` with a Context of this minion."""
        from raetsalt.cli.client import CommandClient
        from raetsalt.event import SaltEvent

        others = list(self._child_jobs)
        opts = dict(self.opts)

        def fire(tag: str, data: Any, master: bool) -> bool:
            bus = SaltEvent("minion", sock_dir=opts["sock_dir"], opts={"id": opts["id"]})
            try:
                payload = data if isinstance(data, dict) else {"data": data}
                if master:
                    return bus.fire_master(payload, tag)
                return bus.fire_event(payload, tag)
            finally:
                bus.destroy()

        def kill_job(jid: str) -> bool:
            for job in others:
                if job["jid"] == jid and job.get("pid"):
                    try:
                        os.kill(int(job["pid"]), 9)
                    except OSError:
                        return False
                    return True
            return False

        ctx = Context(
            opts=opts,
            grains=dict(self.jobs.grains),
            jid=spec.jid,
            loader=self.loader,
            fire_event=lambda tag, data: fire(tag, data, False),
            fire_master=lambda tag, data: fire(tag, data, True),
            jobs=lambda: [dict(j) for j in others],
            kill_job=kill_job,
            master_client=lambda: CommandClient("minion", opts["sock_dir"], str(opts["id"])),
        )
        return execute(self.loader, spec, ctx, os.getpid()).to_wire()
