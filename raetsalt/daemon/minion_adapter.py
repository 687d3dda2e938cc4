"""The minion's job service (``raetsalt.services.minion.MinionJobs``) on its node: the
daemon side of each step of ``flows/minion.flo``.

The flow's route step hands ``MinionAdapter.sort`` the node events and it sorts them into
a ``MinionInbox``: the master's messages, local requests (``raetsalt-call``, job
processes' ``publish.*``), link events.  Each serving step (``serve_master``,
``serve_requests``, ``poll``, ``serve_link``) returns the actions the job service, the
peer relay (``raetsalt.services.peer``) or Salt's bridge decided (``MinionAction``); the
outbound step hands them to ``perform``, which carries each out: a job process started
(``raetsalt.daemon.executor``, or Salt's zygote: ``raetsalt.daemon.saltminion``), a road
message to the master, an answer to a client yard, grains saved or reloaded.  The steps'
order is the flow's alone (``raetsalt.flo.passes`` runs them without ioflo's scheduler).

The adapter is ``Wakeable`` (the skedder's waiter watches it): the job pipes, the Salt
zygote's socket and the job service's timers.
"""

from __future__ import annotations

import logging
import os
import selectors
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, assert_never

from raetsalt import protocol as p
from raetsalt.daemon.executor import ForkExecutor
from raetsalt.daemon.grainsfile import load_grains, save_static_grains, static_grains_path
from raetsalt.daemon.inbox import StepInbox
from raetsalt.drivers.jobchild import after_result
from raetsalt.engine.events import Allowed, MessageReceived
from raetsalt.errors import LocalError
from raetsalt.execution.loader import Context, Loader
from raetsalt.execution.returners import deliver
from raetsalt.manor import LocalMessage
from raetsalt.node import Node, NodeEvent
from raetsalt.protocol import ToClient
from raetsalt.saltbridge.saltjob import salt_loader_returners
from raetsalt.services.jids import new_jid
from raetsalt.services.mineclock import MINE_FUN, MineClock
from raetsalt.services.minion import Action as MinionAction
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
    returner_fields,
)
from raetsalt.services.peer import PeerRelay
from raetsalt.services.progress import SHARE_RUNNING

log = logging.getLogger("raetsalt.daemon")

__all__ = ["MinionAction", "MinionAdapter", "MinionInbox"]

MAX_ORIGINS = 10_000
"""Jobs whose publishing master is remembered (oldest forgotten first: their returns
go to the main master)."""

NOT_AUTHENTICATED = (
    "Minion failed to authenticate with the master, has the minion key been accepted?"
)


_FROM_MASTER = frozenset({p.SHARE_FUN, p.SHARE_CLOCK, p.SHARE_PILLAR, *p.LANE_ANSWERS})


@dataclass(slots=True)
class MinionInbox(StepInbox):
    """A minion's node events sorted by the step that serves them (``MinionAdapter.sort``);
    each step empties its list but ``link`` (the flow's link step reads it last)."""

    master: list[MessageReceived] = field(default_factory=list)
    """The master's publications, clock, pillar and answers (road)."""
    requests: list[LocalMessage] = field(default_factory=list)
    """``raetsalt-call`` and job processes' ``publish.*`` requests (lane)."""
    link: list[NodeEvent] = field(default_factory=list)
    """The road's link events (join, allow, presence) and anything unhandled."""


class MinionAdapter:
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
        started = utcnow()
        offset = started.astimezone().utcoffset()
        self.jobs = MinionJobs(str(opts["id"]), grains if grains is not None
                               else load_grains(opts), estate=node.stack.road.name,
                               started=started.timestamp(),
                               utc_offset=int(offset.total_seconds()) if offset else 0)
        self.relay = PeerRelay(node.stack.road.name)
        self.mine = MineClock(opts)
        """When ``mine.update`` runs (``raetsalt.services.mineclock``)."""
        self._last_jid: str | None = None
        self._origin: dict[str, str] = {}
        """jid -> the master that published it (serving several masters at once)."""
        self._child_jobs: list[dict[str, Any]] = []
        """The other jobs at the last spawn (what the new job's saltutil.running sees)."""

    @staticmethod
    def new_inbox() -> MinionInbox:
        return MinionInbox()

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
                             self._timer_wait(), self._mine_wait()) if w is not None]
        return min(waits, default=None)

    def _mine_wait(self) -> float | None:
        timer = self.mine.get_timer()
        return None if timer is None else max(0.0, timer - self.node.clock())

    def _timer_wait(self) -> float | None:
        timer = self.jobs.get_timer()
        return None if timer is None else max(0.0, timer - self.node.clock())

    # -- what the flow's steps call (``flows/minion.flo`` says in which order) ------------

    def sort(self, events: Iterable[NodeEvent], inbox: MinionInbox) -> None:
        """Routing: the master's job messages, local requests, and the rest (link)."""
        master = self._master_name()
        for event in events:
            match event:
                case MessageReceived(remote=remote, body=dict() as body) if (
                        (remote == master or remote in self._other_masters())
                        and p.share_of(body) in _FROM_MASTER):
                    inbox.master.append(event)
                case LocalMessage(share=share) if (share == p.SHARE_CALL
                                                   or self.relay.serves(share)):
                    inbox.requests.append(event)
                case _:
                    inbox.link.append(event)

    def serve_master(self, messages: list[MessageReceived], now: float) -> list[MinionAction]:
        """From the master: publications (run here when meant for this minion and still
        in time), its clock, the pillar, answers to relayed ``publish.*`` requests."""
        actions: list[MinionAction] = []
        now_wall = self.utcnow().timestamp()
        for event in messages:
            share = p.share_of(event.body)
            if share == p.SHARE_FUN:
                if self.node.masters:
                    self._note_origin(event.body.get("jid"), event.remote)
                actions.extend(self.jobs.on_publish(event.body, now, now_wall))
            elif share == p.SHARE_CLOCK:
                actions.extend(self.jobs.on_clock(event.body, now, now_wall))
            elif share == p.SHARE_PILLAR:
                pillar = event.body.get("pillar")
                self.jobs.pillar = pillar if isinstance(pillar, dict) else {}
                if self.mine.on_pillar(self.jobs.pillar, now, self._mine_busy()):
                    actions.extend(self._mine_update())
                if self.bridge is not None:
                    self.bridge.set_pillar(self.jobs.pillar)
            else:
                assert share is not None
                actions.extend(self.relay.on_answer(share, event.body))
        messages.clear()
        return actions

    def serve_requests(self, messages: list[LocalMessage], now: float) -> list[MinionAction]:
        """Local requests: ``raetsalt-call``, and ``publish.*`` from job processes, which
        go to the master (whose ``peer``/``peer_run`` rules decide)."""
        actions: list[MinionAction] = []
        for event in messages:
            if event.share == p.SHARE_CALL:
                actions.extend(self._on_call(event))
            else:
                assert event.share is not None
                actions.extend(self.relay.on_request(event.source, event.share, event.body,
                                                     now, self.connected()))
        messages.clear()
        return actions

    def serve_link(self, events: list[NodeEvent]) -> list[MinionAction]:
        """A (re)connection to the master: ask for its clock, say hello with the grains."""
        master = self._master_name()
        others = self._other_masters()
        actions: list[MinionAction] = []
        for event in events:
            if isinstance(event, Allowed) and event.remote == master:
                actions.extend(self.jobs.ask_clock(self.utcnow().timestamp()))
                actions.extend(self._connected(master))
            elif isinstance(event, Allowed) and event.remote in others:
                # another master served at once: its own hello (clock from the main one)
                actions.extend(self._connected(event.remote))
        return actions

    def greet_master(self) -> list[MinionAction]:
        """The node serves another master whose session is already up (a failback):
        what a connection does (clock request, hello with the grains)."""
        return [*self.jobs.ask_clock(self.utcnow().timestamp()),
                *self._connected(self._master_name())]

    def poll(self, now: float) -> list[MinionAction]:
        """Time and the job processes: finished jobs become returns to the master and
        answers to the waiting ``raetsalt-call``, held publications meet their deadline,
        the Salt zygote's answers."""
        actions: list[MinionAction] = []
        if self.bridge is not None:
            actions.extend(self.bridge.poll(self.jobs))
        timer = self.jobs.get_timer()
        if timer is not None and timer <= now:
            actions.extend(self.jobs.handle_timer(now, self.utcnow().timestamp()))
        if self.mine.handle_timer(self.jobs.pillar, now, self._mine_busy()):
            actions.extend(self._mine_update())
        for jid, data in self.executor.poll():
            outcome = None
            if data is not None:
                try:
                    outcome = JobOutcome.from_wire_untrusted(data)
                except Exception:  # noqa: BLE001 - a child's garbage is a failed job
                    outcome = None
            actions.extend(self.jobs.on_finished(jid, outcome))
        return actions

    def perform(self, actions: Iterable[MinionAction]) -> None:
        """Carry out the steps' decisions (the flow's outbound step), and what they lead
        to (a job that cannot start is answered at once)."""
        todo = deque(actions)
        lane = False
        while todo:
            action = todo.popleft()
            match action:
                case Spawn(spec=spec):
                    todo.extend(self._spawn(spec))
                case ToMaster(body=body, to=to):
                    self._to_master(body, to)
                case ToClient(yard=yard, body=body):
                    lane = True
                    try:
                        self.node.manor.lane.send(body, yard)
                    except LocalError as exc:
                        log.debug("client %s gone: %s", yard, exc)
                        self.relay.forget_client(yard)
                case SaveGrains(grains=grains):
                    try:
                        save_static_grains(self.opts, grains)
                    except OSError as exc:
                        log.error("grains not saved to %s: %s", static_grains_path(self.opts),
                                  exc)
                case RefreshGrains():
                    if self.bridge is not None and self.bridge.active:
                        self.bridge.reload()  # the zygote reports Salt's grains again
                    else:
                        # The hello goes before the job's return: targeting sees the
                        # new grains.
                        todo.extendleft(reversed(self.jobs.set_grains(load_grains(self.opts))))
                case Refresh(what="pillar"):
                    self._to_master(p.road_message(self.jobs.estate, None,
                                                   p.SHARE_PILLAR_REFRESH))
                case Refresh():
                    if self.bridge is not None:
                        self.bridge.reload()
                case _:
                    assert_never(action)
        if lane:
            self.node.flush_lane()

    def close(self) -> None:
        self.executor.close()
        if self.bridge is not None:
            self.bridge.close()

    # -- internals ------------------------------------------------------------------------

    def _connected(self, master: str | None) -> list[MinionAction]:
        if self.bridge is not None and self.bridge.holds_hello():
            self.bridge.hello_due = True  # the hello carries Salt's grains once loaded
            self.jobs.hold_hello(master)
            return []
        return list(self.jobs.on_connected(master))

    def _master_name(self) -> str | None:
        uid = self.node.master
        if uid is None:
            return None
        try:
            return self.node.stack.road.remote(uid).name
        except LocalError:
            return None

    def _to_master(self, body: dict[str, Any], to: str | None = None) -> None:
        if self.node.master is None:
            return
        target: str | int = self.node.master
        if self.node.masters:
            jid = body.get("jid")
            origin = self._origin.get(jid) if isinstance(jid, str) else None
            if to is not None:
                target = to
            elif origin is not None:
                target = origin  # a return goes to the master that published the job
            elif p.share_of(body) == SHARE_RUNNING:
                for name in self._other_masters():  # each master asks about its own jobs
                    self._send(name, body)
        self._send(target, body)

    def _send(self, target: str | int, body: dict[str, Any]) -> None:
        try:
            self.node.stack.send(target, body)
        except LocalError as exc:
            log.warning("message for the master not sent: %s", exc)

    def _other_masters(self) -> set[str]:
        """The names of the masters served at once besides the main one."""
        if not self.node.masters:
            return set()
        names = set()
        for uid in self.node.masters:
            if uid == self.node.master:
                continue
            try:
                names.add(self.node.stack.road.remote(uid).name)
            except LocalError:
                continue
        return names

    def _note_origin(self, jid: object, master: str) -> None:
        if not isinstance(jid, str):
            return
        self._origin[jid] = master
        while len(self._origin) > MAX_ORIGINS:
            self._origin.pop(next(iter(self._origin)))

    def _on_call(self, event: LocalMessage) -> list[MinionAction]:
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

    def _mine_busy(self) -> bool:
        return self.mine.running is not None and self.mine.running in self.jobs.running

    def _mine_update(self) -> list[MinionAction]:
        jid = new_jid(self.utcnow(), self._last_jid)
        self._last_jid = jid
        self.mine.started(jid)
        return list(self.jobs.start_local(JobSpec(jid, MINE_FUN, [], self.jobs.minion_id,
                                                  "list", "", "", kind="local")))

    def _spawn(self, spec: JobSpec) -> list[MinionAction]:
        if self.bridge is not None and self.bridge.wants(spec.fun, self.loader.functions,
                                                          spec.arg):
            problem = self.bridge.submit(spec, self.jobs.grains, self.jobs.pillar)
            return [] if problem is None else list(self.jobs.on_spawn_failed(spec.jid, problem))
        if self._runs_here(spec):
            outcome = execute(self.loader, spec, self._context(spec, []), os.getpid())
            return list(self.jobs.on_finished(spec.jid, outcome))
        self._child_jobs = [j for j in self.jobs.proc_list() if j["jid"] != spec.jid]
        try:
            pid = self.executor.spawn(spec.jid, spec)
        except OSError as exc:
            log.error("job %s not started: %s", spec.jid, exc)
            return list(self.jobs.on_spawn_failed(spec.jid, str(exc)))
        self.jobs.on_started(spec.jid, pid)
        return []

    def _runs_here(self, spec: JobSpec) -> bool:
        """An ``instant`` function (``raetsalt.execution.loader.instant``) without a
        returner runs in this process: forking a job process would cost far more than
        the function itself (most of a ``test.ping``'s time and CPU)."""
        return (self.loader.is_instant(spec.fun) and not spec.ret
                and not self.opts.get("return"))

    def _run_in_child(self, spec: JobSpec) -> dict[str, Any]:
        """The job process: runs ``spec`` with a Context of this minion."""
        outcome = execute(self.loader, spec, self._context(spec, self._child_jobs),
                          os.getpid())
        opts = self.opts
        if (spec.ret or opts.get("return")) and spec.kind == "publish":
            after_result(partial(deliver, opts, returner_fields(spec), outcome.ret,
                                 fire_master=partial(self._fire, opts, master=True),
                                 salt_returners=salt_loader_returners(opts)))
        return outcome.to_wire()

    @staticmethod
    def _fire(opts: Mapping[str, Any], tag: str, data: Any, master: bool) -> bool:
        """Fire an event from a job: on the minion's bus, or (``master``) the master's."""
        from raetsalt.event import SaltEvent

        bus = SaltEvent("minion", sock_dir=opts["sock_dir"], opts={"id": opts["id"]})
        try:
            payload = data if isinstance(data, dict) else {"data": data}
            if master:
                return bus.fire_master(payload, tag)
            return bus.fire_event(payload, tag)
        finally:
            bus.destroy()

    def _context(self, spec: JobSpec, jobs: list[dict[str, Any]]) -> Context:
        """The Context a job of ``spec`` runs with; ``jobs``: the other running jobs."""
        from raetsalt.drivers.laneclient import CommandClient

        others = list(jobs)
        opts = dict(self.opts)

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
            fire_event=partial(self._fire, opts, master=False),
            fire_master=partial(self._fire, opts, master=True),
            jobs=lambda: [dict(j) for j in others],
            kill_job=kill_job,
            master_client=lambda: CommandClient("minion", opts["sock_dir"], str(opts["id"])),
            extras={"pillar": dict(self.jobs.pillar)},
        )
        return ctx
