"""Threads that do a batch's crypto beside the road's loop (``raetsalt.engine.precrypt``).

``CryptoPool(n).perform(jobs)`` does ``jobs`` (``raetsalt.crypto.jobs``) on ``n`` worker
threads and the calling thread together and returns their answers in order.  Each job is
one libsodium call, which releases the GIL, so on a machine with a spare core the
batch takes about 1/(n+1) of the time; the Python around each call is a few percent of
it.  A batch smaller than ``MIN_BATCH`` is done by the caller alone (waking a thread
costs more than it saves).  A job that fails (a bug, never bad input: ``perform`` does
not raise for any key, message or signature) is left unanswered, and the road does it
itself.
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
        self._tasks: queue.SimpleQueue[tuple[Callable[[], None], threading.Event] | None] = (
            queue.SimpleQueue()
        )
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
        """The answers of ``jobs`` (``None`` where a job failed)."""
        answers: list[Answer] = [None] * len(jobs)
        if not self._threads or len(jobs) < MIN_BATCH:
            _run(jobs, answers, iter(range(len(jobs))))
            return answers
        # One shared iterator hands out the jobs: each next() is atomic under the GIL.
        indices = iter(range(len(jobs)))
        done = [threading.Event() for _ in self._threads]
        for event in done:
            self._tasks.put((lambda: _run(jobs, answers, indices), event))
        _run(jobs, answers, indices)
        for event in done:
            event.wait()
        self.batches += 1
        return answers

    def close(self) -> None:
        """Stop the threads (after the batch they are doing).  Idempotent."""
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []

    def _work(self) -> None:
        while (task := self._tasks.get()) is not None:
            work, done = task
            try:
                work()
            finally:
                done.set()


def _run(jobs: Sequence[CryptoJob], answers: list[Answer], indices: Iterator[int]) -> None:
    for index in indices:
        try:
            answers[index] = perform(jobs[index])
        except Exception:  # noqa: BLE001 - unanswered: the road does it on its loop
            log.debug("crypto job failed", exc_info=True)
