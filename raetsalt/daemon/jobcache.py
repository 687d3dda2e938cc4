"""The master's job cache (an adapter: files).

Jids are Salt 3008's (``raetsalt.services.jids``).  The cache is
embedded (no server): one directory per job under ``<cachedir>/jobs``, holding the
publish record (``.load.json``, with the minions expected to answer) and one file per
minion return.  Every file is written to a temporary name, flushed and renamed, so a
crash leaves either the old state or the new one, never half a file; files are 0600 in
0700 directories.  ``keep_jobs`` hours after a job started, ``clean`` removes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from raetsalt.daemon.storable import encode_json
from raetsalt.errors import KeepError
from raetsalt.keep.store import sync_filesystem
from raetsalt.services.jids import JID, new_jid

_MINION = re.compile(r"[^/\x00]{1,255}\Z")


LOAD = ".load.json"
"""The file of a job's publish record (a minion's return is ``<id>.json``)."""


def encode_entry(data: Any, name: str) -> bytes:
    """The JSON text a job cache file holds, for any value a decoder accepts
    (``raetsalt.daemon.storable``); ``KeepError`` only if ``data`` has none."""
    return encode_json(data, name)


class JobCache:
    """Publish records and returns of jobs, on disk under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _dir(self, jid: str) -> Path:
        if not JID.match(jid):
            raise KeepError(f"not a jid: {jid!r}")
        return self.root / jid

    def _write(self, path: Path, data: Any) -> None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        text = encode_entry(data, path.name)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def return_name(self, jid: str, minion: str) -> str:
        """The file name of ``minion``'s return (``KeepError`` if the ids are unusable)."""
        self._dir(jid)
        if not _MINION.match(minion) or minion.startswith("."):
            raise KeepError(f"not a minion id for the job cache: {minion!r}")
        return f"{minion}.json"

    def commit(self, entries: list[tuple[str, str, bytes]]) -> None:
        """Write ``(jid, file name, JSON text)`` entries as one batch with two file-system
        syncs however many there are (group commit): all go to temporary files, the file
        system is synced, all are renamed into place, and it is synced again.  A crash
        leaves each file old or new, never torn; a temporary name starts with a dot, so
        readers never see one.  One writer per cache (the master's) is assumed: the
        temporary name is the file's, dotted (no random names to make).  A file given
        twice in one batch (a job's record saved again, as each sub-batch of a batch adds
        its minions) is written once, with the last text."""
        latest: dict[tuple[str, str], bytes] = {}
        for jid, name, text in entries:
            latest[(jid, name)] = text
        staged: list[tuple[str, Path]] = []
        made: set[str] = set()
        try:
            for (jid, name), text in latest.items():
                directory = self._dir(jid)
                if jid not in made:
                    directory.mkdir(mode=0o700, exist_ok=True)
                    made.add(jid)
                path = directory / name
                tmp = f"{directory}/.{name}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
                staged.append((tmp, path))
                try:
                    os.write(fd, text)
                finally:
                    os.close(fd)
            sync_filesystem(self.root)
            for done, (tmp, path) in enumerate(staged):
                try:
                    os.replace(tmp, path)
                except BaseException:
                    del staged[:done]  # those are in place: nothing to remove
                    raise
            staged.clear()
            sync_filesystem(self.root)
        finally:
            for tmp, _ in staged:
                Path(tmp).unlink(missing_ok=True)

    def _read(self, path: Path) -> Any:
        try:
            with path.open(encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise KeepError(f"{path}: unreadable job cache file: {exc}") from exc

    def save_load(self, jid: str, load: dict[str, Any]) -> None:
        """Record a publish: ``{jid, fun, arg, tgt, tgt_type, user, minions}``."""
        self._write(self._dir(jid) / LOAD, {**load, "jid": jid})

    def save_return(self, jid: str, minion: str, ret: dict[str, Any]) -> None:
        """Record one minion's return: ``{return, retcode, success, fun, fun_args}``."""
        self._write(self._dir(jid) / self.return_name(jid, minion), ret)

    def get_load(self, jid: str) -> dict[str, Any] | None:
        load = self._read(self._dir(jid) / LOAD)
        return load if isinstance(load, dict) else None

    def get_returns(self, jid: str) -> dict[str, dict[str, Any]]:
        directory = self._dir(jid)
        if not directory.is_dir():
            return {}
        returns = {}
        for path in sorted(directory.glob("*.json")):
            if not path.name.startswith("."):
                data = self._read(path)
                if isinstance(data, dict):
                    returns[path.stem] = data
        return returns

    def jids(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if JID.match(p.name) and p.is_dir())

    def clean(self, now: datetime, keep_hours: float) -> list[str]:
        """Remove jobs that started more than ``keep_hours`` before ``now``."""
        limit = new_jid(now - timedelta(hours=keep_hours))
        removed = [jid for jid in self.jids() if jid < limit]
        for jid in removed:
            shutil.rmtree(self.root / jid, ignore_errors=True)
        return removed
