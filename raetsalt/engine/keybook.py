"""The road's key records in memory: roles, denied pairs, and decisions on them.

``KeyBook`` answers joins with the pure ``KeyPolicy`` over the records the keep held at
start plus every change since, and carries out operator actions
(``raetsalt.keep.policy.operator_change``).  It never touches the keep: each change is
reported as a persistence event (``RoleChanged``, ``RoleRemoved``, ``DeniedChanged``)
for the driver to write, and only when a record really changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from raetsalt.engine.events import (
    DeniedChanged,
    Event,
    RoleChanged,
    RoleRemoved,
)
from raetsalt.keep.policy import KeyChange, KeyDecision, KeyPolicy, Pair, operator_change
from raetsalt.keep.records import Acceptance, KeyRef, RoleRecord


class KeyBook:
    """Role records and denied pairs of one road (module docstring)."""

    def __init__(
        self,
        policy: KeyPolicy,
        *,
        roles: Iterable[RoleRecord] = (),
        denied: Mapping[str, Iterable[Pair]] | None = None,
        emit: Callable[[Event], None],
    ) -> None:
        self.policy = policy
        self.roles = {record.role: record for record in roles}
        self.denied = {role: tuple(pairs) for role, pairs in (denied or {}).items() if pairs}
        self._emit = emit

    def accepted(self) -> list[str]:
        return sorted(r.role for r in self.roles.values() if r.acceptance is Acceptance.ACCEPTED)

    def decide(self, role: str, verhex: str, pubhex: str) -> KeyDecision:
        """The policy's answer for ``role`` presenting these keys, recorded."""
        stored = self.roles.get(role)
        decision = self.policy.decide(role, verhex, pubhex, stored, self.denied.get(role, ()))
        self._apply(role, decision.record, decision.denied)
        return decision

    def change(self, action: str, ref: KeyRef) -> KeyChange | None:
        """An operator's ``action`` on the key ``ref``; None if it is not stored so."""
        change = operator_change(
            action, ref, self.roles.get(ref.role), self.denied.get(ref.role, ())
        )
        if change is None:
            return None
        self._apply(ref.role, change.record, change.denied, remove=change.record is None)
        return change

    def acceptance(self, role: str) -> Acceptance | None:
        record = self.roles.get(role)
        return None if record is None else record.acceptance

    def _apply(
        self,
        role: str,
        record: RoleRecord | None,
        denied: tuple[Pair, ...] | None,
        *,
        remove: bool = False,
    ) -> None:
        before = self.roles.get(role)
        if remove:
            if before is not None:
                del self.roles[role]
                self._emit(RoleRemoved(role))
        elif record is not None and record != before:
            self.roles[role] = record
            self._emit(RoleChanged(record))
        if denied is not None and denied != self.denied.get(role, ()):
            if denied:
                self.denied[role] = denied
            else:
                self.denied.pop(role, None)
            self._emit(DeniedChanged(role, denied))
