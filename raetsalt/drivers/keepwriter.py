"""Write a road's persistence events to its keep without making the event loop wait.

``KeepWriter.submit`` queues the writes and returns at once; a thread takes everything
queued so far as one batch and commits it with ``Keep.commit`` (for a ``FileKeep``: atomic
files and two file-system syncs per batch, however many documents: group commit).  So
a master taking a thousand joins a second does a few syncs a second, in the background,
instead of one fsync per join inside ``receive_datagram``.

Each batch gets a sequence number; ``committed`` is the highest one on disk, and the
writer's file descriptor becomes readable whenever it advances, so a selector loop can
wait for "my change is durable" (the key tool's answers do).  A failed commit (disk
full, ...) keeps its writes, is retried every ``RETRY`` seconds together with newer
ones, and is logged at most once per interval, without a traceback (``failing`` holds
the reason meanwhile).

``threaded=False`` commits in the caller's thread at each ``submit`` (in-memory keeps in
tests), with the same failure handling: what fails is retried at the next submission.

Anything with a ``commit(batch)`` can be written this way (``Committer``): the master's
job cache is too (``raetsalt.daemon.cachewriter``).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from raetsalt.drivers.clock import monotonic
from raetsalt.errors import KeepError
from raetsalt.keep.records import Keep, KeepWrite
from raetsalt.keep.store import FileKeep
from raetsalt.log import Throttle

log = logging.getLogger(__name__)

RETRY = 1.0
"""Seconds between attempts while commits fail."""

W = TypeVar("W")


class Committer(Protocol[W]):
    """What a writer writes to: ``commit`` applies a batch durably, or raises
    ``KeepError``/``OSError`` and applies none of it that matters."""

    def commit(self, writes: list[W]) -> None: ...


class KeepWriter(Generic[W]):
    """Commits batches of writes to ``keep`` (module docstring)."""

    def __init__(
        self,
        keep: Committer[W],
        *,
        threaded: bool = True,
        clock: Callable[[], float] = monotonic,
        window: float = 0.0,
        deferred: bool = False,
    ) -> None:
        self.keep = keep
        self.deferred = deferred
        self._retry_at = 0.0
        """Unthreaded and deferred: ``submit`` only queues; ``flush`` commits it all."""
        self.window = window
        """Seconds at least between the thread's commits (0: none): under load writes
        gather into fewer, larger batches, with fewer turns at the interpreter lock while
        the loop is busy; the first write after a quiet spell is committed at once."""
        self._last_commit = float("-inf")
        self.submitted = 0
        self.committed = 0
        self.failing: str | None = None
        self.attempts = 0
        """Commits tried so far; it moves after the wake-up byte is sent."""
        self._pending: list[W] = []
        self._cond = threading.Condition()
        self._closing = False
        self.clock = clock
        self._failures = Throttle(60.0)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread: threading.Thread | None = None
        if threaded:
            self._thread = threading.Thread(target=self._run, name="keep-writer", daemon=True)
            self._thread.start()

    def submit(self, writes: list[W]) -> int:
        """Queue ``writes``; returns the sequence number that is durable once
        ``committed`` reaches it."""
        with self._cond:
            self._pending.extend(writes)
            self.submitted += 1
            sequence = self.submitted
            self._cond.notify()
        if self._thread is None and not self.deferred:
            self._commit_pending()
        return sequence

    def commit_now(self) -> bool:
        """Unthreaded: commit what is queued, in the caller's thread (while commits fail,
        at most once every ``RETRY`` seconds); False if it is not all committed."""
        if self._thread is not None or not self._pending:
            return not self._pending
        if self.failing is not None and self.clock() < self._retry_at:
            return False
        ok = self._commit_pending()
        if not ok:
            self._retry_at = self.clock() + RETRY
        return ok

    def fileno(self) -> int:
        """Readable when a commit was tried (``attempts`` moved; call ``drain_wake``)."""
        return self._wake_r.fileno()

    def drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:  # BlockingIOError: nothing (more) to read
            pass

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted so far is committed; False on time-out."""
        if self._thread is None:
            self._commit_pending()
        with self._cond:
            target = self.submitted
            return self._cond.wait_for(lambda: self.committed >= target, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Commit what is queued (waiting at most ``timeout``, less while commits fail),
        then stop the thread."""
        if not self.flush(timeout if self.failing is None else min(timeout, 2 * RETRY)):
            log.error("the keep could not be written before stopping: %s", self.failing)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending) or self._closing)
                if not self._pending:
                    return
                wait = self._last_commit + self.window - self.clock()
                if wait > 0 and not self._closing:
                    self._cond.wait_for(lambda: self._closing, wait)
            self._last_commit = self.clock()
            if not self._commit_pending():
                with self._cond:
                    if self._closing:
                        return
                    self._cond.wait_for(lambda: self._closing, RETRY)

    def _commit_pending(self) -> bool:
        """Commit everything queued as one batch; False (writes kept) if it failed."""
        with self._cond:
            batch, self._pending = self._pending, []
            sequence = self.submitted
        if not batch:
            return True
        try:
            self.keep.commit(batch)
        except (KeepError, OSError) as exc:
            self._wake()
            with self._cond:
                self._pending[:0] = batch  # older writes first: the newest still wins
                self.failing = str(exc)
                self.attempts += 1
            times = self._failures.note("commit", self.clock())
            if times:
                log.error("the keep cannot be written (%d attempt(s)): %s", times, exc)
            return False
        self._wake()
        with self._cond:
            self.committed = max(self.committed, sequence)
            self.failing = None
            self.attempts += 1
            self._cond.notify_all()
        return True

    def _wake(self) -> None:
        # Before ``attempts`` moves: a loop that sees it move finds the byte to read.
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # the loop is behind on wake-ups already: one byte is enough


KEEP_WINDOW = 0.1
"""Seconds at least between two commits to a keep on disk: while many estates join, a batch
holds dozens of them (each estate's role and remote written once, however often they
changed) for two file-system syncs, ten times a second at most; a lone change (an
operator's, one estate's) is written at once.  Nothing in the road waits for it."""


def writer_for(keep: Keep) -> KeepWriter[KeepWrite]:
    """A background writer for keeps on disk, a synchronous one for anything else."""
    threaded = isinstance(keep, FileKeep)
    return KeepWriter(keep, threaded=threaded, window=KEEP_WINDOW if threaded else 0.0)
