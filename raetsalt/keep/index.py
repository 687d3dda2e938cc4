"""The key index of a ``FileKeep``: every role record and denied list in one file.

Listing the keys of 10,000 minions from their files means 10,000 opens, reads and JSON
parses (seconds); the index holds what ``raetsalt-key -L`` shows in one file,
``<keep>/keys.index.json``, a cache of the ``role/`` and ``denied/`` documents, which
stay the truth::

    {"format": 1, "stamp": [...], "roles": {role: [acceptance, verhex, pubhex]},
     "denied": {role: [[verhex, pubhex], ...]}, "broken": {role: problem},
     "problems": {"kind/name": problem}}

Rules that keep it from ever showing what the documents do not say:

* a writer (``FileKeep``, under the keep's lock) removes the index *before* it changes a
  role or denied document, and writes the updated index (atomically: temp file, rename)
  only after every change of its transaction is in place; a crash in between leaves no
  index, and a failed transaction writes none;
* the index records the ``stamp`` of both directories as they were when it was
  written (``stamp``: their entries' names and inode numbers, and their modification
  times); a reader takes the index only while both directories still have that stamp:
  a document added, removed or replaced (a new file renamed over it, as ``mv``, ``sed
  -i`` and most editors do) by anyone else changes it.  A document rewritten in place
  (same inode: ``echo > file``) is not noticed until the next change of a key; removing
  ``keys.index.json`` makes the next reader read every document (docs/keys.md);
* anything unexpected in the index (unreadable, not JSON, another format, a field of the
  wrong type) makes the reader fall back to the documents.

Writing it costs the writer one JSON dump of the index per transaction that changes a
key (about 1.5 MB at 10,000 minions), never per remote record: a master's joins and
sessions change remote records only.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

INDEX_NAME = "keys.index.json"
FORMAT = 1

Stamp = list[int]
_MASK = (1 << 64) - 1


@dataclass
class KeyIndex:
    """What the index holds (plain strings; ``acceptance`` is the stored word)."""

    roles: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    denied: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    def set_role(self, role: str, doc: dict[str, Any] | None) -> None:
        """A role document written (``doc``) or removed (None) by this keep's writer."""
        self.broken.pop(role, None)
        self.problems.pop(f"role/{role}", None)
        if doc is None:
            self.roles.pop(role, None)
        else:
            self.roles[role] = (str(doc["acceptance"]), str(doc["verhex"]), str(doc["pubhex"]))

    def set_denied(self, role: str, doc: dict[str, Any] | None) -> None:
        self.problems.pop(f"denied/{role}", None)
        pairs = [] if doc is None else [(str(k["verhex"]), str(k["pubhex"])) for k in doc["keys"]]
        if pairs:
            self.denied[role] = pairs
        else:
            self.denied.pop(role, None)


def stamp(dirpath: Path) -> Stamp:
    """The stamp of the keep's ``role`` and ``denied`` directories (OSError if absent):
    each one's inode and modification time, and a sum over its entries of their names
    and inode numbers (one directory listing, no file opened or stat-ed).  A file added,
    removed or renamed over another changes the sum whenever it happens; the time
    catches the rest (a name reused with its old inode) unless it happened within the
    file system's clock tick of the index being written."""
    values: Stamp = []
    for kind in ("role", "denied"):
        directory = dirpath / kind
        st = os.stat(directory)
        count = fold = 0
        with os.scandir(directory) as entries:
            for entry in entries:
                count += 1
                fold = (fold + entry.inode() * 1000003 + zlib.crc32(entry.name.encode())) & _MASK
        values += [st.st_ino, st.st_mtime_ns, count, fold]
    return values


def _current(dirpath: Path) -> dict[str, Any] | None:
    """The index's JSON object if it is there, of this format and stamp."""
    try:
        before = stamp(dirpath)
        with open(dirpath / INDEX_NAME, "rb") as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("stamp") != before:
        return None
    return data


def read_index(dirpath: Path) -> KeyIndex | None:
    """The index, if it is there, well-formed and still matches both directories."""
    data = _current(dirpath)
    if data is None:
        return None
    try:
        roles: dict[str, tuple[str, str, str]] = {}
        for role, (acceptance, verhex, pubhex) in data["roles"].items():
            # One pass, no call per entry: 10,000 of them are read for every listing.
            if not (type(acceptance) is str and type(verhex) is str  # noqa: E721
                    and type(pubhex) is str and type(role) is str):  # noqa: E721
                return None
            roles[role] = (acceptance, verhex, pubhex)
        return KeyIndex(
            roles=roles,
            denied={_str(r): [_pair(p) for p in v] for r, v in data["denied"].items()},
            broken={_str(r): _str(v) for r, v in data["broken"].items()},
            problems={_str(k): _str(v) for k, v in data["problems"].items()},
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


class KeyIds(NamedTuple):
    """The ids only, as a listing shows them: every role by its stored acceptance word,
    the roles with denied keys, the broken roles and the problems (in their keys' order,
    as ``KeepState.problems``)."""

    roles: dict[str, list[str]]
    denied: list[str]
    broken: list[str]
    problems: list[str]


def read_ids(dirpath: Path) -> KeyIds | None:
    """What ``read_index`` reads, grouped by id and state without the keys: the same
    checks, none of the 10,000 tuples a listing would throw away."""
    data = _current(dirpath)
    if data is None:
        return None
    try:
        by_word: dict[str, list[str]] = {}
        for role, (acceptance, verhex, pubhex) in data["roles"].items():
            if not (type(acceptance) is str and type(verhex) is str  # noqa: E721
                    and type(pubhex) is str and type(role) is str):  # noqa: E721
                return None
            ids = by_word.get(acceptance)
            if ids is None:
                ids = by_word[acceptance] = []
            ids.append(role)
        denied = [_str(r) for r, v in data["denied"].items() if [_pair(p) for p in v]]
        return KeyIds(
            roles=by_word,
            denied=denied,
            broken=list({_str(r): _str(v) for r, v in data["broken"].items()}),
            problems=[_str(v) for _, v in sorted(data["problems"].items(), key=_str_key)],
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def current_stamp(dirpath: Path) -> Stamp | None:
    """``stamp`` if the index file is there (None otherwise, or on an error)."""
    try:
        return stamp(dirpath) if os.path.exists(dirpath / INDEX_NAME) else None
    except OSError:
        return None


def write_index(dirpath: Path, index: KeyIndex) -> Stamp | None:
    """Replace the index with ``index``, stamped with the directories as they are now;
    the stamp.  Best effort (it is a cache): an error leaves no index (None)."""
    path = dirpath / INDEX_NAME
    tmp = dirpath / f".{INDEX_NAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        stamped = stamp(dirpath)
        data = json.dumps({
            "format": FORMAT,
            "stamp": stamped,
            "roles": index.roles,
            "denied": index.denied,
            "broken": index.broken,
            "problems": index.problems,
        }, separators=(",", ":")).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        with contextlib.suppress(OSError):
            remove_index(dirpath)
        return None
    return stamped


def remove_index(dirpath: Path) -> bool:
    """Remove the index; False if it was not there."""
    try:
        os.unlink(dirpath / INDEX_NAME)
    except FileNotFoundError:
        return False
    return True


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _str_key(item: tuple[Any, Any]) -> str:
    return _str(item[0])


def _pair(value: Any) -> tuple[str, str]:
    first, second = value
    return _str(first), _str(second)

