"""The shares every raetsalt behaviour sees, and how a behaviour fails.

Share layout (every house; absolute paths)::

    .skedder.waiter   value: raetsalt.flo.skedder.Waiter   preloaded by SelectSkedder; the
                             node and the job service are watched there, so a datagram,
                             a job pipe or a due timer wakes the loop
    .raetsalt.opts    value: the opts dict                 preloaded by the daemon
                             (opts['__role'] says 'master' or 'minion')
    .raetsalt.node    value: raetsalt.node.Node | None     set by `raetsalt node open`
    .raetsalt.watch   value: MinionLink (minion) or MasterWatch (master)
    .raetsalt.jobs    value: MinionAdapter or MasterAdapter (raetsalt.daemon.minion_adapter,
                             raetsalt.daemon.master_adapter)
    .raetsalt.inbox   value: list of node events           the receive steps append,
                             the route step empties it
    .raetsalt.routed  value: MasterInbox | MinionInbox     the route step sorts into it,
                             each serving step empties its part
    .raetsalt.outbox  value: list of actions               the serving steps append,
                             `raetsalt outbound` carries them out and empties it
    .raetsalt.link    fields (minion): connected, was_connected, pending, rejected,
                             unreachable, retry          facts for the link frames
    .raetsalt.status  fields:
        ready     bool    the node is open and serving
        state     str     minion: starting|connecting|unreachable|pending|connected|
                          lost|rejected (the link frame it is in); master: serving
        connected bool    minion: the session with the master is up and alive
        pending   bool    minion: its key is pending on the master
        rejected  bool    minion: the master rejected/denied its key
        failure   str     why the daemon cannot go on ('' while fine)
        events    int     road events and lane messages routed so far
        step_failures int a step raised (contained: its input dropped, logged)
    .raetsalt.signal  fields: stop (bool), signum (int)    set by the daemon's
                             SIGTERM/SIGINT handler; the flows shut down on it
    .raetsalt.exit    value: int                           the process exit code

A behaviour never raises into the skedder (an exception there would skip the failing
framer's exit actions): it logs, sets ``.raetsalt.status.failure`` and the exit code, and
the flow goes to its failure frame.
"""

from __future__ import annotations

import logging
from typing import Any

from ioflo.aid.odicting import odict
from ioflo.base.doing import Doer

from raetsalt.daemon.service import EXIT_FAILURE
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
    step_failures=0,
)
_LINK = odict(connected=False, was_connected=False, pending=False, rejected=False,
              unreachable=False, retry=False)

IOINITS = odict(
    waiter=odict(ipath=".skedder.waiter", ival=None),
    opts=odict(ipath=".raetsalt.opts", ival=None),
    node=odict(ipath=".raetsalt.node", ival=None),
    watch=odict(ipath=".raetsalt.watch", ival=None),
    jobs=odict(ipath=".raetsalt.jobs", ival=None),
    inbox=odict(ipath=".raetsalt.inbox", ival=None),
    routed=odict(ipath=".raetsalt.routed", ival=None),
    outbox=odict(ipath=".raetsalt.outbox", ival=None),
    link=odict(ipath=".raetsalt.link", ival=_LINK),
    status=odict(ipath=".raetsalt.status", ival=_STATUS),
    exit=odict(ipath=".raetsalt.exit", ival=0),
    signal=odict(ipath=".raetsalt.signal", ival=odict(stop=False, signum=0)),
)
"""Every share above, for ``Ioinits`` (a behaviour resolves them all: one layout)."""


class RaetsaltDoer(Doer):
    """Common shares and failure handling (not registered under a flo name)."""

    Ioinits = IOINITS

    # Attributes ioflo sets from Ioinits (Shares).
    waiter: Any
    opts: Any
    node: Any
    watch: Any
    jobs: Any
    inbox: Any
    routed: Any
    outbox: Any
    link: Any
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
