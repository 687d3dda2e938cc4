"""The serving steps of the daemon flows: one behaviour per step of a node's work, in the
order the flows run them each iteration (receive, route, serve, report, send).

Each step reads and writes the queues in shares (``raetsalt.flo.doer``): the receive
steps append node events to ``.raetsalt.inbox``; the route step sorts them into
``.raetsalt.routed``; each serving step takes its part of it and appends the actions it
decided (road messages, client answers, bus events) to ``.raetsalt.outbox``; the
outbound step carries them out and sends.  A step whose node is not open does nothing;
a step that raises drops what it was serving, logs and counts it, and the daemon serves
on (``_Step``); only a step that fails on every run for a minute sets
``.raetsalt.status.failure`` (the flow goes to ``failed``).

Both daemons::

    raetsalt lane receive      inbound: the manor yard's socket (clients, bus subscribers)
    raetsalt road receive      inbound: the road (datagrams, its timers: joins, alive
                               probes, retransmissions); bus events from minions fired
    raetsalt outbound          outbound: carry out .raetsalt.outbox, send the road's queue
    raetsalt bus flush         events: bus events and lane answers to their yards

The master (``raetsalt.daemon.master_adapter.MasterAdapter``)::

    raetsalt master route      routing: .raetsalt.inbox -> .raetsalt.routed (MasterInbox)
    raetsalt master keys       raetsalt-key commands (accept, reject, delete at once)
    raetsalt master requests   clients: access gate, publisher_acl/eauth, job publish
    raetsalt peer acl          minions' publish.publish / publish.runner: the peer and
                               peer_run decision, the only one; refusals answered here,
                               what is allowed goes to routed.granted
    raetsalt peer publish      routed.granted: published or run, the minion answered
    raetsalt master returns    returns: job cache, salt/job/<jid>/ret; then every
                               waiting client (or peer minion) gets its returns, as many
                               as it keeps up with, and the job cache writes go out
    raetsalt master minions    hello (grains), clock, Salt file server and pillar
    raetsalt master timers     job time-outs, runner gatherings, cache cleaning, Salt
                               workers, a longer alive period told to the minions
    raetsalt master presence   key decisions and presence: logged, salt/auth and
                               salt/presence/change fired

The minion (``raetsalt.daemon.minion_adapter.MinionAdapter``,
``raetsalt.daemon.service.MinionLink``)::

    raetsalt minion route      routing: .raetsalt.inbox -> .raetsalt.routed (MinionInbox)
    raetsalt minion jobs       the master's publications (job processes), clock, pillar;
                               the master's answers to relayed publish.* -> the job
    raetsalt minion requests   raetsalt-call; publish.* from jobs, relayed to the master
    raetsalt minion timers     finished job processes -> returns to the master and the
                               answer to a waiting raetsalt-call; held publications'
                               deadlines; the Salt zygote
    raetsalt minion link       the road's link events -> facts in .raetsalt.link (the
                               flow's link frames decide on them); hello on connection

``raetsalt.flo.passes`` runs the serving steps a flow file lists, in its order, without
the skedder (for a loop of one's own).
"""

from __future__ import annotations

import logging
from typing import Any

from raetsalt.daemon.master_adapter import MasterAdapter
from raetsalt.daemon.minion_adapter import MinionAdapter
from raetsalt.daemon.service import MasterWatch, MinionLink
from raetsalt.flo.doer import RaetsaltDoer
from raetsalt.log import Throttle, clip

log = logging.getLogger("raetsalt.daemon")


class _Step(RaetsaltDoer):
    """A serving step: ``step(node, jobs)`` runs only while the node is open (the job
    service exists from the node's opening to its closing).

    A step that raises is contained: what it was serving is dropped (``discard``) and
    counted in ``.raetsalt.status.step_failures``, the failure is logged (the first one
    of an interval with its traceback: it is a bug; the rest counted in the next line),
    and the daemon serves on.  Only a step that keeps failing with nothing left to drop,
    on every run for ``GIVE_UP_AFTER`` seconds, fails the flow (the daemon exits 1 and
    its supervisor starts it again)."""

    GIVE_UP_AFTER = 60.0

    def action(self, **kwa: Any) -> None:
        jobs = self.jobs.value
        if jobs is None:
            return
        try:
            self.step(jobs.node, jobs)
        except Exception as exc:  # noqa: BLE001 - contained: logged, counted, dropped
            self._failed(jobs, exc)
        else:
            self._failing_since = None

    def step(self, node: Any, jobs: Any) -> None:
        raise NotImplementedError

    queue: str | None = None
    """The list of ``.raetsalt.routed`` the step serves, if any (what ``discard`` drops)."""

    def discard(self) -> int:
        """Drop the input the failed step was serving; how many items that was."""
        if self.queue is None:
            return 0
        messages = getattr(self.routed.value, self.queue)
        dropped = len(messages)
        messages.clear()
        return dropped

    _failing_since: float | None = None
    _log = Throttle(60.0)

    def _failed(self, jobs: Any, exc: Exception) -> None:
        name = type(self).__name__
        dropped = self.discard()
        now = jobs.node.clock()
        status = self.status.data
        status.step_failures = int(getattr(status, "step_failures", 0) or 0) + 1
        times = self._log.note(name, now)
        if times:
            log.error("%s failed (%d time(s) since the last report; %d item(s) of input "
                      "dropped now): %s: %s", name, times, dropped, type(exc).__name__,
                      clip(str(exc), 200, bare=True), exc_info=times == 1)
        if dropped:
            self._failing_since = None
            return
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since >= self.GIVE_UP_AFTER:
            self.fail(f"{name} failed on every run for {self.GIVE_UP_AFTER:.0f} s: {exc}")


# ---------------------------------------------------------------------------- both


class RaetsaltLaneReceive(_Step):
    def step(self, node: Any, jobs: Any) -> None:
        self.inbox.value.extend(node.receive_lane())


class RaetsaltRoadReceive(_Step):
    def step(self, node: Any, jobs: Any) -> None:
        self.inbox.value.extend(node.receive_road())


class RaetsaltOutbound(_Step):
    def step(self, node: Any, jobs: Any) -> None:
        outbox = self.outbox.value
        if outbox:
            actions = list(outbox)
            outbox.clear()
            jobs.perform(actions)
        if node.stack.road.has_output():
            node.stack.flush()


class RaetsaltBusFlush(_Step):
    def step(self, node: Any, jobs: Any) -> None:
        node.flush_bus()


class _Route(_Step):
    """Routing: ``.raetsalt.inbox`` sorted into ``.raetsalt.routed`` by the job service.
    What no step served in the last pass (a flow without the step for it) is dropped
    first, and logged: nothing piles up."""

    def step(self, node: Any, jobs: Any) -> None:
        dropped = self.routed.value.drop_unserved()
        if dropped:
            level = logging.DEBUG if self.warned >= set(dropped) else logging.ERROR
            self.warned = self.warned | set(dropped)  # loud once per queue
            log.log(level, "no step of the flow serves %s: dropped", ", ".join(
                f"{count} {queue}" for queue, count in sorted(dropped.items())))
        inbox = self.inbox.value
        if inbox:
            jobs.sort(inbox, self.routed.value)
            self.status.data.events += len(inbox)
            inbox.clear()

    warned: frozenset[str] = frozenset()
    """The lists already reported as served by no step (per instance once set)."""

    def discard(self) -> int:
        dropped = len(self.inbox.value)
        self.inbox.value.clear()
        return dropped


class _Timers(_Step):
    """Time and the workers: what the job service's ``poll(now)`` decides."""

    def step(self, node: Any, jobs: Any) -> None:
        self.outbox.value.extend(jobs.poll(node.clock()))


# ---------------------------------------------------------------------------- master


class RaetsaltMasterRoute(_Route):
    """Into ``MasterInbox``."""


class RaetsaltMasterKeys(_Step):
    queue = "keys"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        jobs.serve_keys(self.routed.value.keys)


class RaetsaltMasterRequests(_Step):
    """Every pass (the access gate's logins finish in their own time)."""

    queue = "requests"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        self.outbox.value.extend(jobs.serve_requests(self.routed.value.requests, node.clock()))


class RaetsaltPeerAcl(_Step):
    """The peer / peer_run decision: ``routed.peers`` -> ``routed.granted`` or answered."""

    queue = "peers"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        routed = self.routed.value
        if routed.peers:
            self.outbox.value.extend(jobs.check_peers(routed, node.clock()))


class RaetsaltPeerPublish(_Step):
    queue = "granted"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        granted = self.routed.value.granted
        if granted:
            self.outbox.value.extend(jobs.serve_peers(granted, node.clock()))


class RaetsaltMasterReturns(_Step):
    """Every pass: returns held for a client that was behind go out when it caught up."""

    queue = "returns"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        self.outbox.value.extend(jobs.serve_returns(self.routed.value.returns, node.clock()))


class RaetsaltMasterMinions(_Step):
    queue = "minions"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        minions = self.routed.value.minions
        if minions:
            self.outbox.value.extend(jobs.serve_minions(minions, node.clock()))


class RaetsaltMasterTimers(_Timers):
    """Job time-outs, runner gatherings, cache cleaning, Salt workers, the alive period."""


class RaetsaltMasterPresence(_Step):
    queue = "link"

    def step(self, node: Any, jobs: MasterAdapter) -> None:
        link = self.routed.value.link
        watch = self.watch.value
        if link and isinstance(watch, MasterWatch):
            watch.handle(link)
        link.clear()


# ---------------------------------------------------------------------------- minion


class RaetsaltMinionRoute(_Route):
    """Into ``MinionInbox``."""


class RaetsaltMinionJobs(_Step):
    queue = "master"

    def step(self, node: Any, jobs: MinionAdapter) -> None:
        messages = self.routed.value.master
        if messages:
            self.outbox.value.extend(jobs.serve_master(messages, node.clock()))


class RaetsaltMinionRequests(_Step):
    queue = "requests"

    def step(self, node: Any, jobs: MinionAdapter) -> None:
        messages = self.routed.value.requests
        if messages:
            self.outbox.value.extend(jobs.serve_requests(messages, node.clock()))


class RaetsaltMinionTimers(_Timers):
    """Finished job processes, held publications' deadlines, the Salt zygote."""


class RaetsaltMinionLink(_Step):
    queue = "link"

    def step(self, node: Any, jobs: MinionAdapter) -> None:
        events = self.routed.value.link
        link = self.watch.value
        if events:
            self.outbox.value.extend(jobs.serve_link(events))
            if isinstance(link, MinionLink):
                link.handle(events)
            events.clear()
        if isinstance(link, MinionLink):
            if link.choose():
                self.outbox.value.extend(jobs.greet_master())
            facts = link.facts()
            if facts != self.shown:
                self.shown = facts
                self.link.update(facts)

    shown: dict[str, bool] = {}
    """The facts last copied into ``.raetsalt.link`` (per instance once set)."""
