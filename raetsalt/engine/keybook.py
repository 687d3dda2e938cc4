"""The road's key records in memory: roles, denied pairs, and decisions on them.

``KeyBook`` answers joins with the pure ``KeyPolicy`` over the records the keep held at
start plus every change since, and carries out operator actions
(``raetsalt.keep.policy.operator_change``).  It never touches the keep: each change is
reported as a persistence event (``RoleChanged``, ``RoleRemoved``, ``DeniedChanged``)
for the driver to write, and only when a record really changed.

It also holds the line on unauthenticated growth: at most ``max_pending`` keys wait for
an operator; a new id beyond that is refused (``decide`` returns None) and the first
refusal after the limit is reached is reported once (``PendingLimitReached``).  A role
whose record the keep could not read is *broken*: refused until an operator deletes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from raetsalt.engine.events import (
    DeniedChanged,
    Event,
    PendingLimitReached,
    RoleChanged,
    RoleRemoved,
)
from raetsalt.keep.policy import Action, KeyChange, KeyDecision, KeyPolicy, Pair, operator_change
from raetsalt.keep.records import Acceptance, KeyRef, KeyState, RoleRecord


class KeyBook:
    """Role records and denied pairs of one road (module docstring)."""

    def __init__(
        self,
        policy: KeyPolicy,
        *,
        roles: Iterable[RoleRecord] = (),
        denied: Mapping[str, Iterable[Pair]] | None = None,
        broken: Mapping[str, str] | None = None,
        max_pending: int,
        emit: Callable[[Event], None],
    ) -> None:
        self.policy = policy
        self.roles = {record.role: record for record in roles}
        self.denied = {role: tuple(pairs) for role, pairs in (denied or {}).items() if pairs}
        self.broken = dict(broken or {})
        """role -> why its record could not be read."""
        self.max_pending = max_pending
        self.pending = sum(1 for r in self.roles.values() if r.acceptance is Acceptance.PENDING)
        self._emit = emit
        self._limit_reported = False

    def accepted(self) -> list[str]:
        return sorted(r.role for r in self.roles.values() if r.acceptance is Acceptance.ACCEPTED)

    def decide(self, role: str, verhex: str, pubhex: str) -> KeyDecision | None:
        """The policy's answer for ``role`` presenting these keys, recorded; None when it
        would add a pending key beyond ``max_pending`` (nothing is recorded then)."""
        stored = self.roles.get(role)
        decision = self.policy.decide(role, verhex, pubhex, stored, self.denied.get(role, ()))
        record = decision.record
        if (
            record is not None
            and record.acceptance is Acceptance.PENDING
            and (stored is None or stored.acceptance is not Acceptance.PENDING)
            and self.pending >= self.max_pending
        ):
            if not self._limit_reported:
                self._limit_reported = True
                self._emit(PendingLimitReached(self.max_pending))
            return None
        self._apply(role, record, decision.denied)
        return decision

    def change(self, action: str, ref: KeyRef) -> KeyChange | None:
        """An operator's ``action`` on the key ``ref``; None if it is not stored so."""
        if ref.role in self.broken and action == Action.DELETE and ref.state is not KeyState.DENIED:
            # The record could not be read, so no listing can show its keys: deleting the
            # role by name is how an operator repairs it.
            del self.broken[ref.role]
            self._emit(RoleRemoved(ref.role))
            return KeyChange(None, self.denied.get(ref.role, ()), True)
        if ref.role in self.broken and action == Action.GEN_ACCEPT:
            return None  # it has a record, unreadable: not an id without a key
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
        after = self.roles.get(role)
        self.pending += _is_pending(after) - _is_pending(before)
        if self.pending < self.max_pending:
            self._limit_reported = False
        if denied is not None and denied != self.denied.get(role, ()):
            if denied:
                self.denied[role] = denied
            else:
                self.denied.pop(role, None)
            self._emit(DeniedChanged(role, denied))


def _is_pending(record: RoleRecord | None) -> int:
    return int(record is not None and record.acceptance is Acceptance.PENDING)
