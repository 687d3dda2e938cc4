"""The master's job cache and minion data cache, written in batches.

``QueuedJobCache`` is a ``JobCache`` whose ``save_load``/``save_return`` encode the
record (so a record that cannot be stored still fails in the caller, as before) and
return at once; everything queued is then written as one batch (``JobCache.commit``: two
file-system syncs per batch, however many returns: group commit), by a ``KeepWriter``
thread (``threaded=True``), in the caller's thread at ``writer.commit_now()``
(``threaded=False``), or, as the master does, by a child process the loop hands each
pass's batch to (``process=True``, ``raetsalt.daemon.cacheproc``): the writing is off
the loop and off its interpreter lock, on the other core.

Reads see what is queued and not yet written (a ``jobs.lookup_jid`` right after a return
finds it).  Failures are the writer's: logged once per interval, retried, nothing lost
while the process runs; ``close`` writes what is left.  After a crash every file is the
old or the new one, never torn, and everything the writer reported ``committed`` is there
(the test kills a writing process).

``QueuedDataCache`` does the same for the grains each minion reports when it connects
(Salt's minion data cache): ten thousand minions connecting meant ten thousand file
writes in the loop.  Those files are not synced (as before: the minions report again).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.daemon.cacheproc import ProcessWriter
from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import LOAD, JobCache, encode_entry
from raetsalt.drivers.clock import monotonic
from raetsalt.drivers.keepwriter import KeepWriter
from raetsalt.errors import QuotaExceeded
from raetsalt.services.quota import MinionQuota

WINDOW = 0.2
"""Seconds returns gather before a batch is written: a handful of batches a second."""

Entry = tuple[str, str, bytes]
"""(jid, file name, JSON text)."""


class QueuedJobCache(JobCache):
    """A job cache written in the background (module docstring)."""

    def __init__(self, root: str | os.PathLike[str], *, threaded: bool = True,
                 process: bool = False, quota: MinionQuota | None = None,
                 clock: Callable[[], float] = monotonic) -> None:
        super().__init__(root)
        self.quota = quota
        """Per-minion limits on returns (with the process writer only: its backlog)."""
        self.clock = clock
        self._lock = threading.Lock()
        self._queued: dict[str, dict[str, bytes]] = {}
        """jid -> file name -> JSON text, until it is written."""
        self.writer: KeepWriter[Entry] | ProcessWriter
        if process:
            # A child process writes; the loop hands it each pass's batch (cacheproc).
            self.writer = ProcessWriter(self.root, self._written)
        else:
            # Unthreaded: queued until ``commit_now`` (a loop calls it once per pass).
            self.writer = KeepWriter(self, threaded=threaded, window=WINDOW,
                                     deferred=not threaded)

    # -- writes ---------------------------------------------------------------------------

    def save_load(self, jid: str, load: dict[str, Any]) -> None:
        self._dir(jid)  # a bad jid fails here
        self._queue(jid, LOAD, encode_entry({**load, "jid": jid}, LOAD))

    def save_return(self, jid: str, minion: str, ret: dict[str, Any]) -> None:
        """Queue a return; ``QuotaExceeded`` (nothing kept) when it is over a quota."""
        name = self.return_name(jid, minion)
        text = encode_entry(ret, name)
        writer = self.writer
        if self.quota is not None and isinstance(writer, ProcessWriter):
            why = self.quota.admit_return(minion, len(text), writer.held(name),
                                          writer.backlog, self.clock())
            if why is not None:
                raise QuotaExceeded(why)
        self._queue(jid, name, text)

    def backlog(self) -> int:
        """Bytes accepted and not yet on disk (the process writer's; else 0)."""
        return self.writer.backlog if isinstance(self.writer, ProcessWriter) else 0

    def _queue(self, jid: str, name: str, text: bytes) -> None:
        with self._lock:
            self._queued.setdefault(jid, {})[name] = text
        self.writer.submit([(jid, name, text)])

    def commit(self, entries: list[Entry]) -> None:
        """The writer's batch (``KeepWriter`` calls it, in its thread)."""
        super().commit(entries)  # a file saved twice in one batch: the last text wins
        self._written(entries)

    def _written(self, entries: list[Entry]) -> None:
        """``entries`` are on disk: readers find them there now (unless saved again)."""
        with self._lock:
            for jid, name, text in entries:
                files = self._queued.get(jid)
                if files is not None and files.get(name) is text:
                    del files[name]
                    if not files:
                        del self._queued[jid]

    def flush(self, timeout: float = 10.0) -> bool:
        return self.writer.flush(timeout)

    def close(self) -> None:
        self.writer.close()

    # -- reads: the disk, and what is queued ------------------------------------------------

    def _queued_of(self, jid: str) -> dict[str, bytes]:
        with self._lock:
            return dict(self._queued.get(jid, {}))

    def get_load(self, jid: str) -> dict[str, Any] | None:
        text = self._queued_of(jid).get(LOAD)
        if text is None:
            return super().get_load(jid)
        load = json.loads(text)
        return load if isinstance(load, dict) else None

    def get_returns(self, jid: str) -> dict[str, dict[str, Any]]:
        returns = super().get_returns(jid)
        for name, text in self._queued_of(jid).items():
            if name != LOAD:
                data = json.loads(text)
                if isinstance(data, dict):
                    returns[name[: -len(".json")]] = data
        return dict(sorted(returns.items()))

    def jids(self) -> list[str]:
        with self._lock:
            queued = set(self._queued)
        return sorted(set(super().jids()) | queued)


Grains = tuple[str, bytes | None]
"""(minion, JSON text of its data cache file, or None to remove it)."""


class QueuedDataCache(MinionDataCache):
    """The minion data cache, written by a thread in batches (module docstring)."""

    def __init__(self, root: str | os.PathLike[str], *, threaded: bool = True) -> None:
        super().__init__(root)
        self.writer: KeepWriter[Grains] = KeepWriter(self, threaded=threaded, window=WINDOW)

    def save(self, minion: str, grains: Mapping[str, Any]) -> None:
        self.path_of(minion)  # a bad id fails here
        self.writer.submit([(minion, encode_entry({"grains": grains}, minion))])

    def remove(self, minion: str) -> None:
        self.writer.submit([(minion, None)])  # in order: after any save still queued

    def commit(self, entries: list[Grains]) -> None:
        latest = dict(entries)  # a minion saved twice in one batch: the last wins
        for minion, text in latest.items():
            path = self.path_of(minion)
            if text is None:
                path.unlink(missing_ok=True)
                continue
            tmp = path.with_name(f".{path.name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
            os.replace(tmp, path)

    def close(self) -> None:
        self.writer.close()
