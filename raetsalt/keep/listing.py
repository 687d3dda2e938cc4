"""The stored minion keys as salt-key lists them: Salt's status names, one entry per key,
and the per-status id lists (``raetsalt-key``, the wheel client and the REST API share
them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from raetsalt.keep.records import Acceptance, KeyRef, KeyState, fingerprint
from raetsalt.keep.store import FileKeep

# Salt's status names: the keys of the JSON/YAML output and the directory names of
# salt-key's pki_dir, so scripts written for ``salt-key --out json`` keep working.
ACC = "minions"
PRE = "minions_pre"
REJ = "minions_rejected"
DEN = "minions_denied"
BAD = "minions_unreadable"  # not Salt's: a key file that cannot be read (only -d sees it)
LOCAL = "local"
# Order of salt-key's result dicts (what --out json shows); the text output sorts.
STATUSES: tuple[str, ...] = (PRE, REJ, ACC, DEN)

ACC_TO_STATUS = {
    Acceptance.ACCEPTED: ACC,
    Acceptance.PENDING: PRE,
    Acceptance.REJECTED: REJ,
}
STATUS_TO_STATE = {
    ACC: KeyState.ACCEPTED,
    PRE: KeyState.PENDING,
    REJ: KeyState.REJECTED,
    DEN: KeyState.DENIED,
    BAD: KeyState.PENDING,  # with no keys: matches nothing but "delete this id"
}


class KeyEntry(NamedTuple):
    """One stored minion key: an id in one state with its two public keys.

    An id has at most one accepted, unaccepted or rejected key (its role record) and up to
    ``MAX_DENIED_PER_ROLE`` denied ones.  (A named tuple: ten thousand of them are made
    for every listing.)
    """

    id: str
    status: str
    verhex: str
    pubhex: str

    def finger(self, hash_type: str) -> str:
        """The key's fingerprint: that of its Ed25519 verify key (the estate's identity,
        the key that signs every packet), in salt-key's colon-hex format."""
        return fingerprint(self.verhex, hash_type)

    def ref(self) -> KeyRef:
        return KeyRef(self.id, STATUS_TO_STATE[self.status], self.verhex, self.pubhex)

    def wire(self) -> dict[str, str]:
        """As the master's key command names it (``raetsalt.daemon.keys``)."""
        ref = self.ref()
        return {"role": ref.role, "state": ref.state.value, "verhex": ref.verhex,
                "pubhex": ref.pubhex}


def snapshot(keep: FileKeep, skipped: Callable[[str], None] = lambda _: None
             ) -> list[KeyEntry]:
    """Every minion key in the keep, role records first, then denied keys.  Files that
    cannot be read are given to ``skipped`` and left out (the others are listed)."""
    state = keep.load_keys()
    for problem in state.problems:
        skipped(f"skipped: {problem}")
    entries = [
        KeyEntry(rec.role, ACC_TO_STATUS[rec.acceptance], rec.verhex, rec.pubhex)
        for rec in sorted(state.roles, key=lambda r: r.role)
    ]
    for role, pairs in sorted(state.denied.items()):
        entries.extend(KeyEntry(role, DEN, verhex, pubhex) for verhex, pubhex in pairs)
    entries.extend(KeyEntry(role, BAD, "", "") for role in sorted(state.broken))
    return entries


def listed_ids(keep: FileKeep, statuses: Sequence[str],
               skipped: Callable[[str], None] = lambda _: None) -> dict[str, list[str]]:
    """``id_lists(snapshot(keep, skipped), statuses)`` without making an entry per key
    (the keys are not shown): a listing of 10,000 minions reads one index."""
    ids = keep.key_ids()
    for problem in ids.problems:
        skipped(f"skipped: {problem}")
    found = {
        ACC: ids.roles.get(Acceptance.ACCEPTED.value, []),
        PRE: ids.roles.get(Acceptance.PENDING.value, []),
        REJ: ids.roles.get(Acceptance.REJECTED.value, []),
        DEN: ids.denied,
        BAD: ids.broken,
    }
    return {s: sort_ids(found[s]) for s in statuses}


def sort_ids(ids: Iterable[str]) -> list[str]:
    # salt.utils.data.sorted_ignorecase, with the exact order as a tie-break
    return sorted(set(ids), key=lambda s: (s.lower(), s))


def id_lists(entries: Iterable[KeyEntry], statuses: Sequence[str]) -> dict[str, list[str]]:
    """``{status: [ids]}`` in salt-key's shape; an id appears once per status."""
    by_status: dict[str, list[str]] = {s: [] for s in statuses}
    for entry in entries:
        if entry.status in by_status:
            by_status[entry.status].append(entry.id)
    return {s: sort_ids(ids) for s, ids in by_status.items()}
