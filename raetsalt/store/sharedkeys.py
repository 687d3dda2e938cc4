"""Key decisions shared by the masters of a cluster (pure).

An operator's accept, reject or delete on any master becomes a ``SharedKey`` (the role,
its keys and the decision) in the store (``raetsalt.store.pgkeys``).  Every master then

- answers a join of an undecided id from the cluster's decision (``verdict``: the
  ``shared`` hook of ``raetsalt.keep.policy.KeyPolicy``), so a minion accepted once joins
  any master without a re-accept; and
- applies each decision it hears of to the keys it holds (``local_action``): a pending
  key is accepted (its waiting join answered), a rejected or deleted one ends that
  minion's session there.

A key waiting for an operator on one master is in the store too (``pending``: no
decision, so no master acts on it), so that ``raetsalt-key`` on any master lists it and
can accept or reject it; the master where the minion waits applies that decision as it
hears of it.  A pending record never replaces a decision (``may_pend``): an id the
cluster accepted or rejected stays so when someone presents other keys under it.

A decision applies only to the very keys it names: another key pair under the same id
is denied (Salt's meaning: the id is accepted or pending under other keys), by the
cluster's decision (``taken``: the key policy's hook) as by the master's own records.

Denied keys are cluster-wide too, apart from the decisions (a denied pair never
replaces one): each is a row of its own, keyed by (id, keys), at most
``MAX_DENIED_PER_ID`` per id and ``MAX_DENIED`` in all (a flood of made-up keys under one
id is refused beyond that, counted, not stored).  A denied key deleted on any master
(``undenied``) leaves every master's list (``local_action``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.keep.policy import MAX_DENIED_PER_ROLE, Action, Pair
from raetsalt.keep.records import Acceptance, KeyRef, KeyState, RoleRecord, name_problem

STATES = ("accepted", "rejected", "deleted", "pending")
"""A decision's states (one row per id)."""
DENIAL = ("denied", "undenied")
"""A denied pair listed, or deleted (a row per pair)."""
NOTIFIED = STATES + DENIAL
MAX_DENIED_PER_ID = MAX_DENIED_PER_ROLE
"""Denied pairs the cluster lists per id (as each master's keep)."""
MAX_DENIED = 10_000
"""Denied pairs the cluster lists in all."""
PENDABLE = ("pending", "deleted")
"""The states a pending record may replace (no decision stands)."""
_STATE_OF = {Action.ACCEPT: "accepted", Action.REJECT: "rejected", Action.DELETE: "deleted"}
_ACTION_OF = {state: action for action, state in _STATE_OF.items()}
_STATE_OF[Action.GEN_ACCEPT] = "accepted"  # shared as an acceptance of those keys
_HEX = re.compile(r"[0-9a-f]{64}\Z")
MAX_PAYLOAD = 4000
"""Bytes of a notification read at most (PostgreSQL's limit is 8,000)."""


@dataclass(frozen=True, slots=True)
class SharedKey:
    """The cluster's last decision on ``role`` (with these keys), made on ``origin``."""

    role: str
    state: str
    verhex: str
    pubhex: str
    origin: str = ""


def decided(action: str, ref: KeyRef, origin: str) -> SharedKey | None:
    """The shared record of an operator's ``action`` on ``ref`` (None: not shared)."""
    state = _STATE_OF.get(action)
    if state is None or ref.state is KeyState.DENIED:
        return None  # a denied pair is this master's memory of a refused key
    return SharedKey(ref.role, state, ref.verhex, ref.pubhex, origin)


def pending_key(role: str, verhex: str, pubhex: str, origin: str) -> SharedKey:
    """The shared record of a key waiting for an operator on ``origin``."""
    return SharedKey(role, "pending", verhex, pubhex, origin)


def denial(state: str, role: str, pair: Pair, origin: str) -> SharedKey:
    """A pair denied here (``denied``), or a denied pair deleted (``undenied``)."""
    return SharedKey(role, state, pair[0], pair[1], origin)


def is_denial(shared: SharedKey) -> bool:
    return shared.state in DENIAL


def taken(book: Mapping[str, SharedKey], role: str, verhex: str, pubhex: str) -> bool:
    """Whether the cluster holds ``role`` accepted or pending under other keys (then
    these are denied, whichever master they are presented to)."""
    shared = book.get(role)
    return shared is not None and shared.state in ("accepted", "pending") and (
        shared.verhex, shared.pubhex) != (verhex, pubhex)


def may_pend(held: SharedKey | None, new: SharedKey) -> bool:
    """Whether the pending record ``new`` goes to the store over ``held`` (not when it
    says the same, nor over a decision)."""
    if held is None:
        return True
    return held != new and held.state in PENDABLE and (
        held.state, held.verhex, held.pubhex) != (new.state, new.verhex, new.pubhex)


def verdict(book: Mapping[str, SharedKey], role: str, verhex: str,
            pubhex: str) -> Acceptance | None:
    """The cluster's answer to ``role`` presenting these keys, if it decided one."""
    shared = book.get(role)
    if shared is None or (shared.verhex, shared.pubhex) != (verhex, pubhex):
        return None
    if shared.state == "accepted":
        return Acceptance.ACCEPTED
    if shared.state == "rejected":
        return Acceptance.REJECTED
    return None  # deleted: undecided again


def accepted_key(book: Mapping[str, SharedKey], by_verify: Mapping[str, str],
                 verhex: str) -> tuple[str, str] | None:
    """The id and Curve25519 key (hex) the cluster accepted with this verify key, or
    None (``by_verify``: verify key -> id, possibly stale: the book decides)."""
    role = by_verify.get(verhex)
    shared = None if role is None else book.get(role)
    if shared is None or shared.state != "accepted" or shared.verhex != verhex:
        return None
    return shared.role, shared.pubhex


def local_action(shared: SharedKey, local: RoleRecord | None,
                 denied: tuple[Pair, ...] = ()) -> tuple[str, KeyRef] | None:
    """The operator action that makes this master's record (or its denied pairs of that
    id, ``denied``) agree with ``shared``."""
    if shared.state == "undenied":
        pair = (shared.verhex, shared.pubhex)
        return (Action.DELETE, KeyRef(shared.role, KeyState.DENIED, *pair)) \
            if pair in denied else None
    if local is None or (local.verhex, local.pubhex) != (shared.verhex, shared.pubhex):
        return None
    if shared.state == "accepted" and local.acceptance is Acceptance.ACCEPTED:
        return None
    if shared.state == "rejected" and local.acceptance is Acceptance.REJECTED:
        return None
    if shared.state not in _ACTION_OF:
        return None  # pending: nothing decided
    ref = KeyRef(local.role, KeyState.of(local.acceptance), local.verhex, local.pubhex)
    return _ACTION_OF[shared.state], ref


def to_payload(cluster_id: str, shared: SharedKey) -> str:
    return json.dumps({"cluster": cluster_id, "role": shared.role, "state": shared.state,
                       "verhex": shared.verhex, "pubhex": shared.pubhex,
                       "origin": shared.origin}, separators=(",", ":"))


def from_row(role: Any, state: Any, verhex: Any, pubhex: Any,
             origin: Any = "", *, states: tuple[str, ...] = STATES) -> SharedKey | None:
    """A stored or notified decision (or denial: ``states``); None if any field is not
    what a master writes."""
    if name_problem(role) is not None or state not in states:
        return None
    if not isinstance(verhex, str) or not isinstance(pubhex, str):
        return None
    if not _HEX.match(verhex) or not _HEX.match(pubhex):
        return None
    return SharedKey(role, state, verhex, pubhex, origin if isinstance(origin, str) else "")


def foreign(cluster_id: str, text: str) -> bool:
    """A well-formed notification of another cluster sharing the database."""
    try:
        data = json.loads(text) if len(text) <= MAX_PAYLOAD else None
    except ValueError:
        return False
    return isinstance(data, dict) and isinstance(data.get("cluster"), str) \
        and data["cluster"] != cluster_id


def from_payload(cluster_id: str, text: str) -> SharedKey | None:
    """A notification of this cluster, or None (another cluster's, or malformed)."""
    if len(text) > MAX_PAYLOAD:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("cluster") != cluster_id:
        return None
    return from_row(data.get("role"), data.get("state"), data.get("verhex"),
                    data.get("pubhex"), data.get("origin", ""), states=NOTIFIED)
