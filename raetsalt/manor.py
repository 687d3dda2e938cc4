"""The manor yard: the one yard per node that joins the lane, the event bus and the road.

Sans-IO, with the lane engine's surface so any driver (the stand-alone bus host in
``raetsalt.event``, or the daemon's loop beside the road) can run it:

* ``receive_datagram(data, src_path, now)`` - a datagram from the manor's socket;
* ``datagrams_to_send(now)`` - pages to send, as (bytes, path);
* ``send_blocked`` / ``send_succeeded`` / ``send_failed`` - what the socket said;
* ``get_timer()`` / ``handle_timer(now)``;
* ``next_event()`` - lane messages for shares the manor does not serve itself
  (``LocalMessage``), for the daemon to dispatch.

Bus protocol (message bodies on the lane, msgpack; ``route`` as in ``raetsalt.routing``):

=====================  =====================================================================
client -> manor         ``dst`` share ``event_req``: subscribe; the manor answers ``event_ack``;
                        with ``claim: str``, the events held under that name come first
                        (``EventBus.hold``)
                        ``dst`` share ``event_fire``: ``{tag: str, data: map}`` one event
                        ``dst`` share ``event_unreq``: unsubscribe; with ``release: true``
                        the hold it claimed ends
manor -> client         ``dst`` share ``event_ack``: the subscription is in place
                        ``dst`` share ``event``: ``{events: [[tag, data], ...]}`` in fire order
=====================  =====================================================================

Hooks for the daemon (both optional):

* ``forward_to_master(event)`` is called for every event that an event tagged
  ``fire_master*`` on a minion bus expands to (``raetsalt.bus.expand_fire_master``), with
  ``event = {'tag': str, 'data': dict}``, ready to be fired on the master's bus.
* ``forward_batch_to_master(events)``, when given, is called instead, once, with all the
  events one ``fire_master`` batch (``events: [...]``, Salt's beacons) expands to, so
  that the daemon can send them as few road messages.
* ``forward_over_road(estate, body)`` is called for lane messages addressed to another
  estate; without it they are dropped (``no_road``).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.bus import FIRE_MASTER_TAG, EventBus, encode_batch, encode_event, expand_fire_master
from raetsalt.errors import BadPacket, LocalError
from raetsalt.lane.engine import Lane, PageDropped, YardMessage, YardReaped
from raetsalt.lane.page import PackKind
from raetsalt.log import Throttle, clip
from raetsalt.paths import MANOR
from raetsalt.routing import DeliverLocal, Drop, Forward, Route, YardAddress, route

log = logging.getLogger(__name__)

SHARE_SUBSCRIBE = "event_req"
SHARE_UNSUBSCRIBE = "event_unreq"
SHARE_FIRE = "event_fire"
SHARE_ACK = "event_ack"
SHARE_EVENTS = "event"

# An event batch is one page; leave room for the head and the route.
_BATCH_BYTES = 64 * 1024 - 512
# Pages that may wait for one listener before its events stay in the bus queue.  Linux
# queues only net.unix.max_dgram_qlen (default 10) datagrams per socket anyway.
_MAX_LISTENER_BACKLOG = 8


@dataclass(frozen=True, slots=True)
class LocalMessage:
    """A lane message for a share the manor does not serve itself."""

    share: str | None
    body: dict[str, Any]
    source: str
    """The sending yard (verified)."""


class Manor:
    """The manor yard of one node.

    :param node: ``'minion'`` or ``'master'``; only a minion forwards ``fire_master``.
    :param node_id: the node's id (a minion's id goes into forwarded events).
    :param estate: the node's road estate name, once known.
    """

    def __init__(
        self,
        *,
        lane: Lane,
        node: str,
        node_id: str | None = None,
        estate: str | None = None,
        bus: EventBus | None = None,
        forward_to_master: Callable[[dict[str, Any]], None] | None = None,
        forward_over_road: Callable[[str, dict[str, Any]], None] | None = None,
        forward_batch_to_master: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        if node not in ("minion", "master"):
            raise LocalError(f"node must be 'minion' or 'master', not {node!r}")
        if lane.yard_name != MANOR:
            raise LocalError(f"the manor's lane yard must be named {MANOR!r}")
        self.lane = lane
        self.node = node
        self.node_id = node_id
        self.estate = estate
        self.bus = bus if bus is not None else EventBus()
        self.forward_to_master = forward_to_master
        self.forward_over_road = forward_over_road
        self.forward_batch_to_master = forward_batch_to_master
        self.stats: Counter[str] = Counter()
        self._messages: deque[LocalMessage] = deque()
        self._lost_seen = 0
        """Bus losses already logged."""
        self._lost_throttle = Throttle(interval=60.0)

    # -- driver surface --------------------------------------------------------------------

    def receive_datagram(self, data: bytes, src_path: str | None, now: float) -> None:
        """Feed one datagram received on the manor's socket."""
        lane = self.lane
        lane.receive_datagram(data, src_path, now)
        event = lane.next_event()
        while event is not None:
            if type(event) is YardMessage:
                self._on_message(event)
            elif type(event) is YardReaped:
                self.bus.unsubscribe(event.name)
            elif type(event) is PageDropped:
                log.debug("dropped page from %s: %s %s", event.source_path, event.trigger,
                          event.detail)
            event = lane.next_event()

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, str]]:
        """Move queued events into pages (within each listener's backlog) and return them."""
        bus = self.bus
        lane = self.lane
        stats = bus.stats
        if stats["events_lost"] + stats["held_lost"] != self._lost_seen:
            self._log_lost(now)
        for listener in bus.pending():
            if not lane.has_yard(listener):
                bus.unsubscribe(listener)
                continue
            # While a listener's socket is full its events stay on the bus, so that the
            # pages made once it has room are full ones: its kernel queue holds a
            # number of datagrams, whatever their size.
            while (lane.backlog(listener) < _MAX_LISTENER_BACKLOG
                   and not lane.backed_off(listener)):
                batch = bus.take(listener, _BATCH_BYTES)
                if not batch:
                    break
                body = encode_batch(self._route_to(listener, SHARE_EVENTS), batch, len(batch))
                try:
                    lane.send(body, listener, pack_kind=PackKind.MSGPACK)
                except LocalError as exc:  # a single event too large to paginate
                    self.stats["events_too_large"] += len(batch)
                    log.warning("event batch for %s not sent: %s", listener, exc)
        return lane.datagrams_to_send(now)

    def _log_lost(self, now: float) -> None:
        stats = self.bus.stats
        lost = stats["events_lost"] + stats["held_lost"]
        if self._lost_throttle.note("lost", now):
            log.warning("the bus dropped %d events (the oldest) for listeners that did not "
                        "keep up (%d in all: %d for listeners, %d held for the automation "
                        "process)", lost - self._lost_seen, lost, stats["events_lost"],
                        stats["held_lost"])
            self._lost_seen = lost

    def send_blocked(self, path: str, datagrams: list[bytes], now: float) -> None:
        self.lane.send_blocked(path, datagrams, now)

    def send_unblocked(self, path: str, now: float) -> None:
        self.lane.send_unblocked(path, now)

    def send_succeeded(self, path: str) -> None:
        self.lane.send_succeeded(path)

    def send_failed(self, path: str, now: float) -> None:
        self.lane.send_failed(path, now)
        self._drain_lane_events()

    def has_output(self) -> bool:
        """Events or pages still wait to go to a yard that is there."""
        lane = self.lane
        return lane.has_output() or any(lane.has_yard(n) for n in self.bus.pending())

    def get_timer(self) -> float | None:
        """Earliest time work is due; ``-inf`` when queued events could go right away."""
        lane = self.lane
        for listener in self.bus.pending():
            if lane.backlog(listener) == 0:
                return float("-inf")
        return lane.get_timer()

    def handle_timer(self, now: float) -> None:
        self.lane.handle_timer(now)
        self._drain_lane_events()

    def next_event(self) -> LocalMessage | None:
        """The next message for a share the manor leaves to the daemon."""
        return self._messages.popleft() if self._messages else None

    # -- commands ----------------------------------------------------------------------------

    def fire_event(self, tag: str, data: Mapping[str, Any]) -> None:
        """Put an event on this node's bus (for code running inside the daemon).

        ``data`` should already carry ``_stamp``; the manor does not read clocks.
        """
        if not isinstance(tag, str) or not tag:
            raise LocalError("event tag must be a non-empty string")
        self._publish(tag, data)

    # -- internals ---------------------------------------------------------------------------

    def _route_to(self, yard: str, share: str) -> dict[str, list[str | None]]:
        return Route(YardAddress(self.estate, MANOR, None),
                     YardAddress(self.estate, yard, share)).to_wire()

    def _drain_lane_events(self) -> None:
        event = self.lane.next_event()
        while event is not None:
            if type(event) is YardReaped:
                self.bus.unsubscribe(event.name)
            elif type(event) is YardMessage:
                self._on_message(event)
            event = self.lane.next_event()

    def _on_message(self, msg: YardMessage) -> None:
        body = msg.body
        # Fast path for nearly all bus traffic (fires and subscriptions from local yards):
        # src [None|str, <the sending yard>, None|str], dst [None|our estate, manor, share].
        # It reaches the same decision as ``route`` below without building Route objects.
        wire = body.get("route")
        if type(wire) is dict:
            src, dst = wire.get("src"), wire.get("dst")
            if (
                type(dst) is list
                and len(dst) == 3
                and dst[1] == MANOR
                and type(dst[2]) is str
                and (dst[0] is None or dst[0] == self.estate)
                and type(src) is list
                and len(src) == 3
                and src[1] == msg.source
                and (src[0] is None or type(src[0]) is str)
                and (src[2] is None or type(src[2]) is str)
            ):
                self._dispatch(dst[2], body, msg.source)
                return
        try:
            msg_route = Route.from_body_untrusted(body)
        except BadPacket as exc:
            self.stats[exc.trigger] += 1
            return
        # The lane verified who sent this; the route's source yard must say the same.
        if msg_route.src.yard != msg.source:
            msg_route = Route(YardAddress(msg_route.src.estate, msg.source, msg_route.src.share),
                              msg_route.dst)
            body["route"] = msg_route.to_wire()
        decision = route(msg_route, self.estate, self.lane.yard_names(), manor=MANOR)
        if type(decision) is DeliverLocal:
            if decision.yard is None:
                self._dispatch(decision.share, body, msg.source)
            else:
                self._relay(body, decision.yard)
        elif type(decision) is Forward:
            if self.forward_over_road is None:
                self.stats["no_road"] += 1
            else:
                self.forward_over_road(decision.estate, body)
        elif type(decision) is Drop:
            self.stats[decision.reason] += 1

    def _relay(self, body: dict[str, Any], yard: str) -> None:
        if not self.lane.send(body, yard):
            self.stats["relay_refused"] += 1

    def _dispatch(self, share: str | None, body: dict[str, Any], source: str) -> None:
        if share == SHARE_FIRE:
            tag = body.get("tag")
            data = body.get("data")
            if (
                type(tag) is not str
                or not tag
                or (type(data) is not dict and not isinstance(data, Mapping))
            ):
                self.stats["bad_event"] += 1
                return
            self._publish(tag, data)
        elif share == SHARE_SUBSCRIBE:
            claim = body.get("claim")
            if type(claim) is not str:
                claim = None
            known = self.bus.is_listening(source)
            self.bus.subscribe(source, claim)
            if claim is not None and not known and (lost := self.bus.lost(source)):
                log.warning("%d events held for %s before it subscribed were dropped (the "
                            "oldest; a hold keeps %d events, %d bytes at most)", lost,
                            clip(claim, bare=True), *self.bus.bounds(source))
            self.lane.send({"route": self._route_to(source, SHARE_ACK)}, source)
        elif share == SHARE_UNSUBSCRIBE:
            self.bus.unsubscribe(source, release=body.get("release") is True)
        else:
            self._messages.append(LocalMessage(share=share, body=body, source=source))

    def _publish(self, tag: str, data: Mapping[str, Any]) -> None:
        try:
            encoded = encode_event(tag, data)
        except (TypeError, ValueError, OverflowError) as exc:
            self.stats["bad_event"] += 1
            log.warning("event %r not encodable: %s", tag, exc)
            return
        self.bus.publish(encoded)
        if self.node == "minion" and tag.startswith(FIRE_MASTER_TAG):
            self._forward_to_master(data)

    def _forward_to_master(self, data: Mapping[str, Any]) -> None:
        hook = self.forward_to_master
        if hook is None:
            self.stats["fire_master_unforwarded"] += 1
            return
        events = expand_fire_master(data, self.node_id)
        batch = self.forward_batch_to_master
        if batch is not None and len(events) > 1:
            try:
                batch(events)
            except Exception:  # noqa: BLE001 - the daemon's code must not stop the bus
                self.stats["fire_master_hook_error"] += 1
                log.exception("forward_batch_to_master failed for %d events", len(events))
            else:
                self.stats["fire_master_forwarded"] += len(events)
            return
        for event in events:
            # The hook is the daemon's code; a failure there must not stop the bus.
            try:
                hook(event)
            except Exception:  # noqa: BLE001
                self.stats["fire_master_hook_error"] += 1
                log.exception("forward_to_master failed for %r", event.get("tag"))
            else:
                self.stats["fire_master_forwarded"] += 1
