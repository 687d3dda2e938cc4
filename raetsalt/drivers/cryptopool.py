"""Threads that do a batch's crypto beside the road's loop (``raetsalt.engine.precrypt``).

``CryptoPool(n).perform(jobs)`` does ``jobs`` (``raetsalt.crypto.jobs``) on ``n`` worker
threads and the calling thread together and returns their answers in order.  Each job is
one libsodium call, which releases the GIL, so on a machine with a spare core the
batch takes about 1/(n+1) of the time; the Python around each call is a few percent of
it.  A batch smaller than ``MIN_BATCH`` is done by the caller alone (waking a thread
costs more than it saves).

The caller never waits for a thread: when it finds no job left to start, it returns,
and a job a thread is still doing is unanswered (``None``; a thread the system did not
schedule takes at most one job before the caller has taken the others).  An unanswered
job, like one that failed (a bug, never bad input: ``perform`` does not raise for any
key, message or signature), is done by the road itself.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Sequence

from raetsalt.crypto.jobs import Answer, CryptoJob, perform

__all__ = ["MIN_BATCH", "CryptoPool"]

log = logging.getLogger(__name__)

MIN_BATCH = 4
"""Jobs below which the caller does a batch alone."""
MAX_THREADS = 16


class CryptoPool:
    """``threads`` worker threads (0: the caller does everything itself)."""

    def __init__(self, threads: int) -> None:
        if not 0 <= threads <= MAX_THREADS:
            raise ValueError(f"crypto threads must be 0 to {MAX_THREADS}, not {threads}")
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"road-crypto-{n}", daemon=True)
            for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        self.batches = 0
        """Batches shared with the threads."""

    @property
    def threads(self) -> int:
        return len(self._threads)

    def perform(self, jobs: Sequence[CryptoJob]) -> list[Answer]:
        """The answers of ``jobs`` (``None``: failed, or still being done by a thread)."""
        answers: list[Answer] = [None] * len(jobs)
        if not self._threads or len(jobs) < MIN_BATCH:
            _run(jobs, answers, iter(range(len(jobs))))
            return answers
        # One shared iterator hands out the jobs: each next() is atomic under the GIL.
        indices = iter(range(len(jobs)))
        for _ in self._threads:
            self._tasks.put(lambda: _run(jobs, answers, indices))
        _run(jobs, answers, indices)
        self.batches += 1
        return list(answers)  # a copy: what a thread answers later goes nowhere

    def close(self) -> None:
        """Stop the threads (after the batch they are doing).  Idempotent."""
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _work(self) -> None:
        while (work := self._tasks.get()) is not None:
            work()


def _run(jobs: Sequence[CryptoJob], answers: list[Answer], indices: Iterator[int]) -> None:
    for index in indices:
        try:
            answers[index] = perform(jobs[index])
        except Exception:  # noqa: BLE001 - unanswered: the road does it on its loop
            log.debug("crypto job failed", exc_info=True)
