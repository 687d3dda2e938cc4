"""The ioflo behaviours of the daemon flows (``flows/master.flo``, ``flows/minion.flo``):
the life cycle here, the serving steps in ``raetsalt.flo.steps`` (imported here, so
``behaviors=["raetsalt.flo.behaviors"]`` registers them all).  Shares: ``raetsalt.flo.doer``.

Each behaviour makes one call into ``raetsalt.node.Node`` or the ioflo-free objects of
``raetsalt.daemon`` and copies the outcome into shares, so the flows decide on it.

``raetsalt node open``       enter: open road + manor from opts, watch it, create the
                             link (minion) or watcher (master), the job service and the
                             step queues; status.ready
``raetsalt minion connect``  enter: resolve the master and keep a session with it
``raetsalt minion resolve``  recur: while not connected, re-resolve the master's name
``raetsalt minion state``    enter: ``with state S``: the link frame the flow entered
                             (status.state and its flags; logged once per change)
``raetsalt node close``      exit/enter: flush, give the bus's listeners up to
                             ``DRAIN_TIMEOUT`` s to take their queued events, unwatch
                             and close the node
``raetsalt exit``            enter: ``with code N`` sets .raetsalt.exit (kept if already
                             non-zero)
"""

from __future__ import annotations

import logging
from typing import Any

from raetsalt.daemon.master_adapter import MasterAdapter
from raetsalt.daemon.minion_adapter import MinionAdapter
from raetsalt.daemon.service import MasterWatch, MinionLink, open_node
from raetsalt.drivers.udp import format_ha
from raetsalt.flo import steps  # noqa: F401  (registers the serving steps)
from raetsalt.flo.doer import RaetsaltDoer

log = logging.getLogger("raetsalt.daemon")

DRAIN_TIMEOUT = 2.0
"""Seconds a stopping daemon waits for bus listeners whose sockets are full."""


class RaetsaltNodeOpen(RaetsaltDoer):
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
            jobs: MasterAdapter | MinionAdapter
            if isinstance(watch, MinionLink):
                link = watch
                jobs = MinionAdapter(node, opts, lambda: link.connected)
                self.link.update(watch.facts())
            else:
                jobs = MasterAdapter(node, opts)
            self.routed.value = jobs.new_inbox()
        except Exception as exc:  # noqa: BLE001 - reported, the flow goes to failure
            self.fail(f"cannot start the {role}'s job service: {exc}")
            return
        self.inbox.value = []
        self.outbox.value = []
        self.jobs.value = jobs
        if self.waiter.value is not None:
            self.waiter.value.watch(jobs)
        state = "starting" if role == "minion" else "serving"
        self.status.update(ready=True, state=state)
        log.info(
            "raetsalt-%s %s serving on %s (keep %s, bus %s%s)",
            role,
            opts["id"],
            format_ha(node.stack.address),
            node.stack.keep,
            node.manor_path,
            "" if node.stack.accept == "anyone" else "; datagrams from its masters only",
        )


class RaetsaltMinionConnect(RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        link = self.watch.value
        if not isinstance(link, MinionLink):
            self.fail("raetsalt minion connect: no minion node is open")
            return
        try:
            link.connect()
        except Exception as exc:  # noqa: BLE001
            self.fail(f"cannot connect to the master: {exc}")


class RaetsaltMinionResolve(RaetsaltDoer):
    def action(self, **kwa: Any) -> None:
        link = self.watch.value
        if isinstance(link, MinionLink):
            try:
                link.reresolve()
            except Exception as exc:  # noqa: BLE001 - a lookup problem must not stop us
                log.warning("re-resolving the master failed: %s", exc)


class RaetsaltMinionState(RaetsaltDoer):
    def action(self, state: str = "connecting", **kwa: Any) -> None:
        link = self.watch.value
        if isinstance(link, MinionLink):
            link.report(state)
        self.status.update(state=state, connected=state == "connected",
                           pending=state == "pending", rejected=state == "rejected")


class RaetsaltNodeClose(RaetsaltDoer):
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
            node.flush()  # what is queued goes out before the sockets close
            if not node.drain_bus(DRAIN_TIMEOUT):
                log.warning("bus listeners did not take every queued event within %g s "
                            "of stopping", DRAIN_TIMEOUT)
        except Exception:  # noqa: BLE001
            log.debug("final flush failed", exc_info=True)
        if self.waiter.value is not None:
            self.waiter.value.unwatch(node)
        node.close()
        self.status.update(ready=False)
        log.info("%s stopped", node.stack.name if node.stack.name else "node")


class RaetsaltExit(RaetsaltDoer):
    def action(self, code: int = 0, **kwa: Any) -> None:
        if not self.exit.value:
            self.exit.value = int(code)
