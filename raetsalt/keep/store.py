"""Keep implementations: ``FileKeep`` (JSON files, for daemons and the key tool) and
``MemoryKeep`` (same behaviour in memory, for engine tests).

On-disk layout of a ``FileKeep(dirpath)``::

    <dirpath>/                     mode 0700
        .lock                      flock(2) target serialising read-modify-write operations
        local/estate.json          our estate: name, role, main, kind, ha, puid AND the
                                   private keys sighex/prihex (mode 0600)
        remote/<name>.json         one per remote estate: name, role, uid, fuid, ha, sid,
                                   main, kind, joined
        role/<role>.json           one per remote role: role, acceptance
                                   ("pending"/"accepted"/"rejected"), verhex, pubhex
        denied/<role>.json         key pairs refused for a known role:
                                   {"role": ..., "keys": [{"verhex": ..., "pubhex": ...}]}
        keys.index.json            a cache of every role/ and denied/ document in one file
                                   (``load_keys``: ``raetsalt-key -L`` of 10,000 minions
                                   reads it instead of 10,000 files; raetsalt.keep.index)

Every file is a JSON object, 2-space indented, with ``"format": 1``.  Readers tolerate unknown
extra fields (and a missing ``format``) but a missing or mistyped required field, bad JSON, a
file name that disagrees with the name inside, or an unreadable file raises ``KeepError``
naming the path; such a file is never deleted or rewritten behind the operator's back (raet
deleted keep files whose field set did not match: quirk Q8 in docs/raet-wire.md §10).

Writes are atomic: the new content goes to ``.<file>.<pid>.<random>.tmp`` in the same
directory, created with mode 0600 (never chmod-ed later), is fsync-ed, ``os.replace``-d over
the target, and the directory is fsync-ed (``durable=False`` skips both fsyncs, for
benchmarks).  A crash leaves either the old or the new file, plus at worst a stray temp file
that readers ignore.  Nothing is cached: every load re-reads the file, so the key tool and a
running daemon can share one keep; operations that read and then write (``status_role``,
accept/reject/delete) hold an exclusive ``flock`` on ``.lock`` so they do not interleave.

Key acceptance (``status_role``) and the operator's actions (``apply_change``) are the
pure decisions of ``raetsalt.keep.policy`` applied to the stored documents under the
lock.  A running road keeps its records in memory instead (``load_state`` once at start)
and hands its changes back through ``commit``: ``FileKeep.commit`` writes a whole batch
with two file-system syncs (contents, then names), however many documents it holds.

Unreadable documents never hide the others: ``load_state`` reports each one (file named)
and marks a role whose record is unreadable as *broken*, so that the road refuses it
rather than taking it for a new id.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from raetsalt.errors import KeepError, LocalError
from raetsalt.keep.index import (
    INDEX_NAME,
    KeyIds,
    KeyIndex,
    Stamp,
    current_stamp,
    read_ids,
    read_index,
    remove_index,
    write_index,
)
from raetsalt.keep.policy import (
    MAX_DENIED_PER_ROLE,
    Action,
    KeyChange,
    KeyPolicy,
    operator_change,
)
from raetsalt.keep.records import (
    Acceptance,
    AutoMode,
    KeepState,
    KeepWrite,
    KeyRef,
    KeyState,
    LocalRecord,
    RemoteRecord,
    RoleRecord,
    fingerprint,
    normalize_fingerprint,
    validate_name,
)

__all__ = ["FileKeep", "MemoryKeep", "MAX_DENIED_PER_ROLE", "FORMAT_VERSION"]

FORMAT_VERSION = 1

# Document kinds; each maps to a sub-directory of a FileKeep.
_LOCAL = "local"
_REMOTE = "remote"
_ROLE = "role"
_DENIED = "denied"
_KINDS = (_LOCAL, _REMOTE, _ROLE, _DENIED)
_INDEXED = (_ROLE, _DENIED)  # what the key index holds (raetsalt.keep.index)
_LOCAL_KEY = "estate"

Doc = dict[str, Any]


# --------------------------------------------------------------------------- field checks
# One checker per field type.  Used both when parsing a stored document (problem in the
# file) and when saving a record (problem in the caller's record): the same rules apply, so a
# record that saves always loads back equal.


def _check_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _check_int(value: Any) -> int:
    # bool is an int subclass; a JSON true where a uid belongs is corruption, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("must be an integer")
    return value


def _check_count(value: Any) -> int:
    if _check_int(value) < 0 or value >= 1 << 63:
        raise ValueError("must be a count (0 to 2**63 - 1)")
    return int(value)


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _check_ha(value: Any) -> tuple[str, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError("must be [host, port]")
    host, port = value
    if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
        raise ValueError("must be [host (string), port (integer)]")
    return (host, port)


def _check_acceptance(value: Any) -> Acceptance:
    try:
        return Acceptance(value)
    except ValueError:
        raise ValueError(
            "must be one of " + ", ".join(repr(a.value) for a in Acceptance)
        ) from None


def _check_name(value: Any) -> str:
    try:
        return validate_name(value)
    except KeepError as exc:
        raise ValueError(str(exc)) from None


_Schema = dict[str, Callable[[Any], Any]]

_LOCAL_SCHEMA: _Schema = {
    "name": _check_name,
    "role": _check_name,
    "main": _check_bool,
    "kind": _check_int,
    "sighex": _check_str,
    "prihex": _check_str,
    "ha": _check_ha,
    "puid": _check_int,
    "epoch": _check_count,
}
_REMOTE_SCHEMA: _Schema = {
    "name": _check_name,
    "role": _check_name,
    "uid": _check_int,
    "fuid": _check_int,
    "ha": _check_ha,
    "sid": _check_int,
    "main": _check_bool,
    "kind": _check_int,
    "joined": _check_bool,
    "epoch": _check_count,
    "signs_joins": _check_bool,
}
_ROLE_SCHEMA: _Schema = {
    "role": _check_name,
    "acceptance": _check_acceptance,
    "verhex": _check_str,
    "pubhex": _check_str,
}


_OPTIONAL = frozenset({"epoch", "signs_joins"})
"""Fields added after the format's first version: a document without them still loads."""
_SCHEMAS = {_LOCAL: _LOCAL_SCHEMA, _REMOTE: _REMOTE_SCHEMA, _ROLE: _ROLE_SCHEMA}


def _parse_fields(doc: Any, schema: _Schema, where: str) -> dict[str, Any]:
    """Checked values of the schema's fields from ``doc``; extra keys are ignored."""
    if not isinstance(doc, dict):
        raise KeepError(f"{where}: expected a JSON object, found {type(doc).__name__}")
    version = doc.get("format", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise KeepError(f"{where}: unsupported format {version!r} (expected {FORMAT_VERSION})")
    out: dict[str, Any] = {}
    for field, check in schema.items():
        if field in _OPTIONAL and field not in doc:
            continue  # written by an older version: the record's default
        if field not in doc:
            raise KeepError(f"{where}: missing required field {field!r}")
        try:
            out[field] = check(doc[field])
        except ValueError as exc:
            raise KeepError(f"{where}: field {field!r} {exc}") from None
    return out


def _record_doc(record: Any, schema: _Schema, where: str) -> Doc:
    """JSON document for a record, refusing (KeepError) values that would not load back."""
    doc: Doc = {"format": FORMAT_VERSION}
    for field, check in schema.items():
        value = getattr(record, field)
        try:
            checked = check(value)
        except ValueError as exc:
            raise KeepError(f"{where}: refusing to save, field {field!r} {exc}") from None
        if isinstance(checked, tuple):
            checked = list(checked)
        elif isinstance(checked, Acceptance):
            checked = checked.value
        doc[field] = checked
    return doc


_PAIR_SCHEMA: _Schema = {"verhex": _check_str, "pubhex": _check_str}


def _parse_denied(doc: Any, where: str) -> list[tuple[str, str]]:
    if not isinstance(doc, dict):
        raise KeepError(f"{where}: expected a JSON object, found {type(doc).__name__}")
    _parse_fields(doc, {"role": _check_name}, where)
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise KeepError(f"{where}: field 'keys' must be a list")
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(keys):
        fields = _parse_fields(item, _PAIR_SCHEMA, f"{where} keys[{i}]")
        pairs.append((fields["verhex"], fields["pubhex"]))
    return pairs


# --------------------------------------------------------------------------- shared policy


class _BaseKeep:
    """Record handling and acceptance policy over five storage primitives.

    Subclasses store JSON documents addressed by (kind, key) and provide a transaction that
    serialises read-modify-write sequences.  Keeping all policy here guarantees FileKeep and
    MemoryKeep behave the same.
    """

    # -- storage primitives ---------------------------------------------------------------

    def _where(self, kind: str, key: str) -> str:
        raise NotImplementedError

    def _read(self, kind: str, key: str) -> Any | None:
        """Parsed JSON of a document, None if absent; KeepError if unreadable/not JSON."""
        raise NotImplementedError

    def _write(self, kind: str, key: str, doc: Doc) -> None:
        raise NotImplementedError

    def _delete(self, kind: str, key: str) -> None:
        """Remove a document; absent is fine."""
        raise NotImplementedError

    def _entries(self, kind: str) -> list[str]:
        """Sorted keys of every document of a kind, as stored (not yet validated)."""
        raise NotImplementedError

    def _scan(self, kind: str) -> tuple[list[str], list[str]]:
        """(valid keys, one problem line per document whose file name is not a name)."""
        keys: list[str] = []
        problems: list[str] = []
        for key in self._entries(kind):
            try:
                keys.append(validate_name(key))
            except KeepError as exc:
                problems.append(f"{self._where(kind, key)}: bad file name: {exc}")
        return keys, problems

    def _keys(self, kind: str) -> list[str]:
        """Sorted keys of every document of a kind; KeepError for a bad file name."""
        keys, problems = self._scan(kind)
        if problems:
            raise KeepError(problems[0])
        return keys

    def _transaction(self) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    # -- documents <-> records -----------------------------------------------------------

    def _get_role(self, role: str) -> RoleRecord | None:
        where = self._where(_ROLE, role)
        doc = self._read(_ROLE, role)
        if doc is None:
            return None
        rec = RoleRecord(**_parse_fields(doc, _ROLE_SCHEMA, where))
        if rec.role != role:
            raise KeepError(f"{where}: holds role {rec.role!r}, not {role!r}")
        return rec

    def _put_role(self, record: RoleRecord) -> None:
        role = validate_name(record.role, "role")
        where = self._where(_ROLE, role)
        self._write(_ROLE, role, _record_doc(record, _ROLE_SCHEMA, where))

    def _get_denied(self, role: str) -> list[tuple[str, str]]:
        where = self._where(_DENIED, role)
        doc = self._read(_DENIED, role)
        if doc is None:
            return []
        pairs = _parse_denied(doc, where)
        if doc["role"] != role:
            raise KeepError(f"{where}: holds role {doc['role']!r}, not {role!r}")
        return pairs

    def _put_denied(self, role: str, pairs: list[tuple[str, str]]) -> None:
        if not pairs:
            self._delete(_DENIED, role)
            return
        doc: Doc = {
            "format": FORMAT_VERSION,
            "role": role,
            "keys": [{"verhex": v, "pubhex": p} for v, p in pairs],
        }
        self._write(_DENIED, role, doc)

    def _get_remote(self, name: str) -> RemoteRecord | None:
        where = self._where(_REMOTE, name)
        doc = self._read(_REMOTE, name)
        if doc is None:  # removed between listing and reading
            return None
        rec = RemoteRecord(**_parse_fields(doc, _REMOTE_SCHEMA, where))
        if rec.name != name:
            raise KeepError(f"{where}: holds remote {rec.name!r}, not {name!r}")
        return rec

    def _get_remotes(self) -> list[RemoteRecord]:
        return [r for name in self._keys(_REMOTE) if (r := self._get_remote(name)) is not None]

    # -- the Keep protocol ----------------------------------------------------------------

    def load_local(self) -> LocalRecord | None:
        """Our estate with its private keys, or None before the first save."""
        doc = self._read(_LOCAL, _LOCAL_KEY)
        if doc is None:
            return None
        return LocalRecord(**_parse_fields(doc, _LOCAL_SCHEMA, self._where(_LOCAL, _LOCAL_KEY)))

    def save_local(self, record: LocalRecord) -> None:
        where = self._where(_LOCAL, _LOCAL_KEY)
        doc = _record_doc(record, _LOCAL_SCHEMA, where)
        with self._transaction():
            self._write(_LOCAL, _LOCAL_KEY, doc)

    def load_remotes(self) -> list[RemoteRecord]:
        """Every stored remote, sorted by name."""
        return self._get_remotes()

    def save_remote(self, record: RemoteRecord) -> None:
        name = validate_name(record.name, "remote name")
        doc = _record_doc(record, _REMOTE_SCHEMA, self._where(_REMOTE, name))
        with self._transaction():
            self._write(_REMOTE, name, doc)

    def remove_remote(self, name: str) -> None:
        validate_name(name, "remote name")
        with self._transaction():
            self._delete(_REMOTE, name)

    def load_role(self, role: str) -> RoleRecord | None:
        return self._get_role(validate_name(role, "role"))

    def save_role(self, record: RoleRecord) -> None:
        with self._transaction():
            self._put_role(record)

    def remove_role(self, role: str) -> None:
        """Remove only the role record (see ``delete_role`` for the operator's cascade)."""
        validate_name(role, "role")
        with self._transaction():
            self._delete(_ROLE, role)

    def list_roles(self) -> list[RoleRecord]:
        """Every role record, sorted by role; roles deleted while listing are skipped."""
        out = []
        for role in self._keys(_ROLE):
            rec = self._get_role(role)
            if rec is not None:
                out.append(rec)
        return out

    def status_role(self, role: str, verhex: str, pubhex: str, auto: AutoMode) -> Acceptance:
        """Acceptance of ``role`` presenting (verhex, pubhex) (``raetsalt.keep.policy``).

        Writes only when something changes, so repeated joins cost no disk writes.
        Raises KeepError for an invalid role name and LocalError for non-string keys.
        """
        validate_name(role, "role")
        if not isinstance(verhex, str) or not isinstance(pubhex, str):
            raise LocalError("verhex and pubhex must be strings")
        with self._transaction():
            decision = KeyPolicy(AutoMode(auto)).decide(
                role, verhex, pubhex, self._get_role(role), self._get_denied(role)
            )
            if decision.record is not None:
                self._put_role(decision.record)
            if decision.denied is not None:
                self._put_denied(role, list(decision.denied))
            return decision.acceptance

    def list_denied(self) -> dict[str, list[tuple[str, str]]]:
        """role -> denied (verhex, pubhex) pairs, oldest first; roles sorted."""
        out: dict[str, list[tuple[str, str]]] = {}
        for role in self._keys(_DENIED):
            pairs = self._get_denied(role)
            if pairs:
                out[role] = pairs
        return out

    def remove_denied(self, role: str, verhex: str | None = None) -> None:
        """Forget the denied keys of ``role`` (only the pair with ``verhex`` when given)
        and nothing else: its record and remotes stay."""
        validate_name(role, "role")
        with self._transaction():
            if verhex is None:
                self._delete(_DENIED, role)
            else:
                kept = [pair for pair in self._get_denied(role) if pair[0] != verhex.lower()]
                self._put_denied(role, kept)

    def load_state(self) -> KeepState:
        """Every record at once, for a road's start.

        An unreadable remote or denied document is skipped and named in ``problems``; an
        unreadable role record makes that role *broken*.  Only our own estate record is
        essential: KeepError if it is unreadable.
        """
        state = KeepState(local=self.load_local())
        self._load_documents(state, (_REMOTE, _ROLE, _DENIED))
        return state

    def load_keys(self) -> KeepState:
        """The key records only (roles, denied pairs, broken roles and their problems;
        no local or remote record): what ``raetsalt-key`` lists."""
        state = KeepState()
        self._load_documents(state, (_ROLE, _DENIED))
        return state

    def key_ids(self) -> KeyIds:
        """The ids of ``load_keys`` by state, without their keys: what a listing shows."""
        state = self.load_keys()
        roles: dict[str, list[str]] = {}
        for record in state.roles:
            roles.setdefault(record.acceptance.value, []).append(record.role)
        return KeyIds(roles=roles, denied=[r for r, pairs in state.denied.items() if pairs],
                      broken=list(state.broken), problems=list(state.problems))

    def _load_documents(
        self, state: KeepState, kinds: tuple[str, ...], keyed: dict[str, str] | None = None
    ) -> None:
        """Read every document of ``kinds`` into ``state``; each problem also goes to
        ``keyed`` under ``kind/key`` (a bad file name under ``name/kind/n``)."""
        for kind in kinds:
            keys, bad_names = self._scan(kind)
            state.problems.extend(bad_names)
            if keyed is not None:
                keyed.update((f"name/{kind}/{n}", line) for n, line in enumerate(bad_names))
            for key in keys:
                try:
                    if kind == _REMOTE:
                        remote = self._get_remote(key)
                        if remote is not None:
                            state.remotes.append(remote)
                    elif kind == _ROLE:
                        role = self._get_role(key)
                        if role is not None:
                            state.roles.append(role)
                    else:
                        pairs = self._get_denied(key)
                        if pairs:
                            state.denied[key] = pairs
                except KeepError as exc:
                    state.problems.append(str(exc))
                    if keyed is not None:
                        keyed[f"{kind}/{key}"] = str(exc)
                    if kind == _ROLE:
                        state.broken[key] = str(exc)

    def commit(self, writes: list[KeepWrite]) -> None:
        """Apply ``writes`` in order; the last write of a document wins."""
        with self._transaction():
            for (kind, key), doc in self._documents(writes).items():
                if doc is None:
                    self._delete(kind, key)
                else:
                    self._write(kind, key, doc)

    def _documents(self, writes: list[KeepWrite]) -> dict[tuple[str, str], Doc | None]:
        """The final document (None: removed) of every document ``writes`` touch."""
        out: dict[tuple[str, str], Doc | None] = {}
        for write in writes:
            where = self._where(write.kind, write.key)
            value = write.value
            doc: Doc | None
            if value is None:
                doc = None
            elif write.kind == _DENIED:
                doc = {
                    "format": FORMAT_VERSION,
                    "role": write.key,
                    "keys": [{"verhex": v, "pubhex": p} for v, p in value],  # type: ignore[union-attr]
                }
            else:
                validate_name(write.key)
                doc = _record_doc(value, _SCHEMAS[write.kind], where)
            out.pop((write.kind, write.key), None)  # keep the order of the last write
            out[(write.kind, write.key)] = doc
        return out

    def apply_change(self, action: str, ref: KeyRef) -> KeyChange | None:
        """Carry out salt-key's ``action`` (``raetsalt.keep.policy.Action``) on the key
        ``ref`` under the lock; None (nothing changed) if it is no longer stored as
        listed.  Deleting a role also forgets its remote estates."""
        validate_name(ref.role, "role")
        with self._transaction():
            try:
                stored = self._get_role(ref.role)
            except KeepError:
                # Unreadable: no listing shows its keys, so deleting the id is how an
                # operator repairs it (the engine's KeyBook does the same).
                if action != Action.DELETE or ref.state is KeyState.DENIED:
                    return None
                self.delete_role(ref.role, include_denied=False)
                return KeyChange(None, (), True)
            change = operator_change(action, ref, stored, self._get_denied(ref.role))
            if change is None:
                return None
            if change.record is None:
                self.delete_role(ref.role, include_denied=False)
            else:
                self._put_role(change.record)
            self._put_denied(ref.role, list(change.denied))
            return change

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """Hold the keep's lock (re-entrant; across processes for ``FileKeep``) so that a
        check and the change that depends on it happen as one step, e.g. an operator tool
        confirming a key is still the one it showed before accepting it."""
        return self._transaction()

    # -- operator actions (the key tool) --------------------------------------------------

    def _set_acceptance(self, role: str, acceptance: Acceptance) -> RoleRecord:
        validate_name(role, "role")
        with self._transaction():
            stored = self._get_role(role)
            if stored is None:
                raise LocalError(f"no key stored for role {role!r}")
            if stored.acceptance is not acceptance:
                stored.acceptance = acceptance
                self._put_role(stored)
            return stored

    def accept_role(self, role: str) -> RoleRecord:
        """Mark the stored keys of ``role`` accepted (from pending or rejected).

        Returns the updated record; LocalError if the role is unknown.  A pended join
        completes on its next redo because the engine re-reads the record.
        """
        return self._set_acceptance(role, Acceptance.ACCEPTED)

    def reject_role(self, role: str) -> RoleRecord:
        """Mark the stored keys of ``role`` rejected; it stays rejected whatever the auto
        mode until accepted or deleted.  LocalError if the role is unknown."""
        return self._set_acceptance(role, Acceptance.REJECTED)

    def accept_denied(self, role: str, verhex: str | None = None) -> RoleRecord:
        """Replace the keys of ``role`` by one of its denied pairs and accept them.

        This is salt-key's ``-a --include-denied`` for a rebuilt minion.  ``verhex`` picks
        the pair; it may be omitted when exactly one pair is denied.  The pair leaves the
        denied list, the others stay.  LocalError if there is no such pair or the choice is
        ambiguous.
        """
        validate_name(role, "role")
        with self._transaction():
            pairs = self._get_denied(role)
            chosen = [p for p in pairs if verhex is None or p[0] == verhex]
            if not chosen:
                raise LocalError(f"no denied key for role {role!r}" + (
                    f" with verhex {verhex!r}" if verhex is not None else ""))
            if len(chosen) > 1:
                raise LocalError(
                    f"role {role!r} has {len(chosen)} denied keys; say which (verhex)")
            pair = chosen[0]
            record = RoleRecord(role, Acceptance.ACCEPTED, pair[0], pair[1])
            self._put_role(record)
            self._put_denied(role, [p for p in pairs if p != pair])
            return record

    def delete_role(self, role: str, *, include_denied: bool = True) -> list[str]:
        """Forget ``role`` completely: its record, every remote estate of that role and
        (unless ``include_denied`` is False) its denied keys, like ``salt-key -d``.

        Returns the names of the removed remotes.  The next join of that role is a first
        sight again.
        """
        validate_name(role, "role")
        with self._transaction():
            removed = []
            for name in self._scan(_REMOTE)[0]:
                try:
                    remote = self._get_remote(name)
                except KeepError:  # unreadable: it is this role's if it bears its name
                    remote = RemoteRecord(name, name, 0, 0, ("", 0), 0, False, 0, False)
                if remote is not None and remote.role == role:
                    removed.append(name)
            for name in removed:
                self._delete(_REMOTE, name)
            self._delete(_ROLE, role)
            if include_denied:
                self._delete(_DENIED, role)
            return removed

    def delete_denied(self, role: str) -> None:
        """Operator name for :meth:`remove_denied`: drop only the denied keys of ``role``
        (salt-key has no way to do that)."""
        self.remove_denied(role)

    def find_fingerprint(self, fp: str, hash_type: str = "sha256") -> list[tuple[str, str]]:
        """(role, state) of every stored key whose fingerprint is ``fp``.

        State is an ``Acceptance`` value or ``"denied"``.  ``fp`` may be typed with or
        without colons, in either case.  Keys that are not valid hex never match.
        """
        want = normalize_fingerprint(fp)
        fingerprint("", hash_type)  # LocalError now for an unknown hash type

        def matches(*hexkeys: str) -> bool:
            for hexkey in hexkeys:
                try:
                    if fingerprint(hexkey, hash_type) == want:
                        return True
                except LocalError:  # not hex: cannot be the key the operator means
                    continue
            return False

        found: list[tuple[str, str]] = []
        for rec in self.list_roles():
            if matches(rec.verhex, rec.pubhex):
                found.append((rec.role, rec.acceptance.value))
        for role, pairs in self.list_denied().items():
            if any(matches(v, p) for v, p in pairs):
                found.append((role, "denied"))
        return found


# --------------------------------------------------------------------------- FileKeep


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


@functools.cache
def _find_syncfs() -> Callable[[int], int] | None:
    """syncfs(2) from the C library, if there is one (looked up at the first sync: the
    look-up costs a command such as ``raetsalt-key -L`` a good part of its start-up)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function



def sync_filesystem(dirpath: Path) -> None:
    """Make everything written on the file system holding ``dirpath`` durable with one
    call (syncfs(2) on Linux; sync(2) where there is none).  Raises ``KeepError``."""
    try:
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise KeepError(f"{dirpath}: cannot open to sync: {_why(exc)}") from exc
    try:
        syncfs = _find_syncfs()
        if syncfs is not None:
            if syncfs(fd) != 0:
                import ctypes

                error = ctypes.get_errno()
                raise KeepError(f"{dirpath}: cannot sync: {os.strerror(error)}")
        else:
            os.sync()
    finally:
        os.close(fd)


class FileKeep(_BaseKeep):
    """A keep in a directory (layout in the module docstring).

    Safe to share between processes (a daemon and the key tool): writes are atomic
    replacements and read-modify-write operations hold an exclusive lock.
    """

    def __init__(self, dirpath: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.dirpath = Path(dirpath)
        self.durable = durable
        for sub in ("", *_KINDS):
            path = self.dirpath / sub
            try:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise KeepError(f"{path}: cannot create keep directory: {_why(exc)}") from exc
            if not path.is_dir():
                raise KeepError(f"{path}: exists and is not a directory")
        self._lock_path = self.dirpath / ".lock"
        # Serialises threads of this process; flock serialises processes (a fresh open file
        # description per transaction, so threads would also exclude each other, but the
        # RLock lets one thread nest transactions without deadlocking on its own flock).
        self._thread_lock = threading.RLock()
        self._depth = 0
        # The key index (raetsalt.keep.index) as this transaction found it, and the key
        # documents it changed: the index is written anew when the transaction ends.
        self._index_base: KeyIndex | None = None
        self._index_changes: list[tuple[str, str, Doc | None]] | None = None
        self._index_written: tuple[Stamp, KeyIndex] | None = None
        """The index this keep wrote last and its stamp: while the stamp holds, the
        next transaction updates it without reading the file back."""

    def __repr__(self) -> str:
        return f"FileKeep({str(self.dirpath)!r})"

    def path_of(self, kind: str, key: str) -> Path:
        """File holding document ``key`` of ``kind`` (``local``/``remote``/``role``/``denied``)."""
        if kind not in _KINDS:
            raise LocalError(f"unknown keep document kind {kind!r}")
        return self.dirpath / kind / f"{key}.json"

    def _where(self, kind: str, key: str) -> str:
        return str(self.path_of(kind, key))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            try:
                fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise KeepError(f"{self._lock_path}: cannot open lock file: {_why(exc)}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._depth = 1
                try:
                    yield
                    self._write_index()
                finally:
                    self._depth = 0
                    self._index_base = self._index_changes = None
            finally:
                os.close(fd)  # closing releases the flock

    def _read(self, kind: str, key: str) -> Any | None:
        path = self.path_of(kind, key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise KeepError(f"{path}: cannot read: {_why(exc)}") from exc
        try:
            return json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise KeepError(f"{path}: not UTF-8 text: {exc}") from None
        except json.JSONDecodeError as exc:
            raise KeepError(f"{path}: not valid JSON: {exc}") from None

    def _write(self, kind: str, key: str, doc: Doc) -> None:
        if kind in _INDEXED:
            with self._transaction():
                self._touch_index(kind, key, doc)
                self._write_document(kind, key, doc)
        else:
            self._write_document(kind, key, doc)

    def _write_document(self, kind: str, key: str, doc: Doc) -> None:
        path = self.path_of(kind, key)
        tmp = self._stage(path, doc, sync=self.durable)
        self._install(tmp, path)
        self._sync_dir(path.parent)

    # -- the key index (raetsalt.keep.index) ------------------------------------------------

    def _touch_index(self, kind: str, key: str, doc: Doc | None) -> None:
        """A key document is about to change (under the lock): the index goes first."""
        if self._index_changes is None:
            written, self._index_written = self._index_written, None
            if written is not None and current_stamp(self.dirpath) == written[0]:
                self._index_base = written[1]
            else:
                self._index_base = read_index(self.dirpath)
            self._index_changes = []
            try:
                if remove_index(self.dirpath):
                    self._sync_dir(self.dirpath)
            except OSError as exc:
                raise KeepError(f"{self.dirpath / INDEX_NAME}: cannot remove: {_why(exc)}"
                                ) from exc
        self._index_changes.append((kind, key, doc))

    def _write_index(self) -> None:
        """The transaction changed key documents: write the index they make now."""
        if self._index_changes is None:
            return
        index = self._index_base
        try:
            if index is None:
                index = self._scan_index()
            else:
                for kind, key, doc in self._index_changes:
                    if kind == _ROLE:
                        index.set_role(key, doc)
                    else:
                        index.set_denied(key, doc)
        except KeepError:
            return  # no index: readers read the documents
        stamped = write_index(self.dirpath, index)
        if stamped is not None:
            self._index_written = (stamped, index)

    def _scan_index(self) -> KeyIndex:
        """The index of the documents as they are (under the lock)."""
        state, keyed = KeepState(), dict[str, str]()
        self._load_documents(state, _INDEXED, keyed)
        return KeyIndex(
            roles={r.role: (r.acceptance.value, r.verhex, r.pubhex) for r in state.roles},
            denied=dict(state.denied),
            broken=dict(state.broken),
            problems=keyed,
        )

    def load_keys(self) -> KeepState:
        """The key records (``_BaseKeep.load_keys``), from the index when it is current.
        Without one, the documents are read and, if the keep's lock is free, an index
        is written for the next reader."""
        index = read_index(self.dirpath)
        state = None if index is None else _keys_of(index)
        if state is not None:
            return state
        with self._try_lock() as locked:
            if not locked:
                return super().load_keys()
            index = self._scan_index()
            write_index(self.dirpath, index)
        state = _keys_of(index)
        return super().load_keys() if state is None else state

    def key_ids(self) -> KeyIds:
        """``_BaseKeep.key_ids`` from the index when it is current (one JSON parse, no
        record made); otherwise from ``load_keys``, which writes an index if it can."""
        ids = read_ids(self.dirpath)
        if ids is not None and all(word in _ACCEPTANCES for word in ids.roles):
            return ids
        return super().key_ids()

    @contextlib.contextmanager
    def _try_lock(self) -> Iterator[bool]:
        """The keep's lock if it is free now (True), else nothing (False)."""
        if not self._thread_lock.acquire(blocking=False):
            yield False
            return
        try:
            if self._depth:
                yield False
                return
            try:
                fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                yield False
                return
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    yield False
                    return
                yield True
            finally:
                os.close(fd)
        finally:
            self._thread_lock.release()

    def _stage(self, path: Path, doc: Doc, *, sync: bool) -> Path:
        """Write ``doc`` to a new temp file beside ``path`` (fsync-ed when ``sync``)."""
        data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            # O_EXCL + mode 0600 at creation: the private keys are never readable by others,
            # not even for a moment, whatever the umask.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise KeepError(f"{path}: cannot write: {_why(exc)}") from exc
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return tmp

    def _install(self, tmp: Path, path: Path) -> None:
        try:
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise KeepError(f"{path}: cannot write: {_why(exc)}") from exc

    def commit(self, writes: list[KeepWrite]) -> None:
        """Apply a batch with two file-system syncs however many documents it holds
        (group commit): every new document goes to a temp file, the file system is
        synced, then all are renamed into place (and removals done) and it is synced
        again.  A crash leaves each document old or new, never torn."""
        documents = self._documents(writes)
        if not documents:
            return
        with self._transaction():
            for (kind, key), doc in documents.items():
                if kind in _INDEXED:
                    self._touch_index(kind, key, doc)
            staged: list[tuple[Path | None, Path]] = []
            try:
                for (kind, key), doc in documents.items():
                    path = self.path_of(kind, key)
                    staged.append((None if doc is None else self._stage(path, doc, sync=False),
                                   path))
                self._sync_all()
                while staged:
                    tmp, path = staged.pop(0)
                    if tmp is not None:
                        self._install(tmp, path)
                    else:
                        self._delete_file(path)
                self._sync_all()
            finally:
                for tmp, _ in staged:
                    if tmp is not None:
                        with contextlib.suppress(OSError):
                            os.unlink(tmp)

    def _sync_all(self) -> None:
        """Make everything written under the keep durable with one call (syncfs(2) on
        Linux; per-directory fsync elsewhere would need one call per file)."""
        if self.durable:
            sync_filesystem(self.dirpath)

    def _delete(self, kind: str, key: str) -> None:
        if kind in _INDEXED:
            with self._transaction():
                self._touch_index(kind, key, None)
                self._delete_document(kind, key)
        else:
            self._delete_document(kind, key)

    def _delete_document(self, kind: str, key: str) -> None:
        path = self.path_of(kind, key)
        if self._delete_file(path):
            self._sync_dir(path.parent)

    def _delete_file(self, path: Path) -> bool:
        """Unlink ``path``; False if it was not there."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise KeepError(f"{path}: cannot remove: {_why(exc)}") from exc
        return True

    def _sync_dir(self, dirpath: Path) -> None:
        # The rename/unlink is only durable once the directory entry is on disk.
        if not self.durable:
            return
        try:
            fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise KeepError(f"{dirpath}: cannot open directory to sync: {_why(exc)}") from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise KeepError(f"{dirpath}: cannot sync directory: {_why(exc)}") from exc
        finally:
            os.close(fd)

    def _entries(self, kind: str) -> list[str]:
        directory = self.dirpath / kind
        try:
            entries = os.listdir(directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise KeepError(f"{directory}: cannot list: {_why(exc)}") from exc
        # Dot files are our temp files (or the operator's editor); other suffixes
        # (backups such as "x.json~") are not documents.
        return sorted(
            entry[: -len(".json")]
            for entry in entries
            if not entry.startswith(".") and entry.endswith(".json")
        )


_ACCEPTANCES = {a.value: a for a in Acceptance}


def _keys_of(index: KeyIndex) -> KeepState | None:
    """The key records an index holds (None if a stored word is no acceptance)."""
    try:
        roles = [RoleRecord(role, _ACCEPTANCES[acceptance], verhex, pubhex)
                 for role, (acceptance, verhex, pubhex) in sorted(index.roles.items())]
    except KeyError:
        return None
    return KeepState(
        roles=roles,
        denied=dict(index.denied),
        broken=dict(index.broken),
        problems=[index.problems[k] for k in sorted(index.problems)],
    )


# --------------------------------------------------------------------------- MemoryKeep


class MemoryKeep(_BaseKeep):
    """In-memory keep with exactly FileKeep's rules (validation, acceptance policy, errors).

    Documents are stored as JSON text, so records handed in or out are never shared with
    the keep (mutating a loaded record changes nothing until it is saved).
    """

    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], str] = {}
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"MemoryKeep({len(self._docs)} documents)"

    def _where(self, kind: str, key: str) -> str:
        return f"memory:{kind}/{key}"

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self._lock:
            yield

    def _read(self, kind: str, key: str) -> Any | None:
        text = self._docs.get((kind, key))
        return None if text is None else json.loads(text)

    def _write(self, kind: str, key: str, doc: Doc) -> None:
        self._docs[(kind, key)] = json.dumps(doc)

    def _delete(self, kind: str, key: str) -> None:
        self._docs.pop((kind, key), None)

    def _entries(self, kind: str) -> list[str]:
        return sorted(k for (d, k) in self._docs if d == kind)

