"""The master's ``file_roots`` on disk: find, hash, list and read the files it serves.

Runs in the master's file worker process (``raetsalt.saltbridge.worker``), never in the
daemon's loop.  Every path arrives already cleaned (``paths.clean_relpath``: relative,
no ``..``); here the disk has the last word: a path whose real location (symbolic links
resolved) is not inside the root it was found in raises ``PathRefused``, and only
regular files are read (a FIFO or a device in ``file_roots`` is "not found", and files
are opened non-blocking).  Listings leave out what leads out of the root, follow links
that stay inside (once each: a link loop ends there), stop at ``MAX_LIST_ENTRIES``
entries and are kept ``LIST_CACHE_SECONDS`` (Salt's ``fileserver_list_cache_time``).
Hashes are kept per (inode, size, mtime) for the life of the worker.

The answers have the shapes Salt's fileclient expects from ``_file_hash``, ``_file_find``,
``_serve_file``, ``_file_list``, ``_dir_list`` and ``_file_list_emptydirs``; the master's
absolute paths never appear in them.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from .paths import PathRefused

log = logging.getLogger(__name__)

MAX_LIST_ENTRIES = 100_000
LIST_CACHE_SECONDS = 20.0
_HASH_CACHE_SIZE = 4096
_READ_BLOCK = 1 << 20


@dataclass(slots=True)
class _Listing:
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    empty_dirs: list[str] = field(default_factory=list)
    made: float = 0.0


def _inside(real: str, root_real: str) -> bool:
    return real == root_real or real.startswith(root_real.rstrip(os.sep) + os.sep)


class FileRoots:
    """One master's ``file_roots`` (saltenv -> directories, already absolute)."""

    def __init__(self, roots: Mapping[str, Sequence[str]], *, hash_type: str = "sha256",
                 buffer_size: int = 65536) -> None:
        self.roots = {env: list(dirs) for env, dirs in roots.items()}
        self.hash_type = hash_type
        self.buffer_size = buffer_size
        self._hashes: OrderedDict[tuple[int, int, int, int], str] = OrderedDict()
        self._lists: dict[str, _Listing] = {}

    def envs(self) -> list[str]:
        return sorted(self.roots)

    # -- one file -------------------------------------------------------------------------

    def locate(self, saltenv: str, rel: str) -> tuple[str, os.stat_result] | None:
        """The real path and stat of ``rel`` in the first root of ``saltenv`` that has it;
        None when no root has it as a regular file.  Raises ``PathRefused`` when it
        exists but really lives outside its root."""
        for root in self.roots.get(saltenv, []):
            candidate = os.path.join(root, rel)
            if not os.path.lexists(candidate):
                continue
            real = os.path.realpath(candidate)
            if not _inside(real, os.path.realpath(root)):
                raise PathRefused(f"salt://{rel} leads out of file_roots (symbolic link)")
            try:
                info = os.stat(real)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                return real, info
        return None

    def file_hash(self, saltenv: str, rel: str) -> dict[str, Any]:
        """``{hsum, hash_type}``, or ``{}`` when there is no such file (Salt's answer)."""
        found = self.locate(saltenv, rel)
        if found is None:
            return {}
        real, info = found
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        hsum = self._hashes.get(key)
        if hsum is None:
            digest = hashlib.new(self.hash_type)
            with _open_regular(real) as handle:
                while block := handle.read(_READ_BLOCK):
                    digest.update(block)
            hsum = digest.hexdigest()
            self._hashes[key] = hsum
            if len(self._hashes) > _HASH_CACHE_SIZE:
                self._hashes.popitem(last=False)
        return {"hsum": hsum, "hash_type": self.hash_type}

    def find(self, saltenv: str, rel: str) -> dict[str, Any]:
        """``{rel, stat}`` of the file (``stat`` as ``os.stat`` lists it), or empty
        fields when there is none."""
        found = self.locate(saltenv, rel)
        if found is None:
            return {"path": "", "rel": ""}
        return {"path": rel, "rel": rel, "stat": list(found[1])}

    def serve(self, saltenv: str, rel: str, loc: int, level: int | None) -> dict[str, Any]:
        """The piece of the file at byte ``loc`` (at most ``buffer_size`` bytes; empty at
        the end), gzip-compressed at ``level`` when asked."""
        found = self.locate(saltenv, rel)
        if found is None:
            return {"data": b"", "dest": ""}
        with _open_regular(found[0]) as handle:
            handle.seek(loc)
            data = handle.read(self.buffer_size)
        ret: dict[str, Any] = {"data": data, "dest": rel}
        if level and data:
            ret["data"] = gzip.compress(data, level)
            ret["gzip"] = level
        return ret

    # -- listings -------------------------------------------------------------------------

    # The prefix filters as Salt's fileserver filters it: without its slashes, so that
    # ``tree/`` lists the directory ``tree`` itself too (file.recurse's ``<dest>/.``).
    def file_list(self, saltenv: str, prefix: str = "") -> list[str]:
        prefix = prefix.strip("/")
        return [p for p in self._listing(saltenv).files if p.startswith(prefix)]

    def dir_list(self, saltenv: str, prefix: str = "") -> list[str]:
        prefix = prefix.strip("/")
        return [p for p in self._listing(saltenv).dirs if p.startswith(prefix)]

    def empty_dirs(self, saltenv: str, prefix: str = "") -> list[str]:
        prefix = prefix.strip("/")
        return [p for p in self._listing(saltenv).empty_dirs if p.startswith(prefix)]

    def _listing(self, saltenv: str) -> _Listing:
        now = time.monotonic()
        cached = self._lists.get(saltenv)
        if cached is not None and now - cached.made < LIST_CACHE_SECONDS:
            return cached
        files: set[str] = set()
        dirs: set[str] = set()
        empty: set[str] = set()
        budget = [MAX_LIST_ENTRIES]
        for root in self.roots.get(saltenv, []):
            root_real = os.path.realpath(root)
            if os.path.isdir(root_real):
                self._walk(root_real, "", root_real, files, dirs, empty, {root_real}, budget)
        if budget[0] <= 0:
            log.warning("file_roots of saltenv %r: listing stopped at %d entries",
                        saltenv, MAX_LIST_ENTRIES)
        listing = _Listing(sorted(files), sorted(dirs), sorted(empty), now)
        self._lists[saltenv] = listing
        return listing

    def _walk(self, path: str, rel: str, root_real: str, files: set[str], dirs: set[str],
              empty: set[str], seen: set[str], budget: list[int]) -> None:
        try:
            with os.scandir(path) as entries:
                names = sorted(entry.name for entry in entries)
        except OSError:
            return
        if not names and rel:
            empty.add(rel)
        for name in names:
            if budget[0] <= 0:
                return
            child = os.path.join(path, name)
            child_rel = f"{rel}/{name}" if rel else name
            real = os.path.realpath(child)
            if not _inside(real, root_real):
                continue  # leads out of the root: never listed, never served
            budget[0] -= 1
            if os.path.isdir(real):
                if real in seen:
                    continue
                dirs.add(child_rel)
                self._walk(real, child_rel, root_real, files, dirs, empty, seen | {real},
                           budget)
            elif os.path.isfile(real):
                files.add(child_rel)


def _open_regular(path: str) -> BinaryIO:
    """Open a file for reading without blocking on a FIFO; refuse what is not regular."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PathRefused("not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")
