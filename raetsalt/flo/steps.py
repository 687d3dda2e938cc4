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

The master (``raetsalt.daemon.jobs.MasterService``)::

    raetsalt master route      routing: .raetsalt.inbox -> .raetsalt.routed (MasterInbox)
    raetsalt master keys       raetsalt-key commands (accept, reject, delete at once)
    raetsalt master requests   clients: access gate, publisher_acl/eauth, job publish
    raetsalt peer acl          minions' publish.publish / publish.runner: the peer and
                               peer_run decision; refusals answered here
    raetsalt peer publish      what the ACL let through: published or run
    raetsalt master returns    returns: job cache, waiting client, salt/job/<jid>/ret
    raetsalt master minions    hello (grains), clock, Salt file server and pillar
    raetsalt master timers     job time-outs, runner gatherings, Salt workers
    raetsalt master presence   key decisions and presence: logged, salt/auth and
                               salt/presence/change fired

The minion (``raetsalt.daemon.jobs.MinionService``, ``raetsalt.daemon.service.MinionLink``)::

    raetsalt minion route      routing: .raetsalt.inbox -> .raetsalt.routed (MinionInbox)
    raetsalt minion jobs       the master's publications (job processes), clock, pillar
    raetsalt minion requests   raetsalt-call; publish.* from jobs, relayed to the master
    raetsalt minion timers     finished job processes -> returns; deadlines
    raetsalt minion link       the road's link events -> facts in .raetsalt.link (the
                               flow's link frames decide on them); hello on connection
"""

from __future__ import annotations

import logging
from typing import Any

from raetsalt.daemon.jobs import MasterService, MinionService
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

    def discard(self) -> int:
        """Drop the input the failed step was serving; how many items that was."""
        return 0

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
    """Routing: ``.raetsalt.inbox`` sorted into ``.raetsalt.routed`` by the job service."""

    def step(self, node: Any, jobs: Any) -> None:
        inbox = self.inbox.value
        if inbox:
            jobs.sort(inbox, self.routed.value)
            self.status.data.events += len(inbox)
            inbox.clear()

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
    def step(self, node: Any, jobs: MasterService) -> None:
        jobs.serve_keys(self.routed.value.keys)

    def discard(self) -> int:
        dropped = len(self.routed.value.keys)
        self.routed.value.keys.clear()
        return dropped


class _Serve(_Step):
    """Give one queue of ``.raetsalt.routed`` to one method of the job service
    (``method(messages, now) -> actions``) and put the actions in the outbox; an empty
    queue is skipped unless ``always`` (the method also polls)."""

    queue = ""
    method = ""
    always = False

    def step(self, node: Any, jobs: Any) -> None:
        messages = getattr(self.routed.value, self.queue)
        if messages or self.always:
            self.outbox.value.extend(getattr(jobs, self.method)(messages, node.clock()))

    def discard(self) -> int:
        messages = getattr(self.routed.value, self.queue)
        dropped = len(messages)
        messages.clear()
        return dropped


class RaetsaltMasterRequests(_Serve):
    queue, method, always = "requests", "serve_requests", True


class RaetsaltPeerAcl(_Serve):
    queue, method = "peers", "check_peers"


class RaetsaltPeerPublish(_Serve):
    queue, method = "peers", "serve_peers"


class RaetsaltMasterReturns(_Serve):
    queue, method = "returns", "serve_returns"


class RaetsaltMasterMinions(_Serve):
    queue, method = "minions", "serve_minions"


class RaetsaltMasterTimers(_Timers):
    """Job time-outs, runner gatherings, Salt workers."""


class RaetsaltMasterPresence(_Step):
    def step(self, node: Any, jobs: MasterService) -> None:
        link = self.routed.value.link
        watch = self.watch.value
        if link and isinstance(watch, MasterWatch):
            watch.handle(link)
        link.clear()

    def discard(self) -> int:
        dropped = len(self.routed.value.link)
        self.routed.value.link.clear()
        return dropped


# ---------------------------------------------------------------------------- minion


class RaetsaltMinionRoute(_Route):
    """Into ``MinionInbox``."""


class RaetsaltMinionJobs(_Serve):
    queue, method = "master", "serve_master"


class RaetsaltMinionRequests(_Serve):
    queue, method = "requests", "serve_requests"


class RaetsaltMinionTimers(_Timers):
    """Finished job processes, held publications' deadlines, the Salt zygote."""


class RaetsaltMinionLink(_Step):
    def step(self, node: Any, jobs: MinionService) -> None:
        events = self.routed.value.link
        link = self.watch.value
        if events:
            self.outbox.value.extend(jobs.serve_link(events))
            if isinstance(link, MinionLink):
                link.handle(events)
            events.clear()
        if isinstance(link, MinionLink):
            facts = link.facts()
            if facts != self.shown:
                self.shown = facts
                self.link.update(facts)

    def discard(self) -> int:
        dropped = len(self.routed.value.link)
        self.routed.value.link.clear()
        return dropped

    shown: dict[str, bool] = {}
    """The facts last copied into ``.raetsalt.link`` (per instance once set)."""
