"""The masters' own road: a master's estate among the other masters of its cluster.

A second ``RoadStack`` of the master, on ``(interface, cluster_port)``, with its own keep
(``<pki_dir>/cluster-road``).  It is a road like the minions' (join, allow, signed and
encrypted messages) with two rules of its own:

- its estate holds the cluster's keys (``cluster_pki_dir``) and it accepts no others:
  a join presenting other keys is refused and nothing is recorded
  (``KeyPolicy.only``), so an estate that is not a master of this cluster never gets a
  session;
- only datagrams from a ``cluster_peers`` address are read (``Road.admit``); the others
  are dropped before any work, counted (``not_peer``) and logged once a minute.

What travels on it (``raetsalt.services.clusterwire``): which minions each master holds
(with their grains, for targeting at the origin of a job), publications for the
minions another master holds, and their returns back to the job's origin.

``ClusterRoad`` keeps the picture the other masters gave (``elsewhere``: minion -> the
master holding it, and its grains) and the jobs it delivered for another master
(``forwarded``: jid -> that master), and carries out the adapter's requests.
"""

from __future__ import annotations

import json
import logging
import os
import selectors
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from raetsalt.daemon.clusterpki import ClusterKeys, adopt
from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import (
    Allowed,
    Event,
    JoinRejected,
    MessageReceived,
    PacketDropped,
    PresenceChanged,
)
from raetsalt.errors import ConfigError, LocalError
from raetsalt.keep.policy import KeyPolicy
from raetsalt.keep.records import AutoMode
from raetsalt.log import Throttle, clip
from raetsalt.services import clusterwire as wire
from raetsalt.services.clusterwire import Address, Peers

log = logging.getLogger("raetsalt.daemon")

KEEP_SUBDIR = "cluster-road"
MAX_FORWARDED = 100_000
"""Jobs remembered as delivered for another master (oldest forgotten first)."""
FORWARD_TTL = 86400.0
"""Seconds a delivered job's returns are still sent to its origin."""


def pillar_size(pillar: Mapping[str, Any]) -> int | None:
    """The JSON length of a pillar, or None when it cannot be sent (not JSON)."""
    try:
        return len(json.dumps(pillar, default=str))
    except (TypeError, ValueError):
        return None


class ClusterRoad:
    """This master on the masters' road (module docstring).

    :param deliver: sends a road message to a minion this master holds; False if it
        holds no session with it.
    :param returned: a return forwarded by the master holding the minion, for a job
        published here.
    :param local: the minions this master holds now, with their grains.
    :param local_pillars: the pillars compiled here for the minions this master holds.
    """

    def __init__(self, opts: Mapping[str, Any], keys: ClusterKeys, *,
                 deliver: Callable[[str, dict[str, Any]], bool],
                 returned: Callable[[str, dict[str, Any]], None],
                 local: Callable[[], dict[str, dict[str, Any] | None]],
                 clock: Callable[[], float],
                 local_pillars: Callable[[], Mapping[str, dict[str, Any]]] = dict) -> None:
        from raetsalt.daemon.service import road_config

        port = int(opts.get("cluster_port", 4520))
        try:
            self.peers = Peers.parse(opts.get("cluster_peers") or [], port)
        except wire.PeerConfigError as exc:
            raise ConfigError(str(exc)) from None
        self.keys = keys
        self.deliver = deliver
        self.returned = returned
        self.local = local
        self.local_pillars = local_pillars
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.elsewhere: dict[str, tuple[str, dict[str, Any] | None]] = {}
        """Minion -> (the master holding it, its grains)."""
        self.pillars: dict[str, tuple[str, dict[str, Any]]] = {}
        """Minion -> (the master that compiled its pillar, the pillar): used while that
        master holds the minion (``pillar_of``)."""
        self.forwarded: OrderedDict[str, tuple[str, float]] = OrderedDict()
        """jid -> (the origin master, until when its returns go there)."""
        self._outbox: dict[tuple[str, str], tuple[list[str], dict[str, Any]]] = {}
        self._throttle = Throttle(60.0)
        self._lost_peers: set[str] = set()
        """Peers taken for lost (their minions forgotten) and not heard from since."""
        keep = os.path.join(opts["pki_dir"], KEEP_SUBDIR)
        ha = (str(opts["interface"]), port)
        adopt(keep, keys, name=str(opts["id"]), ha=ha)
        config = replace(road_config(opts, "master"), auto=AutoMode.ALWAYS)
        policy = KeyPolicy(AutoMode.ALWAYS, only=self._cluster_keys)
        self.stack = RoadStack(keep, ha, name=str(opts["id"]), main=True, config=config,
                               policy=policy).open()
        self.stack.road.admit = self.peers.admits
        self.address: Address = self.stack.address
        log.info("cluster road on %s:%d (%d peer(s))", self.address[0], self.address[1],
                 len(self.peers.addresses))
        for peer in self.peers.to_connect(self.address):
            self.stack.connect(peer)

    def _cluster_keys(self, verhex: str, pubhex: str) -> bool:
        return (verhex, pubhex) == (self.keys.verhex, self.keys.pubhex)

    # -- the loop -------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self.stack.register(selector, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self.stack.unregister(selector)

    def timeout(self) -> float | None:
        return self.stack.timeout()

    def poll(self) -> None:
        """Read the road and act on what the other masters said."""
        self.handle(self.stack.service_ready())

    def handle(self, events: Iterable[Event]) -> None:
        now = self.clock()
        for event in events:
            match event:
                case MessageReceived(remote=remote, body=body):
                    self._message(remote, body, now)
                case Allowed(remote=remote):
                    log.info("cluster: master %s connected", remote)
                    self._lost_peers.discard(remote)
                    self._send_held(remote)
                case PresenceChanged(remote=remote, alive=False):
                    self._lost(remote)
                case PresenceChanged(remote=remote, alive=True) if remote in self._lost_peers:
                    # back without a new session: its minions were forgotten here
                    self._lost_peers.discard(remote)
                    self._send(remote, wire.ask())
                case JoinRejected(here=True, role=role, remote=remote):
                    self.stats["refused"] += 1
                    times = self._throttle.note(("refused", remote), now)
                    if times:
                        log.warning("cluster road: estate %s (%s) refused: it does not hold "
                                    "the cluster's keys (%d time(s))", clip(role),
                                    clip(remote), times)
                case PacketDropped(reason=reason, address=address):
                    self.stats[f"drop_{reason.value}"] += 1
                    times = self._throttle.note((reason, address[0]), now)
                    if times:
                        log.warning("cluster road: datagram from %s:%s dropped (%s; %d "
                                    "time(s))", clip(address[0]), address[1], reason.value,
                                    times)
                case _:
                    pass

    def _message(self, remote: str, body: Any, now: float) -> None:
        message = wire.parse_untrusted(body)
        match message:
            case None:
                self.stats["malformed"] += 1
                times = self._throttle.note(("malformed", remote), now)
                if times:
                    log.warning("cluster road: malformed message from master %s dropped "
                                "(%d time(s))", clip(remote), times)
            case wire.Held(minions=minions):
                for minion, grains in minions.items():
                    self.elsewhere[minion] = (remote, grains)
            case wire.Ask():
                self._send_held(remote)
            case wire.Gone(minions=minions):
                for minion in minions:
                    if self.elsewhere.get(minion, ("",))[0] == remote:
                        del self.elsewhere[minion]
                    if self.pillars.get(minion, ("",))[0] == remote:
                        del self.pillars[minion]
            case wire.Pillars(minions=minions):
                for minion, pillar in minions.items():
                    self.pillars[minion] = (remote, pillar)
            case wire.Pub(jid=jid, minions=minions, body=pub):
                self.forwarded[jid] = (remote, now + FORWARD_TTL)
                self.forwarded.move_to_end(jid)
                while len(self.forwarded) > MAX_FORWARDED:
                    self.forwarded.popitem(last=False)
                for minion in minions:
                    if not self.deliver(minion, pub):
                        self.stats["pub_not_held"] += 1
            case wire.Ret(minion=minion, body=ret):
                if self.elsewhere.get(minion, ("",))[0] != remote:
                    self.stats["ret_not_held"] += 1  # a return it could not have had
                    return
                self.returned(minion, ret)

    def _lost(self, remote: str) -> None:
        self._lost_peers.add(remote)
        gone = [m for m, (holder, _) in self.elsewhere.items() if holder == remote]
        for minion in gone:
            del self.elsewhere[minion]
        for minion in [m for m, (holder, _) in self.pillars.items() if holder == remote]:
            del self.pillars[minion]
        if gone:
            log.warning("cluster: master %s stopped answering; its %d minion(s) are out "
                        "of reach until they move", remote, len(gone))

    # -- the adapter's requests -----------------------------------------------------------

    def holder(self, minion: str) -> str | None:
        """The other master holding ``minion``'s session, if one said so."""
        found = self.elsewhere.get(minion)
        return None if found is None else found[0]

    def pillar_of(self, minion: str) -> dict[str, Any] | None:
        """The pillar of a minion another master holds, as that master compiled it."""
        found = self.pillars.get(minion)
        if found is None or self.holder(minion) != found[0]:
            return None
        return found[1]

    def origin_of(self, jid: str) -> str | None:
        """The master a job delivered here was published on (its returns go there)."""
        found = self.forwarded.get(jid)
        if found is None or found[1] < self.clock():
            return None
        return found[0]

    def forward(self, minion: str, body: dict[str, Any]) -> bool:
        """Queue a publication for a minion another master holds (sent by ``flush``)."""
        holder = self.holder(minion)
        jid = body.get("jid")
        if holder is None or not isinstance(jid, str):
            return False
        queued = self._outbox.setdefault((holder, jid), ([], body))
        queued[0].append(minion)
        return True

    def send_return(self, origin: str, minion: str, body: Mapping[str, Any]) -> None:
        self._send(origin, wire.ret(minion, body))

    def announce(self, held: Mapping[str, dict[str, Any] | None], gone: list[str]) -> None:
        """This master holds ``held`` now and no longer ``gone``: tell every peer."""
        if not held and not gone:
            return
        for minion in held:
            self.elsewhere.pop(minion, None)
            self.pillars.pop(minion, None)
        self._to_all([*wire.held(held), *wire.gone(gone)])

    def announce_pillar(self, minion: str, pillar: dict[str, Any]) -> None:
        """The pillar of a minion held here was compiled: tell every peer."""
        self._to_all(list(wire.pillars(self._shareable({minion: pillar}))))

    def _shareable(self, pillars: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The pillars small enough to share (the others counted, logged)."""
        kept: dict[str, dict[str, Any]] = {}
        for minion, pillar in pillars.items():
            size = pillar_size(pillar)
            if size is not None and size <= wire.MAX_PILLAR:
                kept[minion] = pillar
                continue
            self.stats["pillar_not_shared"] += 1
            times = self._throttle.note("pillar", self.clock())
            if times:
                log.warning("cluster: the pillar of minion %s is not shared with the other "
                            "masters (%s), which cannot target it by pillar (%d pillar(s) "
                            "not shared since the last report)", clip(minion),
                            "not JSON" if size is None else
                            f"{size} characters, over {wire.MAX_PILLAR}", times)
        return kept

    def _send_held(self, remote: str) -> None:
        """Every minion held here, then their pillars, to ``remote``."""
        held = self.local()
        for body in wire.held(held):
            self._send(remote, body)
        compiled = self.local_pillars()
        mine = {m: compiled[m] for m in held if m in compiled}
        for body in wire.pillars(self._shareable(mine)):
            self._send(remote, body)

    def _to_all(self, bodies: list[dict[str, Any]]) -> None:
        if not bodies:
            return
        for remote in self.stack.road.remotes.values():
            if remote.allowed:
                for body in bodies:
                    self._send(remote.name, body)

    def flush(self) -> None:
        outbox, self._outbox = self._outbox, {}
        for (holder, jid), (minions, body) in outbox.items():
            for message in wire.pub(jid, minions, body):
                self._send(holder, message)
        self.stack.flush()

    def _send(self, remote: str, body: dict[str, Any]) -> None:
        try:
            self.stack.send(remote, body)
        except LocalError as exc:
            self.stats["not_sent"] += 1
            times = self._throttle.note(("send", remote), self.clock())
            if times:
                log.warning("cluster road: message to master %s not sent: %s (%d time(s))",
                            clip(remote), exc, times)

    def close(self) -> None:
        self.stack.close()
