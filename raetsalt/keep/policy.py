"""Key acceptance as pure decisions: who may join, and what an operator's action changes.

Nothing here reads or writes anything.  ``KeyPolicy.decide`` answers "role R presents
keys (V, P): accepted, pending or rejected, and what must be recorded?" from the stored
record of R and its denied pairs; the road applies that to its records in memory and
reports the changes for the keep, and the keep's own ``status_role`` applies it to files.
``operator_change`` does the same for salt-key's accept / reject / delete.

The table follows raet's with deliberate changes, closer to Salt's ``_auth``
(docs/keys.md explains it for operators)::

    stored role                never      once       always
    none (first sight)         PENDING*   ACCEPTED*  ACCEPTED*
    accepted, same keys        ACCEPTED   ACCEPTED   ACCEPTED
    accepted, other keys       REJECTED+  REJECTED+  REJECTED+   (raet: always -> accepted)
    pending, same keys         PENDING    ACCEPTED*  ACCEPTED*
    pending, other keys        REJECTED+  REJECTED+  REJECTED+   (raet: always -> accepted)
    rejected, any keys         REJECTED   REJECTED   REJECTED    (raet: always -> accepted)

``*`` the role record is written; ``+`` the presented pair is recorded as *denied* for the
role (Salt's "denied" state) and the stored record is left alone.

* Auto mode never overrides a stored decision, so a known identity cannot be taken over
  by whoever presents new keys (raet Q7), and an operator's rejection sticks.
* A pending role presented with other keys is denied, not replaced by the newest keys:
  otherwise anyone could swap the key an operator is about to accept.
* As a consequence ONCE and ALWAYS behave identically.
* At most ``MAX_DENIED_PER_ROLE`` distinct pairs are remembered per role (oldest
  dropped), because joins are unauthenticated and random keys must not fill the disk.
  An already denied pair changes nothing.

A master of a cluster asks the cluster first (``shared``): an id the cluster's operators
accepted or rejected with these very keys is recorded so here too, without asking again;
an id this master holds no record of, that the cluster holds accepted or pending under
other keys (``taken``), is denied as if this master held that record.

The master's options on top (Salt's ``open_mode``, ``autosign_file``,
``autoreject_file``): ``open_mode`` accepts whatever is presented (the keys replace the
stored ones and the role's denied pairs are forgotten); for a new id, or a pending one
presenting the same keys, ``autoreject`` is asked first (recorded rejected), then
``autosign`` (recorded accepted).  A stored acceptance or rejection is never changed by
either file.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from raetsalt.keep.records import Acceptance, AutoMode, KeyRef, KeyState, RoleRecord

MAX_DENIED_PER_ROLE = 8

Pair = tuple[str, str]


@dataclass(frozen=True, slots=True)
class KeyDecision:
    """The answer to a join, and what to record for it."""

    acceptance: Acceptance
    record: RoleRecord | None = None
    """The role's new record (None: unchanged)."""
    denied: tuple[Pair, ...] | None = None
    """The role's new denied pairs (None: unchanged)."""
    denial: bool = False
    """Rejected because the role is known with other keys (Salt's *denied*)."""
    unpinned: bool = False
    """Rejected because the key is not the pinned one (``KeyPolicy.pin``)."""


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """How keys are accepted (module docstring).  ``autosign``/``autoreject`` answer
    "does this id match the file?" and are asked only for undecided ids."""

    auto: AutoMode = AutoMode.NEVER
    open_mode: bool = False
    autosign: Callable[[str], bool] | None = None
    autoreject: Callable[[str], bool] | None = None
    pin: Callable[[str], bool] | None = None
    """Is this verify key (hex) the one configured?  Others are rejected before anything
    else and nothing is recorded for them (a minion's ``master_finger``)."""
    only: Callable[[str, str], bool] | None = None
    """Are these (verify, public) keys the only ones this road accepts?  Others are
    rejected before anything else and nothing is recorded for them (the masters' own
    road: the cluster's keys)."""
    shared: Callable[[str, str, str], Acceptance | None] | None = None
    """The cluster's decision on a role presenting these keys (accepted or rejected by
    an operator on another master), asked first for undecided ids; None: no decision."""
    taken: Callable[[str, str, str], bool] | None = None
    """Does the cluster hold this role accepted or pending under other keys than these?
    Asked for a role with no record here: then the keys are denied."""

    def decide(
        self,
        role: str,
        verhex: str,
        pubhex: str,
        stored: RoleRecord | None,
        denied: Sequence[Pair] = (),
    ) -> KeyDecision:
        keys = (verhex, pubhex)
        if self.pin is not None and not self.pin(verhex):
            return KeyDecision(Acceptance.REJECTED, unpinned=True)
        if self.only is not None and not self.only(verhex, pubhex):
            return KeyDecision(Acceptance.REJECTED, unpinned=True)
        if self.open_mode:
            if stored is not None and (stored.acceptance, stored.verhex, stored.pubhex) == (
                Acceptance.ACCEPTED,
                verhex,
                pubhex,
            ):
                return KeyDecision(Acceptance.ACCEPTED)
            record = RoleRecord(role, Acceptance.ACCEPTED, verhex, pubhex)
            return KeyDecision(Acceptance.ACCEPTED, record, () if denied else None)
        undecided = stored is None or (
            stored.acceptance is Acceptance.PENDING and (stored.verhex, stored.pubhex) == keys
        )
        if undecided and self.shared is not None:
            verdict = self.shared(role, verhex, pubhex)
            if verdict in (Acceptance.ACCEPTED, Acceptance.REJECTED):
                return KeyDecision(verdict, RoleRecord(role, verdict, verhex, pubhex))
        if stored is None and self.taken is not None and self.taken(role, verhex, pubhex):
            return _deny(keys, denied)
        if undecided:
            for ask, verdict in (
                (self.autoreject, Acceptance.REJECTED),
                (self.autosign, Acceptance.ACCEPTED),
            ):
                if ask is not None and ask(role):
                    return KeyDecision(verdict, RoleRecord(role, verdict, verhex, pubhex))
        if stored is None:
            acceptance = Acceptance.PENDING if self.auto is AutoMode.NEVER else Acceptance.ACCEPTED
            return KeyDecision(acceptance, RoleRecord(role, acceptance, verhex, pubhex))
        if stored.acceptance is Acceptance.REJECTED:
            return KeyDecision(Acceptance.REJECTED)
        if (stored.verhex, stored.pubhex) != keys:
            return _deny(keys, denied)
        if stored.acceptance is Acceptance.PENDING and self.auto is not AutoMode.NEVER:
            return KeyDecision(
                Acceptance.ACCEPTED, RoleRecord(role, Acceptance.ACCEPTED, verhex, pubhex)
            )
        return KeyDecision(stored.acceptance)


def _deny(keys: Pair, denied: Sequence[Pair]) -> KeyDecision:
    """Refused as a key change: the pair joins the role's denied pairs (newest kept)."""
    if keys in denied:
        return KeyDecision(Acceptance.REJECTED, denial=True)
    return KeyDecision(
        Acceptance.REJECTED, denied=(*denied, keys)[-MAX_DENIED_PER_ROLE:], denial=True
    )


class Action:
    """The operator actions of salt-key."""

    ACCEPT = "accept"
    REJECT = "reject"
    DELETE = "delete"
    GEN_ACCEPT = "gen_accept"
    """Salt's ``key.gen_accept``: keys the master made for an id it holds no key of,
    recorded accepted."""
    ALL = (ACCEPT, REJECT, DELETE, GEN_ACCEPT)


@dataclass(frozen=True, slots=True)
class KeyChange:
    """What an operator action does to one role."""

    record: RoleRecord | None
    """The role's record afterwards (None: the role is forgotten)."""
    denied: tuple[Pair, ...]
    """The role's denied pairs afterwards."""
    drop_sessions: bool
    """Sessions of that role must end (its key was deleted or rejected)."""


def operator_change(
    action: str, ref: KeyRef, stored: RoleRecord | None, denied: Sequence[Pair]
) -> KeyChange | None:
    """Apply salt-key's ``action`` to the key ``ref``; None if that key is no longer
    stored as listed (the operator must look again).

    * accept: a pending or rejected record becomes accepted; a denied pair replaces the
      record's keys, accepted, and leaves the denied list.
    * reject: the record becomes rejected; a denied pair becomes the rejected record
      (the id is then refused whatever it presents, as salt-key does).
    * delete: the record is forgotten (its denied pairs stay: they are listed apart), or
      only that denied pair.
    * gen_accept: the id has no record: ``ref`` (state accepted) becomes it; an id with
      a record in any state is left alone (Salt's ``key.gen_accept`` without ``force``).
    """
    pairs = tuple(denied)
    pair = (ref.verhex, ref.pubhex)
    if action == Action.GEN_ACCEPT:
        if stored is not None or ref.state is not KeyState.ACCEPTED:
            return None
        return KeyChange(RoleRecord(ref.role, Acceptance.ACCEPTED, *pair),
                         tuple(p for p in pairs if p != pair), True)
    if ref.state is KeyState.DENIED:
        if pair not in pairs:
            return None
        rest = tuple(p for p in pairs if p != pair)
        if action == Action.DELETE:
            return KeyChange(stored, rest, False)
        verdict = Acceptance.ACCEPTED if action == Action.ACCEPT else Acceptance.REJECTED
        return KeyChange(RoleRecord(ref.role, verdict, *pair), rest, True)
    if stored is None or (KeyState.of(stored.acceptance), stored.verhex, stored.pubhex) != (
        ref.state,
        *pair,
    ):
        return None
    if action == Action.DELETE:
        return KeyChange(None, pairs, True)
    verdict = Acceptance.ACCEPTED if action == Action.ACCEPT else Acceptance.REJECTED
    return KeyChange(
        RoleRecord(ref.role, verdict, *pair), pairs, verdict is Acceptance.REJECTED
    )
