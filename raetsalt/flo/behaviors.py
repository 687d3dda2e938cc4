"""Thin ioflo behaviours of the master and minion flows (``flows/*.flo``).

Each behaviour makes one call into ``raetsalt.node.Node`` or the ioflo-free helpers of
``raetsalt.daemon.service`` and copies the outcome into shares, so the flows can sequence
on it.  A behaviour never raises into the skedder (an exception there would skip the
failing framer's exit actions): it logs, sets ``.raetsalt.status.failure`` and the exit
code, and the flow goes to its failure frame.

Share layout (every house; absolute paths)::

    .skedder.waiter       value: raetsalt.flo.skedder.Waiter    preloaded by SelectSkedder;
                                 the node is watched there, so a datagram wakes the loop
    .raetsalt.opts        value: the opts dict                  preloaded by the daemon
                                 (opts['__role'] says 'master' or 'minion')
    .raetsalt.node        value: raetsalt.node.Node | None      set by `raetsalt node open`
    .raetsalt.watch       value: MinionLink (minion) or MasterWatch (master)
    .raetsalt.jobs        value: MinionService or MasterService (raetsalt.daemon.jobs):
                                 jobs, returns, runners, the CLIs' requests; watched
                                 by the waiter too (job pipes, job timers)
    .raetsalt.status      fields:
        ready     bool    the node is open and serving
        state     str     minion: starting|connecting|unreachable|pending|connected|
                          lost|rejected;
                          master: serving
        connected bool    minion: the session with the master is up and alive
        pending   bool    minion: its key is pending on the master
        rejected  bool    minion: the master rejected/denied its key and it must exit
        failure   str     why the daemon cannot go on ('' while fine)
        events    int     road events and lane messages handled so far
    .raetsalt.signal      fields: stop (bool), signum (int)      set by the daemon's
                          SIGTERM/SIGINT handler; the flows shut down on it
    .raetsalt.exit        value: int                             the process exit code

Behaviour names (``do raetsalt node open`` -> ``RaetsaltNodeOpen``):

``raetsalt node open``       enter: open road + manor from opts, watch it, create the
                             watcher and the job service; status.ready
``raetsalt minion connect``  enter: resolve the master and keep a session with it
``raetsalt node service``    recur: service the node, feed the job service and the
                             watcher, update status
``raetsalt minion resolve``  recur: while not connected, re-resolve the master's name
``raetsalt node close``      exit/enter: flush once, unwatch and close the node
``raetsalt exit``            enter: ``with code N`` sets .raetsalt.exit (kept if already
                             non-zero)
"""

from __future__ import annotations

import logging
from typing import Any

from ioflo.aid.odicting import odict
from ioflo.base.doing import Doer

from raetsalt.daemon.jobs import MasterService, MinionService
from raetsalt.daemon.service import (
    EXIT_FAILURE,
    EXIT_REJECTED,
    MasterWatch,
    MinionLink,
    open_node,
)
from raetsalt.node import Node

log = logging.getLogger("raetsalt.daemon")

_STATUS = odict(
    ready=False,
    state="starting",
    connected=False,
    pending=False,
    rejected=False,
    failure="",
    events=0,
)

_IOINITS = odict(
    waiter=odict(ipath=".skedder.waiter", ival=None),
    opts=odict(ipath=".raetsalt.opts", ival=None),
    node=odict(ipath=".raetsalt.node", ival=None),
    watch=odict(ipath=".raetsalt.watch", ival=None),
    jobs=odict(ipath=".raetsalt.jobs", ival=None),
    status=odict(ipath=".raetsalt.status", ival=_STATUS),
    exit=odict(ipath=".raetsalt.exit", ival=0),
    signal=odict(ipath=".raetsalt.signal", ival=odict(stop=False, signum=0)),
)


class _RaetsaltDoer(Doer):
    """Common shares and failure handling (not registered under a flo name)."""

    Ioinits = _IOINITS

    # Attributes ioflo sets from Ioinits (Shares).
    waiter: Any
    opts: Any
    node: Any
    watch: Any
    jobs: Any
    status: Any
    exit: Any
    signal: Any

    def fail(self, message: str, code: int = EXIT_FAILURE) -> None:
        log.error("%s", message)
        self.status.update(failure=message)
        if not self.exit.value:
            self.exit.value = code

    def current_node(self) -> Node | None:
        node: Node | None = self.node.value
        return node


class RaetsaltNodeOpen(_RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        opts = self.opts.value
        if opts is None:
            self.fail("no opts preloaded at .raetsalt.opts")
            return
        role = opts["__role"]
        try:
            node = open_node(opts, role)
        except Exception as exc:  # noqa: BLE001 - reported, the flow goes to failure
            self.fail(f"cannot start the {role}: {exc}")
            return
        self.node.value = node
        if self.waiter.value is not None:
            self.waiter.value.watch(node)
        watch = MinionLink(node, opts) if role == "minion" else MasterWatch(node, opts)
        self.watch.value = watch
        try:
            if isinstance(watch, MinionLink):
                link = watch
                jobs: Any = MinionService(node, opts, lambda: link.state == "connected")
            else:
                jobs = MasterService(node, opts)
        except Exception as exc:  # noqa: BLE001 - reported, the flow goes to failure
            self.fail(f"cannot start the {role}'s job service: {exc}")
            return
        self.jobs.value = jobs
        if self.waiter.value is not None:
            self.waiter.value.watch(jobs)
        state = "starting" if role == "minion" else "serving"
        self.status.update(ready=True, state=state)
        log.info(
            "raetsalt-%s %s serving on %s:%s (keep %s, bus %s)",
            role,
            opts["id"],
            *node.stack.address,
            node.stack.keep,
            node.manor_path,
        )


class RaetsaltMinionConnect(_RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        link = self.watch.value
        if not isinstance(link, MinionLink):
            self.fail("raetsalt minion connect: no minion node is open")
            return
        try:
            link.connect()
        except Exception as exc:  # noqa: BLE001
            self.fail(f"cannot connect to the master: {exc}")
            return
        self.status.update(state=link.state)


def _serve_jobs(jobs: Any, node: Node, events: list[Any]) -> list[Any]:
    """Give ``events`` to the job service (if any); road messages it queued leave now,
    with one more service round, rather than at the next wake-up (an alive period away)."""
    if jobs is None:
        return events
    events = jobs.handle(events)
    if jobs.sent_road:
        jobs.sent_road = False
        events.extend(jobs.handle(node.service_ready()))
    return events


class RaetsaltNodeService(_RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        node = self.current_node()
        if node is None:
            return
        watch = self.watch.value
        jobs = self.jobs.value
        try:
            events = _serve_jobs(jobs, node, node.service_ready())
            if isinstance(watch, MasterWatch):
                # Events the watcher fires on the bus leave with one more service round.
                rounds = 0
                while watch.handle(events) and rounds < 3:
                    # the job service's messages arrive in these rounds too
                    events = _serve_jobs(jobs, node, node.service_ready())
                    rounds += 1
            elif isinstance(watch, MinionLink):
                watch.handle(events)
                self.status.update(
                    state=watch.state,
                    connected=watch.state == "connected",
                    pending=watch.state == "pending",
                    rejected=watch.exit_code == EXIT_REJECTED,
                )
                if watch.exit_code is not None and not self.exit.value:
                    self.exit.value = watch.exit_code
            if events:
                self.status.update(events=self.status.data.events + len(events))
        except Exception as exc:  # noqa: BLE001
            log.exception("servicing the node failed")
            self.fail(f"servicing the node failed: {exc}")


class RaetsaltMinionResolve(_RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        link = self.watch.value
        if isinstance(link, MinionLink):
            try:
                link.reresolve()
            except Exception as exc:  # noqa: BLE001 - a lookup problem must not stop us
                log.warning("re-resolving the master failed: %s", exc)


class RaetsaltNodeClose(_RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        node = self.current_node()
        if node is None:
            return
        self.node.value = None
        jobs = self.jobs.value
        if jobs is not None:
            self.jobs.value = None
            if self.waiter.value is not None:
                self.waiter.value.unwatch(jobs)
            try:
                jobs.close()
            except Exception:  # noqa: BLE001
                log.debug("closing the job service failed", exc_info=True)
        try:
            if node.stack.road.has_output():
                node.service_ready()  # what is queued goes out before the socket closes
        except Exception:  # noqa: BLE001
            log.debug("final flush failed", exc_info=True)
        if self.waiter.value is not None:
            self.waiter.value.unwatch(node)
        node.close()
        self.status.update(ready=False)
        log.info("%s stopped", node.stack.name if node.stack.name else "node")


class RaetsaltExit(_RaetsaltDoer):
    def action(self, code: int = 0, **kwa: Any) -> None:
        if not self.exit.value:
            self.exit.value = int(code)
