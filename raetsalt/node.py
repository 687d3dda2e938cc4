"""One master or minion: its road (``RoadStack``) and its manor yard (lane + event bus),
serviced together from one selector, without threads.

The protocol lives elsewhere (``raetsalt.engine``, ``raetsalt.manor``); this module only
moves messages between the two sides:

* minion -> master: every event a ``fire_master*`` event expands to
  (``Manor.forward_to_master``) becomes one road message to the master estate::

      {route: {src: [<minion estate>, 'manor', None], dst: [<master estate>, 'manor',
      'event_fire']}, tag: <tag>, data: <data>}

  The events of one ``fire_master`` batch (Salt's beacons: ``events: [...]``) go as
  ``{route, events: [[tag, data], ...]}``, ``BATCH_EVENTS`` at most per message.
  Messages to one remote of one size class are delivered in order (docs/transport.md,
  "Message order and scheduling"), so events arrive in fire order unless a large one is
  overtaken.  Before the master is connected they wait in the road's queue
  (``RoadConfig.message_timeout``).
* lane messages addressed to another estate (``Manor.forward_over_road``) go over the road
  to that remote unchanged.
* a road message arrives only from an authenticated (joined and allowed) remote.  Its
  route's source estate is replaced by that remote's name, then it is routed as the
  manor routes lane messages (``raetsalt.routing.route`` with ``from_road``): share
  ``event_fire`` is fired on this node's bus, a message for another yard is relayed on the
  lane, anything else is handed to the caller.

What the master trusts: the forwarding minion's id is the *role* its key was accepted
under (Salt's RAET master did the same: the id in a load is overwritten with the remote's
role), never a field of the payload; tags in ``raetsalt.bus.MINION_BLACKLIST`` are dropped
even though the minion already filters them, because the minion is not trusted to.

Embedding (the daemons drive it like a ``RoadStack``)::

    node.register(selector)        # both sockets; call node.service_ready() when either
    timeout = node.timeout()       # is ready, and at the latest after this many seconds
    events = node.service_ready()  # road events and lane messages left to the caller

or stand-alone: ``node.run(stop)``.
"""

from __future__ import annotations

import logging
import selectors
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from raetsalt.bus import FIRE_MASTER_TAG, is_blacklisted
from raetsalt.drivers.clock import Clock, monotonic
from raetsalt.drivers.udp import Address, RoadStack
from raetsalt.drivers.uxd import UxdSocket, prepare_sock_dir
from raetsalt.engine.events import Event, MessageReceived
from raetsalt.errors import BadPacket, LocalError
from raetsalt.lane.engine import Lane
from raetsalt.manor import SHARE_FIRE, LocalMessage, Manor
from raetsalt.paths import MANOR, lane_name_for, manor_path, resolve_group
from raetsalt.routing import DeliverLocal, Drop, Route, YardAddress, route
from raetsalt.timefmt import salt_stamp

log = logging.getLogger(__name__)

NodeEvent = Event | LocalMessage
"""What ``service_ready`` hands back: road events (``Joined``, ``Allowed``, road
``MessageReceived`` for shares the node does not serve, ...) and lane ``LocalMessage``s."""

# Wake-up bound of ``run`` so a stop request is seen even when nothing happens.
_RUN_MAX_WAIT = 0.25
HELD_EVENT_BYTES = 64
"""What an event held for the automation process counts at least, for its event bound."""
DRAIN_READS = 16
"""Rounds of reading the manor's socket (512 datagrams each) when draining."""
DRAIN_POLL = 0.05
"""Longest wait between two attempts of ``drain_bus``."""
BATCH_EVENTS = 256
"""Events per road message of a forwarded batch, at most (the master refuses more)."""


class StopSignal(Protocol):
    def is_set(self) -> bool: ...


class Node:
    """A road and a manor yard in one loop.

    :param stack: an open ``RoadStack``; the node owns it from now on (``close`` closes it).
    :param node: ``'master'`` or ``'minion'``.
    :param sock_dir: the node's socket directory (created 0700, or 0750 with ``group``).
    :param node_id: the minion's id (selects its lane); ignored for a master.
    :param group: ``sock_dir_group``: a group name or gid, or None.
    :param holds: names of bus listeners still to come whose events are held for them
        from the start (``EventBus.hold``: the master's reactor process).
    """

    def __init__(
        self,
        stack: RoadStack,
        *,
        node: str,
        sock_dir: str,
        node_id: str | None = None,
        group: str | int | None = None,
        clock: Clock = monotonic,
        holds: Iterable[str] = (),
        hold_max_bytes: int | None = None,
    ) -> None:
        if node == "minion" and not node_id:
            raise LocalError("a minion node needs its id")
        self.stack = stack
        self.node = node
        self.node_id = node_id if node == "minion" else None
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.master: int | None = None
        """uid of the master remote a minion forwards to (``connect_master``)."""
        self.masters: set[int] = set()
        """Every master a minion serves at once (hot multi-master: ``master_type: str``
        with a list); empty with one master (``master`` alone)."""
        gid = resolve_group(group)
        prepare_sock_dir(sock_dir, gid)
        self.manor_path = manor_path(sock_dir, node, self.node_id)
        self.manor = Manor(
            lane=Lane(lane_name=lane_name_for(node, self.node_id), yard_name=MANOR),
            node=node,
            node_id=self.node_id,
            estate=stack.road.name,
            forward_to_master=self._forward_to_master,
            forward_over_road=self._forward_over_road,
            forward_batch_to_master=self._forward_batch_to_master,
        )
        for name in holds:
            self.manor.bus.hold(name, max_bytes=hold_max_bytes, max_events=(
                hold_max_bytes // HELD_EVENT_BYTES if hold_max_bytes else None))
        self.uxd = UxdSocket(self.manor_path, group=gid, replace_stale=True, sock_dir=sock_dir,
                             manor=True)
        self._selector = selectors.DefaultSelector()
        self._registered: list[selectors.BaseSelector] = []
        try:
            self.register(self._selector)
        except BaseException:
            self.close()
            raise

    # -- life cycle ---------------------------------------------------------------------------

    def connect_master(self, ha: Address) -> int:
        """Keep a session with the master at ``ha`` and forward ``fire_master`` events to
        it; returns the master's uid."""
        self.master = self.stack.connect(ha)
        return self.master

    def close(self) -> None:
        """Close both sockets (removing the manor's socket file).  Idempotent."""
        for selector in list(self._registered):
            self.unregister(selector)
        self._selector.close()
        self.uxd.close()
        self.stack.close()

    def __enter__(self) -> Node:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- embedding ----------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        """Watch both sockets in ``selector``; call ``service_ready`` when either is ready."""
        self.stack.register(selector, data)
        fds = [fd for fd in (self.uxd.fileno(), self.uxd.wait_fileno()) if fd is not None]
        done: list[int] = []
        try:
            for fd in fds:
                selector.register(fd, selectors.EVENT_READ, data)
                done.append(fd)
        except BaseException:
            for fd in done:
                selector.unregister(fd)
            self.stack.unregister(selector)
            raise
        self._registered.append(selector)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        if selector in self._registered:
            self._registered.remove(selector)
            self.stack.unregister(selector)
            for fd in (self.uxd.fileno(), self.uxd.wait_fileno()):
                try:
                    if fd is not None:
                        selector.unregister(fd)
                except (KeyError, ValueError):
                    pass

    def timeout(self) -> float | None:
        """Seconds until ``service_ready`` must run even if no socket becomes ready."""
        wait = self.stack.timeout()
        timer = self.manor.get_timer()
        if timer is not None:
            due = max(0.0, timer - self.clock())
            wait = due if wait is None else min(wait, due)
        return wait

    def service_ready(self) -> list[NodeEvent]:
        """Read both sockets, run timers, route, send; never blocks.  The daemon flows do
        the same in steps (``receive_lane``, ``receive_road``, then ``flush``)."""
        out: list[NodeEvent] = list(self.receive_lane())
        out.extend(self.receive_road())
        self.flush_bus()
        return out

    def receive_lane(self) -> list[LocalMessage]:
        """Read the lane (the manor yard's socket): messages for the caller (client
        requests); bus subscriptions and ``fire_master`` forwarding are done here."""
        manor = self.manor
        self.uxd.receive_into(manor, self.clock())
        out: list[LocalMessage] = []
        while (message := manor.next_event()) is not None:
            out.append(message)
        return out

    def receive_road(self) -> list[Event]:
        """Read the road, run its timers and send what it queued; authenticated road
        messages are routed (bus events fired, yards relayed) and only those for this
        node's services are returned, with the road's other events."""
        out: list[Event] = []
        for event in self.stack.service_ready():
            if type(event) is not MessageReceived or self._on_road_message(event):
                out.append(event)
        return out

    def flush_lane(self) -> None:
        """Send what the manor queued (lane answers, bus events) now, without its timers."""
        now = self.clock()
        self.uxd.release_writable(self.manor, now)
        self.uxd.send_all(self.manor.datagrams_to_send(now), self.manor, now)

    def flush_bus(self) -> None:
        """Run the manor's timers and send what it queued: bus events to subscribers,
        answers to yards."""
        manor = self.manor
        now = self.clock()
        self.uxd.release_writable(manor, now)
        manor.handle_timer(now)
        self.uxd.send_all(manor.datagrams_to_send(now), manor, now)

    def flush(self) -> None:
        """Send what the road and the manor queued, without reading."""
        if self.stack.road.has_output():
            self.stack.flush()
        self.flush_bus()

    def drain_bus(self, timeout: float) -> bool:
        """Read the events fired into the manor's socket, then send what the bus queued
        for its listeners, waiting (at most ``timeout`` s) for those whose sockets are
        full to read: a stopping daemon leaves no event behind that a listener (the
        event_return spool) would still take.  True when all went."""
        deadline = self.clock() + timeout
        # Events fired just before the stop wait in the manor's socket: read them first
        # (a bounded number of rounds; requests among them go unanswered, as the node
        # stops).
        for _ in range(DRAIN_READS):
            now = self.clock()
            got = self.uxd.receive_into(self.manor, now)
            unanswered = 0
            while self.manor.next_event() is not None:
                unanswered += 1
            self.stats["unanswered_at_stop"] += unanswered
            if not got:
                break
        self.flush_bus()
        while self.manor.has_output():
            now = self.clock()
            if now >= deadline:
                return False
            timer = self.manor.get_timer()
            wait = DRAIN_POLL if timer is None else max(0.0, min(timer - now, DRAIN_POLL))
            time.sleep(min(wait, deadline - now))  # a full listener socket: its back-off
            self.flush_bus()
        return True

    def step(self, timeout: float | None = None) -> list[NodeEvent]:
        """Wait for a socket or the earliest timer (at most ``timeout`` s), then service."""
        wait = self.timeout()
        if timeout is not None:
            wait = max(0.0, timeout) if wait is None else min(wait, max(0.0, timeout))
        if wait is None or wait > 0.0:
            self._selector.select(wait)
        return self.service_ready()

    def run(
        self,
        stop: StopSignal | Callable[[], bool],
        on_event: Callable[[NodeEvent], None] | None = None,
    ) -> None:
        """Service until ``stop`` (a ``threading.Event``-like or a predicate) says so.

        ``stop`` is checked after every wake-up, and a wake-up comes at least every
        0.25 s.  Events go to ``on_event`` (dropped when None).
        """
        is_stopped = stop.is_set if hasattr(stop, "is_set") else stop
        while not is_stopped():
            for event in self.step(_RUN_MAX_WAIT):
                if on_event is not None:
                    on_event(event)

    # -- manor hooks --------------------------------------------------------------------------

    def _forward_to_master(self, event: dict[str, Any]) -> None:
        if self.master is None:
            self.stats["fire_master_no_master"] += 1
            return
        remote = self.stack.road.remote(self.master)
        # Before the join the remote's name is a placeholder; None means "the receiver".
        master_estate = remote.name if remote.joined else None
        body = {
            "route": Route(
                YardAddress(self.stack.road.name, MANOR, None),
                YardAddress(master_estate, MANOR, SHARE_FIRE),
            ).to_wire(),
            **event,
        }
        try:
            self.stack.send(self.master, body)
        except LocalError as exc:  # not encodable for the road's body kind, or too large
            self.stats["fire_master_unsendable"] += 1
            log.warning("event %r not forwarded to the master: %s",
                        event.get("tag", "(a batch)"), exc)

    def _forward_batch_to_master(self, events: list[dict[str, Any]]) -> None:
        """Several events as few road messages: ``{route, events: [[tag, data], ...]}``,
        at most ``BATCH_EVENTS`` events each."""
        for start in range(0, len(events), BATCH_EVENTS):
            chunk = events[start:start + BATCH_EVENTS]
            self.stats["fire_master_batches"] += 1
            self._forward_to_master({"events": [[e["tag"], e["data"]] for e in chunk]})

    def _forward_over_road(self, estate: str, body: dict[str, Any]) -> None:
        try:
            self.stack.send(estate, body)
        except LocalError as exc:
            self.stats["road_unsendable"] += 1
            log.debug("lane message for estate %r not sent: %s", estate, exc)

    # -- road messages ------------------------------------------------------------------------

    def _on_road_message(self, event: MessageReceived) -> bool:
        """Route one authenticated road message; True when it is left to the caller."""
        body = event.body
        if not isinstance(body, dict):
            self.stats["road_bad_body"] += 1
            return False
        try:
            msg_route = Route.from_body_untrusted(body)
        except BadPacket as exc:
            self.stats[f"road_{exc.trigger}"] += 1
            return False
        # The road authenticated the sender; the route may not claim another estate.
        msg_route = Route(
            YardAddress(event.remote, msg_route.src.yard, msg_route.src.share), msg_route.dst
        )
        body["route"] = msg_route.to_wire()
        decision = route(
            msg_route,
            self.stack.road.name,
            self.manor.lane.yard_names(),
            from_road=True,
            manor=MANOR,
        )
        if type(decision) is DeliverLocal:
            if decision.yard is not None:
                self._relay(body, decision.yard)
                return False
            if decision.share == SHARE_FIRE:
                self._fire_from_remote(event.remote, body)
                return False
            return True
        if type(decision) is Drop:
            self.stats[f"road_{decision.reason}"] += 1
        return False

    def _relay(self, body: dict[str, Any], yard: str) -> None:
        try:
            if not self.manor.lane.send(body, yard):
                self.stats["road_relay_refused"] += 1
        except (LocalError, TypeError, ValueError, OverflowError):
            self.stats["road_relay_failed"] += 1

    def _fire_from_remote(self, remote_name: str, body: Mapping[str, Any]) -> None:
        batch = body.get("events")
        if batch is not None:
            if not isinstance(batch, list) or len(batch) > BATCH_EVENTS:
                self.stats["road_bad_event"] += 1
                return
            for item in batch:
                if isinstance(item, list) and len(item) == 2:
                    self._fire_from_remote(remote_name, {"tag": item[0], "data": item[1]})
                else:
                    self.stats["road_bad_event"] += 1
            return
        tag, data = body.get("tag"), body.get("data")
        if not isinstance(tag, str) or not tag or not isinstance(data, Mapping):
            self.stats["road_bad_event"] += 1
            return
        if self.node == "master" and is_blacklisted(tag):
            self.stats["road_blacklisted"] += 1
            return
        if self.node == "minion" and tag.startswith(FIRE_MASTER_TAG):
            # It would be forwarded straight back to the master.
            self.stats["road_fire_master_refused"] += 1
            return
        data = dict(data)
        if data.get("cmd") == "_minion_event":
            # A single-form load names its minion; only the road may say who that is.
            remote = self.stack.road.remote(remote_name)
            data["id"] = remote.role or remote.name
        data["_stamp"] = salt_stamp(datetime.now(UTC))
        self.manor.fire_event(tag, data)
        self.stats["road_events_fired"] += 1
