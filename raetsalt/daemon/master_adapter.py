"""The master's job service (``raetsalt.services.master.MasterJobs``) on its node: the
daemon side of each step of ``flows/master.flo``.

The flow's route step hands ``MasterAdapter.sort`` the node events (road messages from
minions, lane messages from clients) and it sorts them into a ``MasterInbox``, by the
step that serves them; each serving step (``serve_keys``, ``serve_requests``,
``check_peers``, ``serve_peers``, ``serve_returns``, ``serve_minions``, ``poll``) gives
its part to the job service, the access gate (``raetsalt.daemon.access``), the key
commands (``raetsalt.daemon.keys``) or Salt's bridge (``raetsalt.daemon.saltmaster``)
and returns the actions they decided (``MasterAction``); the outbound step hands them
to ``perform``, which carries each out: a road message to a minion, a message to a
client yard (lane or command socket), an event on the bus.  The steps' order is the
flow's alone (``raetsalt.flo.passes`` runs them without ioflo's scheduler).

The adapter is ``Wakeable`` (the skedder's waiter watches it): the command socket, the
eauth workers, the keep writer, the Salt workers and the job service's timers.
"""

from __future__ import annotations

import logging
import os
import pwd
import selectors
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, assert_never

from raetsalt import protocol as p
from raetsalt.daemon.access import REQUEST_SHARES, AccessGate, Ready
from raetsalt.daemon.cacheproc import ProcessWriter
from raetsalt.daemon.cachewriter import QueuedDataCache, QueuedJobCache
from raetsalt.daemon.clusterkeys import ClusterKeyLink
from raetsalt.daemon.datacache import MineCache
from raetsalt.daemon.inbox import StepInbox
from raetsalt.daemon.keys import SHARE_KEY, KeyService
from raetsalt.daemon.peerroad import ClusterRoad
from raetsalt.daemon.roster import ClusterRoster, RoadRoster
from raetsalt.daemon.saltmaster import MasterBridge
from raetsalt.engine.events import (
    Allowed,
    Departed,
    Joined,
    JoinPending,
    JoinRejected,
    MessageReceived,
    PresenceChanged,
)
from raetsalt.errors import LocalError
from raetsalt.lane.page import MAX_PAGE_SIZE
from raetsalt.log import Throttle, clip
from raetsalt.manor import LocalMessage
from raetsalt.node import Node, NodeEvent
from raetsalt.protocol import ToClient
from raetsalt.services.master import Action as MasterAction
from raetsalt.services.master import Fire, MasterJobs, PeerGrant, Sink, ToMinion
from raetsalt.services.mine import MasterMine, is_mine_request
from raetsalt.services.ports import JobStore
from raetsalt.services.progress import SHARE_RUNNING
from raetsalt.services.quota import MinionQuota, QuotaConfig
from raetsalt.store.pgjobcache import PgJobCache

if TYPE_CHECKING:
    from raetsalt.store.pgregistry import MinionRegistry

log = logging.getLogger("raetsalt.daemon")

__all__ = ["MasterAction", "MasterAdapter", "MasterInbox", "unrestricted_users"]

CLIENT_ROOM = 8
"""Pages (lane) or page sizes (command socket) still queued for a client below which it
gets the returns that waited (``MasterJobs.answer_returns``)."""
RETURNS_RECHECK = 0.005
"""Seconds before the master looks again at a client that was behind."""


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
                            p.SHARE_CLOCK_REQ, SHARE_RUNNING})
_SERVED_SHARES = _MINION_SHARES | _PEER_SHARES | {p.SHARE_RETURN}
"""A minion's messages the per-minion message quota applies to."""


@dataclass(slots=True)
class MasterInbox(StepInbox):
    """A master's node events sorted by the step that serves them (``MasterAdapter.sort``);
    each step empties its list."""

    requests: list[LocalMessage] = field(default_factory=list)
    """Clients' publish, runner and eauth token requests (lane)."""
    keys: list[LocalMessage] = field(default_factory=list)
    """``raetsalt-key`` commands (lane)."""
    peers: list[MessageReceived] = field(default_factory=list)
    """Minions' ``peer_publish``/``peer_runner`` (road), for the peer ACL step."""
    granted: list[PeerGrant] = field(default_factory=list)
    """What the peer ACL step allowed, for the peer publish step."""
    returns: list[MessageReceived] = field(default_factory=list)
    minions: list[MessageReceived] = field(default_factory=list)
    """Hello, clock requests, Salt file server and pillar requests (road)."""
    link: list[NodeEvent] = field(default_factory=list)
    """Everything else: the road's link events (joins, presence), other messages."""


def job_cache(opts: Mapping[str, Any], quota: MinionQuota, clock: Callable[[], float]
              ) -> JobStore:
    """``master_job_cache``: Salt's ``local_cache`` (files under ``<cachedir>/jobs``,
    written by a child process) or ``pgjsonb`` (``raetsalt.store.pgjobcache``)."""
    if opts.get("master_job_cache") == "pgjsonb" or (
            opts.get("cluster_id") and opts.get("cluster_store")):
        return PgJobCache(opts, os.path.join(opts["cachedir"], "pgjsonb-spool"))
    return QueuedJobCache(os.path.join(opts["cachedir"], "jobs"), process=True,
                          quota=quota, clock=clock)


class MasterAdapter:
    """The master's job service on its node, with its access gate (who is asking:
    ``raetsalt.daemon.access``)."""

    def __init__(self, node: Node, opts: Mapping[str, Any],
                 utcnow: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.node = node
        self.roster = ClusterRoster(node)
        self.quota = MinionQuota(QuotaConfig.from_opts(opts))
        """Per-minion limits on messages and returns (``raetsalt.services.quota``)."""
        self._quota_log = Throttle(60.0)
        self.jobs = MasterJobs(
            opts,
            job_cache(opts, self.quota, node.clock),
            self.roster,
            estate=node.stack.road.name,
            data_cache=QueuedDataCache(os.path.join(opts["cachedir"], "minions")),
            utcnow=utcnow,
            unrestricted=unrestricted_users(opts),
        )
        self.gate = AccessGate(opts, opts["sock_dir"], node.manor.lane.yard_path,
                               self._send_answer, self._fire, estate=node.stack.road.name,
                               serving=self.jobs.serving)
        self.cluster = ClusterKeyLink(node, opts) if opts.get("cluster_id") else None
        """The cluster's shared keys (``cluster_id``), or None."""
        self.keys = KeyService(node, self.gate.lane_requester, self._send_answer,
                               self.cluster.publish if self.cluster is not None else None,
                               self.cluster.holds if self.cluster is not None else None)
        self.salt = MasterBridge(opts, node.stack.road.name, clock=node.clock)
        """Salt's file server and pillar for minions (``raetsalt.saltbridge``)."""
        self.jobs.pillars = self.salt.requests.pillars
        self.mine = MasterMine(opts, MineCache(os.path.join(opts["cachedir"], "minions"))
                               if opts.get("minion_data_cache", True) else None,
                               self.jobs.targeted, estate=node.stack.road.name, utcnow=utcnow)
        """Salt's mine (``raetsalt.services.mine``)."""
        self.jobs.mine_reader = self.mine.read
        self.registry: MinionRegistry | None = None
        """This master's minions in the cluster's registry table, or None."""
        if self.cluster is not None:
            from raetsalt.store.pgregistry import MinionRegistry

            self.registry = MinionRegistry(self.cluster.keys.params, str(opts["cluster_id"]),
                                           str(opts["id"]), clock=node.clock)
        self._silent: set[str] = set()
        """Minions whose presence failed here (the cluster was told they are gone) on a
        session that is still up: told again that they are held here if they answer on
        it (``_heard_again``)."""
        self.peers: ClusterRoad | None = None
        """The masters' road (``cluster_pki_dir`` with ``cluster_id``), or None."""
        self._from_peers: list[MasterAction] = []
        if opts.get("cluster_id") and opts.get("cluster_pki_dir"):
            from raetsalt.daemon.clusterpki import load_or_create

            keys, _ = load_or_create(opts["cluster_pki_dir"])
            self.peers = ClusterRoad(opts, keys, deliver=self._deliver,
                                     returned=self._returned_elsewhere,
                                     local=self._held_here, clock=node.clock,
                                     local_pillars=lambda: self.salt.requests.pillars)
            peers = self.peers
            self.salt.requests.pillar_changed = peers.announce_pillar
            self.jobs.fleet_pillar = peers.pillar_of
            self.roster.held_elsewhere = lambda: peers.elsewhere
            self.jobs.fleet_grains = lambda minion: peers.elsewhere.get(minion, ("", None))[1]

    @staticmethod
    def new_inbox() -> MasterInbox:
        return MasterInbox()

    # Wakeable: the command socket, the eauth workers, the keep writer, the Salt workers,
    # the job cache writer.
    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self.gate.register(selector, data)
        self.keys.register(selector, data)
        self.salt.register(selector, data)
        if self.cluster is not None:
            self.cluster.register(selector, data)
        if self.peers is not None:
            self.peers.register(selector, data)
        if isinstance(writer := self._cache_writer(), ProcessWriter):
            writer.register(selector, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self.gate.unregister(selector)
        self.keys.unregister(selector)
        self.salt.unregister(selector)
        if self.cluster is not None:
            self.cluster.unregister(selector)
        if self.peers is not None:
            self.peers.unregister(selector)
        if isinstance(writer := self._cache_writer(), ProcessWriter):
            writer.unregister(selector)

    def _cache_writer(self) -> object:
        cache = self.jobs.cache
        return cache.writer if isinstance(cache, QueuedJobCache) else None

    def timeout(self) -> float | None:
        timers = [t for t in (self.jobs.get_timer(), self.gate.get_timer()) if t is not None]
        waits = [w for w in (self.salt.timeout(),
                             self.peers.timeout() if self.peers is not None else None)
                 if w is not None]
        if self.jobs.returns_waiting():
            waits.append(RETURNS_RECHECK)  # a client was behind: look again soon
        if timers:
            waits.append(max(0.0, min(timers) - self.node.clock()))
        return min(waits, default=None)

    # -- what the flow's steps call (``flows/master.flo`` says in which order) ------------

    def sort(self, events: Iterable[NodeEvent], inbox: MasterInbox) -> None:
        """Routing: put each node event where the step that serves it looks; a minion's
        message over its quota is dropped here (counted, logged once a minute)."""
        now = self.node.clock()
        for event in events:
            match event:
                case MessageReceived(body=dict() as body):
                    share = p.share_of(body)
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
                case JoinPending(role=role, here=True) if self.cluster is not None:
                    self.cluster.pending(role)
                    inbox.link.append(event)
                case Joined(remote=remote) if self.cluster is not None:
                    self.cluster.joined(remote)
                    inbox.link.append(event)
                case JoinRejected(role=role, here=True, denied=True) \
                        if self.cluster is not None:
                    self.cluster.denied(role)
                    inbox.link.append(event)
                case PresenceChanged(alive=False) if self.cluster is not None:
                    minion = self._role(event.remote)
                    self._gone(minion)
                    self._silent.add(minion)
                    inbox.link.append(event)
                case Departed(role=role) if self.cluster is not None:
                    self._gone(role)
                    self._silent.discard(role)
                    inbox.link.append(event)
                case PresenceChanged(alive=True) if self.cluster is not None:
                    self._heard_again(self._role(event.remote))
                    inbox.link.append(event)
                case Allowed(remote=remote) if self.cluster is not None:
                    # A new session: its hello says whether the minion holds this master
                    # (a minion that moved away may still accept a session here).
                    self._silent.discard(self._role(remote))
                    inbox.link.append(event)
                case LocalMessage(share=share) if share in REQUEST_SHARES:
                    inbox.requests.append(event)
                case LocalMessage(share=share) if share == SHARE_KEY:
                    inbox.keys.append(event)
                case _:
                    inbox.link.append(event)

    def _admit(self, remote: str, now: float) -> bool:
        why = self.quota.admit_message(remote, now)
        if why is None:
            return True
        self.jobs.stats["minion_message_quota"] += 1
        times = self._quota_log.note(remote, now)
        if times:
            log.warning("messages of %s dropped: %s (%d since the last report)",
                        clip(self._role(remote)), why, times)
        return False

    def serve_keys(self, messages: list[LocalMessage]) -> None:
        """Operator key commands (``raetsalt-key``); they answer by themselves."""
        for event in messages:
            self.keys.on_request(event.source, event.body)
        messages.clear()
        self.keys.poll()

    def serve_requests(self, messages: list[LocalMessage], now: float) -> list[MasterAction]:
        """Clients' publications and runners: who is asking (the access gate: local user,
        eauth), then the publisher_acl/eauth decision and the job publication."""
        actions: list[MasterAction] = []
        for event in messages:
            for ready in self.gate.from_lane(event.source, event.share or "", event.body, now):
                actions.extend(self._dispatch(ready, now))
        messages.clear()
        for ready in self.gate.poll(now):
            actions.extend(self._dispatch(ready, now))
        return actions

    def check_peers(self, inbox: MasterInbox, now: float) -> list[MasterAction]:
        """Minions' ``publish.publish``/``publish.runner``: the ``peer``/``peer_run``
        decision, the only one (``MasterJobs.check_peer``).  What is allowed goes to
        ``inbox.granted``; the rest is answered (returned)."""
        actions: list[MasterAction] = []
        for event in inbox.peers:
            decided = self.jobs.check_peer(self._role(event.remote),
                                           p.share_of(event.body) or "", event.body, now)
            if isinstance(decided, PeerGrant):
                inbox.granted.append(decided)
            else:
                actions.extend(decided)
        inbox.peers.clear()
        return actions

    def serve_peers(self, grants: list[PeerGrant], now: float) -> list[MasterAction]:
        """Publish (or run) what ``check_peers`` allowed, answering the minion."""
        actions: list[MasterAction] = []
        for grant in grants:
            actions.extend(self.jobs.serve_peer(grant, now))
        grants.clear()
        return actions

    def serve_returns(self, messages: list[MessageReceived], now: float) -> list[MasterAction]:
        """Job returns: into the job cache and on the bus; then every waiting client (or
        peer minion) gets the returns that came for it, this pass's and those held while
        it was behind, as many as it keeps up with; and this pass's job cache writes go
        to the writer process."""
        actions: list[MasterAction] = []
        for event in messages:
            minion = self._role(event.remote)
            origin = (self.peers.origin_of(str(event.body.get("jid")))
                      if self.peers is not None else None)
            if origin is None:
                actions.extend(self.jobs.on_return(minion, event.body))
            elif self.peers is not None:  # stored here, fired and answered at the origin
                self.jobs.on_return(minion, event.body, fire=False)
                self.peers.send_return(origin, minion, event.body)
        messages.clear()
        actions.extend(self._from_peers)
        self._from_peers.clear()
        actions.extend(self.jobs.answer_returns(self._keeping_up))
        self._commit_job_cache()
        return actions

    def serve_minions(self, messages: list[MessageReceived], now: float) -> list[MasterAction]:
        """A minion's hello (its grains), clock request, Salt file/pillar requests."""
        actions: list[MasterAction] = []
        for event in messages:
            minion = self._role(event.remote)
            share = p.share_of(event.body)
            grains = self.jobs.grains.get(minion)
            if share == p.SHARE_HELLO:
                actions.extend(self.jobs.on_hello(minion, event.body))
                if self.cluster is not None:
                    self._held(minion)
                actions.extend(self.salt.on_hello(minion, self.jobs.grains.get(minion)))
            elif share == p.SHARE_SALT_REQ and is_mine_request(event.body):
                actions.extend(self.mine.on_request(minion, event.body, now))
            elif share == p.SHARE_SALT_REQ:
                actions.extend(self.salt.on_request(minion, event.body, grains))
            elif share == p.SHARE_PILLAR_REFRESH:
                actions.extend(self.salt.on_pillar_refresh(minion, grains))
            elif share == p.SHARE_CLOCK_REQ:
                actions.extend(self.jobs.on_clock_req(minion))
            elif share == SHARE_RUNNING:
                actions.extend(self.jobs.on_running(minion, event.body, now))
        messages.clear()
        return actions

    def poll(self, now: float) -> list[MasterAction]:
        """Time and the workers: job time-outs, runner gatherings and cache cleaning, and Salt's
        worker answers."""
        actions: list[MasterAction] = list(self.salt.poll(self.jobs.grains))
        if self.cluster is not None:
            self.cluster.poll()
        if self.peers is not None:
            self.peers.poll()
            actions.extend(self._from_peers)
            self._from_peers.clear()
        timer = self.jobs.get_timer()
        if timer is not None and timer <= now:
            actions.extend(self.jobs.handle_timer(now))
        return actions

    def perform(self, actions: Iterable[MasterAction]) -> None:
        """Carry out the steps' decisions (the flow's outbound step)."""
        lane = False
        for action in actions:
            match action:
                case ToMinion(minion=minion, body=body):
                    self._to_minion(minion, body)
                case ToClient(yard=yard, body=body):
                    lane |= self._to_client(yard, body)
                case Fire(tag=tag, data=data):
                    lane = True
                    self.node.manor.fire_event(tag, data)
                case _:
                    assert_never(action)
        if lane:
            self.node.flush_lane()
        if self.peers is not None:
            self.peers.flush()

    def close(self) -> None:
        self.gate.close()
        self.salt.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.peers is not None:
            self.peers.close()
        if self.registry is not None:
            self.registry.close()
        if isinstance(self.jobs.cache, QueuedJobCache | PgJobCache):
            self.jobs.cache.close()  # what is queued reaches the disk (or the spool)
        if isinstance(self.jobs.data_cache, QueuedDataCache):
            self.jobs.data_cache.close()

    # -- internals ------------------------------------------------------------------------

    def _commit_job_cache(self) -> None:
        cache = self.jobs.cache
        if isinstance(cache, QueuedJobCache):
            cache.writer.commit_now()
        elif isinstance(cache, PgJobCache):
            cache.commit_now()

    def _role(self, remote_name: str) -> str:
        """The minion id of a road remote (its role; its name when it has none)."""
        try:
            remote = self.node.stack.road.remote(remote_name)
        except LocalError:
            return remote_name
        return remote.role or remote.name

    def _dispatch(self, ready: Ready, now: float) -> list[MasterAction]:
        if ready.share == p.SHARE_PUBLISH:
            return self.jobs.on_publish(ready.requester, ready.yard, ready.body, now)
        return self.jobs.on_runner(ready.requester, ready.yard, ready.body, now)

    def _keeping_up(self, sink: Sink) -> bool:
        """The client of ``sink`` has read (nearly) all we sent it: more may go.  A peer
        minion's answers go over the road, which has its own flow control."""
        if sink.yard is None:
            return True
        if self.gate.owns(sink.yard):
            assert self.gate.server is not None
            return self.gate.server.backlog(sink.yard) < CLIENT_ROOM * MAX_PAGE_SIZE
        return self.node.manor.lane.backlog(sink.yard) < CLIENT_ROOM

    def _to_minion(self, minion: str, body: dict[str, Any]) -> None:
        if self.peers is not None and not RoadRoster.state(self.roster, minion).up \
                and self.peers.forward(minion, body):
            return  # held by another master of the cluster
        name = self.roster.remote_name(minion)
        if name is None:
            return
        try:
            self.node.stack.send(name, body)
        except LocalError as exc:
            log.warning("job message for %s not sent: %s", minion, exc)

    def _deliver(self, minion: str, body: dict[str, Any]) -> bool:
        """A publication another master of the cluster sent for a minion held here."""
        name = self.roster.remote_name(minion)
        if name is None or not RoadRoster.state(self.roster, minion).up:
            return False
        jid = body.get("jid")
        if isinstance(jid, str):
            self.jobs.adopt_job(jid, self.node.clock())
        try:
            self.node.stack.send(name, body)
        except LocalError:
            return False
        return True

    def _returned_elsewhere(self, minion: str, body: dict[str, Any]) -> None:
        """A return the master holding ``minion`` stored, for a job published here."""
        self._from_peers.extend(self.jobs.on_return(minion, body, store=False))

    def _held(self, minion: str) -> None:
        """A minion's session is up here (its hello): the cluster hears of it."""
        self._silent.discard(minion)
        grains = self.jobs.grains.get(minion)
        if self.peers is not None:
            self.peers.announce({minion: grains}, [])
        if self.registry is not None:
            self.registry.held(minion, grains)

    def _heard_again(self, minion: str) -> None:
        """A minion whose presence failed here answers again on the same session (it was
        only slow, or the machine was starved): it never left, and sends no new hello, so
        the cluster is told it is held here again (else the other masters would not
        target it until it moves)."""
        if minion in self._silent and RoadRoster.state(self.roster, minion).up:
            self._held(minion)

    def _gone(self, minion: str) -> None:
        if self.peers is not None:
            self.peers.announce({}, [minion])
        if self.registry is not None:
            self.registry.gone(minion)

    def _held_here(self) -> dict[str, dict[str, Any] | None]:
        return {m: self.jobs.grains.get(m) for m in RoadRoster.accepted(self.roster)
                if RoadRoster.state(self.roster, m).up}

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
            self.node.flush_lane()

    def _fire(self, tag: str, data: dict[str, Any]) -> None:
        self.node.manor.fire_event(tag, data)
        self.node.flush_lane()
