"""A client that repeats one request as fast as it is answered, in a thread of its own
(load on a daemon while a test breaks something): ``wait(n)`` returns once ``n`` more
answers came."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Rounds(Generic[T]):
    def __init__(self, request: Callable[[int], T]) -> None:
        """``request(turn)`` is called for turn 0, 1, 2, ... until ``stop``."""
        self.request = request
        self.answers: list[T] = []
        self._done = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        turn = 0
        while not self._done.is_set():
            got = self.request(turn)
            turn += 1
            with self._progress:
                self.answers.append(got)
                self._progress.notify_all()

    def start(self) -> Rounds[T]:
        self._thread.start()
        return self

    def wait(self, n: int, timeout: float = 180.0) -> None:
        with self._progress:
            target = len(self.answers) + n
            assert self._progress.wait_for(lambda: len(self.answers) >= target, timeout)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(60)
