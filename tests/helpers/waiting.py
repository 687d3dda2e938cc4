"""Polling for conditions no event announces (a daemon's files, a background write)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T | None], timeout: float = 10.0, poll: float = 0.02
             ) -> T:
    """The first truthy value of ``condition()``, polled every ``poll`` seconds; fails
    the test when none comes within ``timeout`` (a hang detector, not a time limit)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(poll)
    return value
