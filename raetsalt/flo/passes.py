"""A flow's serving steps, run once per call without ioflo's skedder.

The order of a daemon's work is stated once, by the ``do`` lines of its flow's
``serving`` frame (``flows/master.flo``, ``flows/minion.flo``).  ``FlowPass`` reads them
and runs the same behaviours (``raetsalt.flo.steps``) on shares of its own, one pass per
``run()``: for a loop of one's own (a benchmark of many minions in one process, a test
with a real node), which then does what the daemon does, in its order.
"""

from __future__ import annotations

from typing import Any

from ioflo.base.storing import Store

from raetsalt.daemon.master_adapter import MasterAdapter
from raetsalt.daemon.minion_adapter import MinionAdapter
from raetsalt.flo import steps
from raetsalt.flo.doer import IOINITS, RaetsaltDoer
from raetsalt.node import Node


def serving_steps(flow: str) -> list[str]:
    """The behaviours the ``serving`` frame of the FloScript text ``flow`` runs each
    iteration (its ``recur`` context's ``do`` lines), in order: ``['raetsalt lane
    receive', ...]``."""
    found: list[str] = []
    frame = context = ""
    for raw in flow.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] == "frame":
            frame, context = words[1] if len(words) > 1 else "", ""
        elif words[0] in ("enter", "recur", "exit", "precur", "renter", "rexit", "benter",
                          "bexit"):
            context = words[0]
        elif words[0] == "do" and frame == "serving" and context == "recur":
            found.append(" ".join(words[1:]))
    return found


def step_class(name: str) -> type[RaetsaltDoer]:
    """The behaviour ``do <name>`` runs (ioflo's name: the words capitalized, joined)."""
    cls = getattr(steps, "".join(word.capitalize() for word in name.split()), None)
    if not (isinstance(cls, type) and issubclass(cls, RaetsaltDoer)):
        raise ValueError(f"no serving step is called {name!r}")
    return cls


class FlowPass:
    """The serving steps of ``flow`` (FloScript text) over ``node`` and its adapter."""

    def __init__(self, flow: str, node: Node, jobs: MasterAdapter | MinionAdapter,
                 watch: Any = None) -> None:
        self.store = Store(stamp=0.0)
        values: dict[str, Any] = {"node": node, "jobs": jobs, "watch": watch, "inbox": [],
                                  "outbox": [], "routed": jobs.new_inbox()}
        self.names = serving_steps(flow)
        self.steps = [step_class(name)(store=self.store) for name in self.names]
        for key, init in IOINITS.items():
            share = self.store.create(init["ipath"])
            ival = values.get(key, init["ival"])
            share.create(dict(ival) if isinstance(ival, dict) else {"value": ival})
            for step in self.steps:
                setattr(step, key, share)

    def run(self) -> None:
        """One pass: every step once, in the flow's order."""
        for step in self.steps:
            step.action()

    def share(self, name: str) -> Any:
        """The share ``.raetsalt.<name>`` of this pass (``routed``, ``link``, ``status``)."""
        return self.store.fetch(f".raetsalt.{name}")
