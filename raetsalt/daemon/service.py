"""What the daemon behaviours do, without ioflo: open a node from opts, follow its road
events, report state changes once, decide when a minion must give up.

``raetsalt.flo.behaviors`` holds one of these objects per daemon and calls it; tests
drive them directly too.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from raetsalt.config import parse_master_address
from raetsalt.drivers.udp import (
    SOCKET_BUFFER,
    Accept,
    RoadStack,
    format_ha,
    resolve,
    route_source,
)
from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import (
    Allowed,
    Departed,
    Joined,
    JoinPending,
    JoinRejected,
    MessageReceived,
    PacketDropped,
    PendingLimitReached,
    PresenceChanged,
    SessionEnded,
    TransactionFailed,
)
from raetsalt.errors import LocalError
from raetsalt.keep.records import AutoMode, fingerprint
from raetsalt.log import clip
from raetsalt.manor import LocalMessage
from raetsalt.node import Node, NodeEvent
from raetsalt.paths import keep_dir
from raetsalt.timefmt import salt_stamp

from .droplog import DropLog
from .masterswitch import MasterSwitch, choice_from_opts, wants_switch
from .policy import auto_mode, key_policy, minion_key_policy

log = logging.getLogger("raetsalt.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_REJECTED = 77
"""A minion whose key the master rejected or denied (Salt's salt-minion uses 77 too)."""

# Probing "off" (raet_alive_period 0) as a period nobody will wait for.
_NEVER = 1e9


def road_config(opts: Mapping[str, Any], node: str) -> RoadConfig:
    """The road tunables a daemon derives from its opts.

    ``raet_alive_period`` -> ``presence_period`` (0: no probing) and bounds
    ``alive_timeout``; ``raet_alive_rate`` -> ``alive_rate``; ``raet_handshake_rate`` ->
    ``handshake_rate`` (and half of it: ``handshake_burst``); ``raet_recall_window`` ->
    ``recall_window``;
    ``max_datagram_size`` -> ``max_packet_size``;
    ``raet_reassembly_*`` -> ``reassembly_*``; ``raet_rekey_interval`` and
    ``raet_rekey_messages`` -> ``native_rekey_*``; ``raet_rekey_reject_after`` and
    ``raet_rekey_reject_messages`` -> ``native_reject_*``; ``raet_rekey_min_gap`` ->
    ``native_rekey_min_gap``; on a minion ``random_reauth_delay`` bounds the jittered
    back-off between connection attempts (``retry_max``), and ``acceptance_wait_time``
    and ``acceptance_wait_time_max`` are how long a pending join waits before it asks
    the master again (Salt's meaning: ``raetsalt.engine.join``; an
    operator's acceptance reaches the master at once, as a command, and the master
    answers the ask it holds open, or the next one); on a
    master ``max_pending_keys`` bounds the keys waiting for an operator.
    """
    config = RoadConfig(
        auto=auto_mode(opts) if node == "master" else AutoMode.ONCE,
        max_pending=int(opts.get("max_pending_keys", 1000)),
    )
    period = float(opts.get("raet_alive_period", 3.0)) or _NEVER
    config = replace(
        config,
        presence_period=period,
        alive_rate=float(opts.get("raet_alive_rate", config.alive_rate)),
        handshake_rate=float(opts.get("raet_handshake_rate", config.handshake_rate)),
        handshake_burst=max(1.0, float(opts.get("raet_handshake_rate", 2000.0)) / 2),
        recall_window=int(opts.get("raet_recall_window", config.recall_window)),
        # An unanswered alive fails within one period (raet's 2 s at most), so a silent
        # remote is declared dead within two periods: manage.down within three.
        alive_timeout=min(config.alive_timeout, period),
        max_packet_size=int(opts.get("max_datagram_size", config.max_packet_size)),
        reassembly_per_remote=int(
            opts.get("raet_reassembly_per_remote", config.reassembly_per_remote)
        ),
        reassembly_total=int(opts.get("raet_reassembly_total", config.reassembly_total)),
        reassembly_timeout=float(
            opts.get("raet_reassembly_timeout", config.reassembly_timeout)
        ),
        native_rekey_interval=float(
            opts.get("raet_rekey_interval", config.native_rekey_interval)
        ),
        native_rekey_packets=int(opts.get("raet_rekey_messages", config.native_rekey_packets)),
        native_reject_after=float(
            opts.get("raet_rekey_reject_after", config.native_reject_after)
        ),
        native_reject_packets=int(
            opts.get("raet_rekey_reject_messages", config.native_reject_packets)
        ),
        native_rekey_min_gap=float(opts.get("raet_rekey_min_gap", config.native_rekey_min_gap)),
    )
    if node == "minion":
        reauth = float(opts.get("random_reauth_delay", 0.0))
        config = replace(
            config,
            retry_max=max(config.retry_min, reauth) if reauth > 0 else config.retry_max,
            acceptance_wait_time=float(
                opts.get("acceptance_wait_time", config.acceptance_wait_time)
            ),
            acceptance_wait_time_max=float(
                opts.get("acceptance_wait_time_max", config.acceptance_wait_time_max)
            ),
        )
    return config


_ENDED = {
    "key_expired": "no key rotation completed within raet_rekey_reject_after / "
    "raet_rekey_reject_messages (a path that drops key frames?); handshaking a new session",
    "optimistic_ack": "it acknowledged a packet number that was never sent (an optimistic-ack "
    "attack on congestion control)",
}


def log_session_ended(event: SessionEnded) -> None:
    """One WARNING line per session the road ended (each is one event, so bounded by
    the handshakes a remote completes)."""
    log.warning("native session with %s ended: %s (%s)", event.remote,
                _ENDED.get(event.reason, event.reason), clip(event.detail, bare=True))


MASTER_SOCKET_BUFFER = 16 * 1024 * 1024
"""The master's road socket buffers: ten thousand minions answering a publication at once
are about 12 MiB of kernel buffers (a small datagram costs about 1.2 KiB there); what
does not fit is dropped and waits for a retransmission (seconds).  Above the system's
cap (``net.core.rmem_max``) only for a master that may (CAP_NET_ADMIN, e.g. root)."""


def road_binding(opts: Mapping[str, Any], node: str) -> tuple[tuple[str, int], Accept]:
    """Where the road binds and whose datagrams it takes.

    A master, and a minion given an ``interface``, listen there for anyone.  A minion
    without one listens nowhere (a Salt minion only connects out): it binds
    ``raet_port`` on the local address its system uses to reach its masters (the
    wildcard address only when they are reached from different addresses, or none
    resolves now) and takes datagrams only from the masters it dials; with one master
    its socket is connected to it.
    """
    port = int(opts["raet_port"])
    if node == "master" or opts.get("interface"):
        return (opts["interface"], port), "anyone"
    family = socket.AF_INET6 if opts.get("ipv6") else socket.AF_INET
    masters = list(opts.get("__masters")
                   or [format_ha((opts["master"], int(opts["master_port"])))])
    sources: set[str] = set()
    for master in masters:
        try:
            host, master_port = parse_master_address(master)
            _family, ha = resolve((host, master_port), family)
            sources.add(route_source(ha, family))
        except (LocalError, ValueError) as exc:
            log.debug("no local address towards the master %s: %s", master, exc)
    accept: Accept = "connected" if len(masters) == 1 else "dialed"
    if len(sources) == 1:
        return (sources.pop(), port), accept
    wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
    log.info("the masters are reached from %s local addresses: the road binds %s and "
             "still takes datagrams only from the masters", len(sources) or "no",
             wildcard)
    return (wildcard, port), accept


def open_node(opts: Mapping[str, Any], node: str) -> Node:
    """Bind the road (``road_binding``), open the keep and the manor yard.

    The estate is named after ``opts['id']`` (its role too: the id the master files the
    minion's key under).  Raises ``LocalError``/``KeepError`` with a readable message.
    Keep documents that cannot be read are named in the log (once) and skipped: a
    minion whose key file is corrupt is refused until it is fixed or deleted.
    """
    if node == "master" and opts.get("cluster_id") and opts.get("cluster_pki_dir"):
        from raetsalt.daemon.clusterpki import adopt, load_or_create

        keys, _ = load_or_create(opts["cluster_pki_dir"])
        adopt(keep_dir(opts), keys, name=str(opts["id"]),
              ha=(str(opts["interface"]), int(opts["raet_port"])))
    datagram = int(opts.get("max_datagram_size", 1024))
    least = MASTER_SOCKET_BUFFER if node == "master" else SOCKET_BUFFER
    buffer_size = max(least, int(opts.get("raet_road_bufcnt", 2)) * datagram)
    ha, accept = road_binding(opts, node)
    stack = RoadStack(
        keep_dir(opts),
        ha,
        accept=accept,
        name=opts["id"],
        main=node == "master",
        config=road_config(opts, node),
        buffer_size=buffer_size,
        policy=key_policy(opts) if node == "master" else minion_key_policy(opts),
        crypto_threads=int(opts.get("raet_crypto_threads") or 0),
    ).open()
    for problem in stack.problems:
        log.error("keep: %s (skipped; that key is refused until the file is fixed or "
                  "deleted, e.g. with raetsalt-key -d)", problem)
    try:
        return Node(
            stack,
            node=node,
            sock_dir=opts["sock_dir"],
            node_id=opts["id"] if node == "minion" else None,
            group=opts.get("sock_dir_group"),
            holds=[str(n) for n in opts.get("__bus_holds") or ()] if node == "master" else (),
            hold_max_bytes=int(opts.get("automation_backlog_max_bytes") or 0) or None,
        )
    except BaseException:
        stack.close()
        raise


def master_address(opts: Mapping[str, Any], family: int = socket.AF_UNSPEC) -> tuple[str, int]:
    """The master's numeric ``(host, port)``, resolved now (``LocalError`` if it does not)."""
    _family, addr = resolve((opts["master"], int(opts["master_port"])), family)
    return addr


class MinionLink:
    """A minion's view of its master: connect, re-resolve, and the facts the minion flow
    decides on (``flows/minion.flo`` holds the only state machine of the connection:
    connecting, unreachable, pending, connected, lost, rejected).

    Facts (``facts()``): ``connected`` (the session is allowed and the master answers),
    ``pending`` (the master holds this minion's key for an operator), ``rejected`` (the
    master rejected or denied the key), ``unreachable`` (``UNREACHABLE_AFTER`` joins in a
    row failed), ``was_connected`` (it was connected once: a loss is "lost"), ``retry``
    (``rejected_retry``: keep trying when rejected).  ``report``
    logs a state the flow entered, once per change, at WARNING when something is wrong
    (so it shows at the default log level), naming the address or the reason.
    """

    hot = False
    """Every listed master served at once (``master_type: str`` with a list)."""
    RESOLVE_EVERY = 5.0
    """Seconds between re-resolving the master's host name while not connected."""
    UNREACHABLE_AFTER = 2
    """Failed joins in a row after which the master counts as unreachable."""

    def __init__(
        self,
        node: Node,
        opts: Mapping[str, Any],
        *,
        resolver: Callable[[], tuple[str, int]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.node = node
        self.opts = opts
        self.resolver = resolver or (lambda: master_address(opts, node.stack.family))
        self.clock = clock or node.clock
        self.state = "starting"
        """The state the flow last reported (``report``)."""
        self.pending = False
        self.rejected = False
        self.ever_connected = False
        self.uid: int | None = None
        self.ha: tuple[str, int] | None = None
        self.failures = 0
        """Joins with the master that failed since the last one that succeeded."""
        self.last_failure = ""
        self._last_resolve = 0.0
        self._reported: set[str] = set()
        self.drops = DropLog("the minion")
        self.switch: MasterSwitch | None = None
        """One master held among several (failover, a cluster), or None: one master."""
        if wants_switch(opts):
            self.switch = MasterSwitch(node, opts, choice_from_opts(opts), self._held,
                                       clock=self.clock)

    # -- commands ---------------------------------------------------------------------------

    def connect(self) -> None:
        """Resolve the master and keep a session with it (the road retries by itself)."""
        if self.switch is not None:
            self.switch.start()
            return
        listed = self.opts.get("__masters") or ()
        if len(listed) > 1:  # master_type str: every master at once
            problems = []
            for master in listed:
                try:
                    host, port = parse_master_address(master)
                    _family, ha = resolve((host, port), self.node.stack.family)
                except (LocalError, ValueError) as exc:
                    problems.append(f"{master}: {exc}")
                    continue
                uid = self.node.stack.connect(ha)
                self.node.masters.add(uid)
                self.hot = True
                if self.uid is None:
                    self.uid, self.ha, self.node.master = uid, ha, uid
            if not self.hot:
                raise LocalError("no listed master resolves: " + "; ".join(problems))
            for problem in problems:
                log.warning("master %s (not served)", problem)
            self._last_resolve = self.clock()
            return
        ha = self.resolver()
        self.uid = self.node.connect_master(ha)
        self.ha = ha
        self._last_resolve = self.clock()

    def reresolve(self) -> bool:
        """While not connected, look the master's name up again now and then; if the
        address changed, point the session there at once.  True when it moved."""
        if self.uid is None or self.connected or self.switch is not None or self.hot:
            return False
        now = self.clock()
        if now - self._last_resolve < self.RESOLVE_EVERY:
            return False
        self._last_resolve = now
        try:
            ha = self.resolver()
        except LocalError as exc:
            log.debug("master address not re-resolved: %s", exc)
            return False
        remote = self.node.stack.road.remote(self.uid)
        if tuple(remote.ha) == tuple(ha):
            return False
        log.warning(
            "the master's address changed from %s to %s: reconnecting",
            format_ha(remote.ha),
            format_ha(ha),
        )
        self.uid = self.node.stack.connect(ha, name=remote.name)
        self.node.master = self.uid
        self.ha = ha
        self.failures = 0
        return True

    def choose(self) -> bool:
        """With several masters: move to another when the held one is lost (and back,
        with master_failback).  Each pass of the link step.  True when the node now
        serves another master whose session is already up (a failback: the flow stays
        connected, so the caller greets the new master itself)."""
        if self.hot:
            self._follow_a_live_master()
            return False
        if self.switch is None:
            return False
        before = self.uid
        self.switch.tick(pending=self.pending, rejected=self.rejected)
        if self.uid == before or not self.connected:
            return False
        log.info("%s", self._describe("connected")[1])
        return True

    def _follow_a_live_master(self) -> None:
        """Serving every master at once: the minion's own messages (events, publish.*)
        go to a master that answers (the first listed when it does)."""
        road = self.node.stack.road

        def up(uid: int) -> bool:
            remote = road.remote(uid)
            return bool(remote.allowed) and remote.alive is not False

        if self.uid is not None and up(self.uid) and self.uid == min(self.node.masters):
            return
        live = sorted(uid for uid in self.node.masters if up(uid))
        if live and live[0] != self.uid:
            self.uid = self.node.master = live[0]
            self.ha = road.remote(live[0]).ha
            log.info("the minion's own messages now go to the master %s",
                     road.remote(live[0]).name)

    def _held(self, uid: int, ha: tuple[str, int]) -> None:
        """The switch holds another master now: this link follows it."""
        self.uid = uid
        self.ha = ha
        self.pending = self.rejected = False
        self.failures = 0
        self._reported.clear()

    # -- facts ------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """The session with the master is up (allowed) and the master answers (with
        every master at once: one of them)."""
        if self.hot:
            road = self.node.stack.road
            return any(road.remote(uid).allowed and road.remote(uid).alive is not False
                       for uid in self.node.masters)
        if self.uid is None:
            return False
        remote = self.node.stack.road.remote(self.uid)
        return bool(remote.allowed) and remote.alive is not False

    def facts(self) -> dict[str, bool]:
        """What the flow's transitions read (``.raetsalt.link``)."""
        connected = self.connected
        self.ever_connected |= connected
        return {
            "connected": connected,
            "was_connected": self.ever_connected,
            "pending": self.pending,
            "rejected": self.rejected,
            "unreachable": self.failures >= self.UNREACHABLE_AFTER,
            "retry": bool(self.opts.get("rejected_retry")),
        }

    def handle(self, events: Iterable[NodeEvent]) -> None:
        """Follow the road events that concern the master; log the rest at debug."""
        if self.switch is not None or self.hot:
            events = list(events)
            if self.switch is not None:
                self.switch.note(events)
            held = self._held_name()
            events = [e for e in events if getattr(e, "remote", held) == held
                      or not isinstance(e, JoinPending | JoinRejected | Joined | Allowed
                                        | TransactionFailed)]
        for event in events:
            if isinstance(event, JoinPending):
                if not event.here:
                    self.pending = True
                else:
                    self._once(
                        "master_pending", "the master's key is pending in this minion's keep"
                    )
            elif isinstance(event, JoinRejected):
                self.pending = False
                if not event.here and event.authenticated:
                    self.rejected = True
                elif not event.here:
                    if "unsigned_reject" not in self._reported:
                        self._reported.add("unsigned_reject")  # once until the next join
                        log.warning(
                            "ignoring an unsigned join reject from the master's address %s: "
                            "it proves nothing (a raet 0.6.8 master cannot sign it, and "
                            "anyone can forge it); retrying",
                            format_ha(self.ha) if self.ha else "?",
                        )
                elif event.unpinned:
                    self._once(
                        "master_unpinned",
                        f"refusing the master {event.remote}: the fingerprint of its key, "
                        f"{fingerprint(event.verhex, str(self.opts.get('hash_type') or 'sha256'))}"
                        f", is not master_finger {self.opts.get('master_finger')!r} (a wrong "
                        "master_finger, or another host answers at the master's address); "
                        "retrying",
                    )
                else:
                    self._once(
                        "master_refused",
                        f"refusing the master {event.remote}: its key differs from the one "
                        f"this minion accepted before (remove the master's role from "
                        f"{keep_dir(self.opts)} to trust a new master key); retrying",
                    )
            elif isinstance(event, Joined | Allowed):
                self.pending = self.rejected = False
                self.failures = 0
                self._reported.clear()
            elif isinstance(event, TransactionFailed) and event.kind == "join":
                self.failures += 1
                self.last_failure = event.reason
                log.debug(
                    "join with %s failed (%s); retrying with back-off", event.remote, event.reason
                )
            elif isinstance(event, PacketDropped):
                self.drops.note(event)
            elif isinstance(event, SessionEnded):
                log_session_ended(event)
            elif isinstance(event, MessageReceived | LocalMessage):
                log.debug("unhandled message %r", event)

    def _held_name(self) -> str | None:
        if self.uid is None:
            return None
        try:
            return self.node.stack.road.remote(self.uid).name
        except LocalError:
            return None

    # -- reports ----------------------------------------------------------------------------

    def report(self, state: str) -> None:
        """Log that the flow entered ``state`` (once per change)."""
        if state == self.state:
            return
        self.state = state
        level, message = self._describe(state)
        log.log(level, "%s", message)

    def _describe(self, state: str) -> tuple[int, str]:
        minion = self.opts.get("id")
        where = format_ha(self.ha) if self.ha is not None else "its address"
        if state == "connected":
            remote = None if self.uid is None else self.node.stack.road.remote(self.uid)
            name = remote.name if remote is not None else "master"
            return logging.INFO, f"connected to the master {name} at {where}"
        if state == "rejected":
            return logging.ERROR, (
                f"the master rejected the key of minion {minion!r} (the id is rejected, or "
                "another key is registered for it: denied)"
                + ("; rejected_retry is set: retrying" if self.opts.get("rejected_retry")
                   else f"; exiting with {EXIT_REJECTED}"))
        if state == "pending":
            return logging.WARNING, (f"the key of minion {minion!r} is pending on the master; "
                                     "waiting for it to be accepted (retrying)")
        if state == "unreachable":
            why = "no answer" if self.last_failure == "timeout" else self.last_failure
            return logging.WARNING, (f"cannot reach the master at {where}: {self.failures} "
                                     f"join attempts failed ({why}); still trying")
        if state == "lost":
            return logging.WARNING, "lost the master; reconnecting with back-off"
        return logging.INFO, f"connecting to the master at {where}"

    def _once(self, key: str, message: str) -> None:
        """Log a problem of this side once until the next successful join."""
        if key not in self._reported:
            self._reported.add(key)
            log.error("%s", message)


# Salt's salt/auth "act" values for each key state.
_AUTH_ACTS = {"accepted": "accept", "pending": "pend", "rejected": "reject", "denied": "denied"}


class MasterWatch:
    """The master's view of its minions: logs key decisions and presence once per change
    and fires ``salt/auth`` (``auth_events``) and ``salt/presence/change``
    (``presence_events``) on the master bus."""

    def __init__(self, node: Node, opts: Mapping[str, Any]) -> None:
        self.node = node
        self.opts = opts
        self.keys: dict[str, str] = {}
        """role -> last reported key state (pending, accepted, rejected, denied)."""
        self.connected: set[str] = set()
        self.alive: set[str] = set()
        self.drops = DropLog("the master")

    def handle(self, events: Iterable[NodeEvent]) -> bool:
        """Follow road events; True when an event was fired on the bus (to be sent)."""
        fired = False
        new: list[str] = []
        lost: list[str] = []
        road = self.node.stack.road
        for event in events:
            if isinstance(event, JoinPending) and event.here:
                fired |= self._key(event.role, "pending", event.remote)
            elif isinstance(event, JoinRejected) and event.here:
                fired |= self._key(event.role, "denied" if event.denied else "rejected",
                                   event.remote)
            elif isinstance(event, PacketDropped):
                self.drops.note(event)
            elif isinstance(event, SessionEnded):
                log_session_ended(event)
            elif isinstance(event, Departed):
                self.keys.pop(event.role, None)
                self.connected.discard(event.remote)
                log.warning("minion %s: key removed by the operator; session dropped (it "
                            "is told to join again)", event.role)
            elif isinstance(event, PendingLimitReached):
                log.warning("%d minion keys wait for an operator (max_pending_keys): joins "
                            "of new minion ids are dropped until keys are accepted, rejected "
                            "or deleted (raetsalt-key -L)", event.limit)
            elif isinstance(event, Joined):
                try:
                    role = road.remote(event.remote).role or event.remote
                except LocalError:
                    role = event.remote
                fired |= self._key(role, "accepted", event.remote)
            elif isinstance(event, Allowed):
                if event.remote not in self.connected:
                    self.connected.add(event.remote)
                    log.info("minion %s connected (%s profile%s)", event.remote, event.profile,
                             ", moved here from another master of the cluster without a "
                             "join" if event.adopted else "")
            elif isinstance(event, PresenceChanged):
                if event.alive and event.remote not in self.alive:
                    self.alive.add(event.remote)
                    new.append(event.remote)
                elif not event.alive and event.remote in self.alive:
                    self.alive.discard(event.remote)
                    self.connected.discard(event.remote)
                    lost.append(event.remote)
                    log.info("minion %s stopped answering", event.remote)
            elif isinstance(event, MessageReceived | LocalMessage):
                log.debug("unhandled message %r", event)
        if (new or lost) and self.opts.get("presence_events"):
            self.node.manor.fire_event(
                "salt/presence/change",
                {"new": new, "lost": lost, "_stamp": salt_stamp(datetime.now(UTC))},
            )
            fired = True
        return fired

    def _key(self, role: str, act: str, remote: str) -> bool:
        if self.keys.get(role) == act:
            return False
        self.keys[role] = act
        if act == "pending":
            log.warning("minion %s: key pending; accept it with raetsalt-key -a %s", role, role)
        elif act == "accepted":
            log.info("minion %s: key accepted, joined", role)
        elif act == "rejected":
            log.warning("minion %s: key rejected", role)
        else:
            log.warning(
                "minion %s: key denied (another key is registered for this id); "
                "see raetsalt-key --list denied",
                role,
            )
        if not self.opts.get("auth_events", True):
            return False
        data = {"result": act == "accepted", "act": _AUTH_ACTS[act], "id": role,
                "_stamp": salt_stamp(datetime.now(UTC))}
        self.node.manor.fire_event("salt/auth", data)
        return True


def ensure_dirs(opts: Mapping[str, Any]) -> None:
    """Create pki_dir (0700), cachedir and the log file's directory if missing."""
    os.makedirs(opts["pki_dir"], mode=0o700, exist_ok=True)
    os.makedirs(opts["cachedir"], mode=0o755, exist_ok=True)
    log_dir = os.path.dirname(opts["log_file"])
    if log_dir:
        os.makedirs(log_dir, mode=0o755, exist_ok=True)
