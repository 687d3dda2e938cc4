"""The master's job cache, written without making its event loop wait.

``QueuedJobCache`` is a ``JobCache`` whose ``save_load``/``save_return`` encode the
record (so a record that cannot be stored still fails in the caller, as before) and
return at once; a ``KeepWriter`` thread writes everything queued so far as one batch
(``JobCache.commit``: two file-system syncs per batch, however many returns: group
commit).  With ten thousand minions answering a ``test.ping``, that is a few syncs in the
background instead of ten thousand fsyncs in the loop, and the disk waits happen outside
the interpreter lock, on the other core.

Reads see what is queued and not yet written (a ``jobs.lookup_jid`` right after a return
finds it).  Failures are the writer's: logged once per interval, retried, nothing lost
while the process runs; ``close`` writes what is left.  After a crash every file is the
old or the new one, never torn, and everything the writer reported ``committed`` is there
(the test kills a writing process).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from raetsalt.daemon.jobcache import LOAD, JobCache, encode_entry
from raetsalt.drivers.keepwriter import KeepWriter

Entry = tuple[str, str, bytes]
"""(jid, file name, JSON text)."""


class QueuedJobCache(JobCache):
    """A job cache written in the background (module docstring)."""

    def __init__(self, root: str | os.PathLike[str], *, threaded: bool = True) -> None:
        super().__init__(root)
        self._lock = threading.Lock()
        self._queued: dict[tuple[str, str], bytes] = {}
        self.writer: KeepWriter[Entry] = KeepWriter(self, threaded=threaded)

    # -- writes ---------------------------------------------------------------------------

    def save_load(self, jid: str, load: dict[str, Any]) -> None:
        self._dir(jid)  # a bad jid fails here
        self._queue(jid, LOAD, encode_entry({**load, "jid": jid}, LOAD))

    def save_return(self, jid: str, minion: str, ret: dict[str, Any]) -> None:
        name = self.return_name(jid, minion)
        self._queue(jid, name, encode_entry(ret, name))

    def _queue(self, jid: str, name: str, text: bytes) -> None:
        with self._lock:
            self._queued[(jid, name)] = text
        self.writer.submit([(jid, name, text)])

    def commit(self, entries: list[Entry]) -> None:
        """The writer's batch (``KeepWriter`` calls it, in its thread)."""
        latest: dict[tuple[str, str], bytes] = {}
        for jid, name, text in entries:
            latest[(jid, name)] = text  # a file saved twice in one batch: the last wins
        super().commit([(jid, name, text) for (jid, name), text in latest.items()])
        with self._lock:
            for key, text in latest.items():
                if self._queued.get(key) is text:
                    del self._queued[key]

    def flush(self, timeout: float = 10.0) -> bool:
        return self.writer.flush(timeout)

    def close(self) -> None:
        self.writer.close()

    # -- reads: the disk, and what is queued ------------------------------------------------

    def _queued_of(self, jid: str) -> dict[str, bytes]:
        with self._lock:
            return {name: text for (j, name), text in self._queued.items() if j == jid}

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
            queued = {jid for jid, _ in self._queued}
        return sorted(set(super().jids()) | queued)
