"""The minion's count of failed joins per master (``MasterSwitch.note``): a join that
timed out counts towards moving on, a master's busy answer does not (it is alive and
says when to come back; moving would take the crowd to the next master)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from raetsalt.daemon.masterswitch import FAILED_JOINS, MasterSwitch
from raetsalt.engine.events import Joined, TransactionFailed
from raetsalt.services.masters import MasterChoice


def switch() -> MasterSwitch:
    remote = SimpleNamespace(name="ma")
    road = SimpleNamespace(remote=lambda uid: remote)
    node: Any = SimpleNamespace(stack=SimpleNamespace(road=road), clock=lambda: 0.0)
    made = MasterSwitch(node, {}, MasterChoice(["a:1", "b:1"]), lambda uid, ha: None)
    made.uids["a:1"] = 7
    return made


def test_busy_answers_do_not_count_as_failed_joins() -> None:
    made = switch()
    made.note([TransactionFailed("ma", "join", "busy")] * (FAILED_JOINS + 3))
    assert made.failures.get(7, 0) == 0
    made.note([TransactionFailed("ma", "join", "timeout")] * FAILED_JOINS)
    assert made.failures[7] == FAILED_JOINS
    made.note([Joined("ma", initiator=True)])
    assert made.failures[7] == 0
