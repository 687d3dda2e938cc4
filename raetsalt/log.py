"""Console logging set-up with Salt's call shape (``salt.log.setup_console_logger``), and
``clip`` for showing untrusted input in log lines and error messages."""

from __future__ import annotations

import logging
import reprlib

# Salt's level names; 'all' and 'garbage' show everything.
LOG_LEVELS: dict[str, int] = {
    "all": 1,
    "garbage": 1,
    "trace": 5,
    "debug": logging.DEBUG,
    "profile": 15,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "quiet": 1000,
}


def setup_console_logger(log_level: str = "error", log_format: str | None = None,
                         date_format: str | None = None) -> None:
    """Send log records at ``log_level`` and above to stderr."""
    level = LOG_LEVELS.get(str(log_level).lower(), logging.ERROR)
    logging.basicConfig(
        level=level,
        format=log_format or "[%(levelname)-8s] %(message)s",
        datefmt=date_format,
        force=True,
    )


CLIP = 80
"""Characters of an untrusted value that a log line or an error message shows."""

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = CLIP
_REPR.maxlevel = 3


def clip(value: object, limit: int = CLIP, *, bare: bool = False) -> str:
    """``repr(value)`` cut to about ``limit`` characters with ``...`` (and the full
    length of a cut string): how untrusted input (an id, a user name, a function, an
    argument) appears in errors and logs, so that a 10,000-character id costs one short
    line, not 10 kB per message.  ``bare``: a printable string without quotes."""
    if isinstance(value, str):
        shown = value if len(value) <= limit else value[:limit]
        text = shown if bare and shown.isprintable() else repr(shown)
        return text if shown is value else f"{text}... ({len(value)} characters)"
    text = _REPR.repr(value)
    return text if len(text) <= 2 * limit else text[:limit] + "..."


class Throttle:
    """When to log a repeated event: up to ``burst`` lines per ``interval`` seconds for
    each key, then silence until the interval is over, when the next line also counts
    what was held back.  Pure (the caller passes ``now``); at most ``max_keys`` keys are
    remembered (the least recently seen go first)."""

    def __init__(self, interval: float = 60.0, burst: int = 1, max_keys: int = 1024) -> None:
        self.interval = interval
        self.burst = burst
        self.max_keys = max_keys
        # key -> [window start, lines in the window, occurrences held back]
        self._seen: dict[object, list[float]] = {}

    def note(self, key: object, now: float) -> int:
        """Count one occurrence of ``key``: the number of occurrences a log line written
        now stands for (1, or more when some were held back), or 0 to stay quiet."""
        state = self._seen.pop(key, None)
        if state is None or now - state[0] >= self.interval:
            held = 0 if state is None else int(state[2])
            state = [now, 1, 0]
            count = held + 1
        elif state[1] < self.burst:
            state[1] += 1
            count = 1
        else:
            state[2] += 1
            count = 0
        self._seen[key] = state
        while len(self._seen) > self.max_keys:
            del self._seen[next(iter(self._seen))]
        return count
