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


def clip(value: object, limit: int = CLIP) -> str:
    """``repr(value)`` cut to about ``limit`` characters with ``...`` (and the full
    length of a cut string): how untrusted input (an id, a user name, a function, an
    argument) appears in errors and logs, so that a 10,000-character id costs one short
    line, not 10 kB per message."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}... ({len(value)} characters)"
    text = _REPR.repr(value)
    return text if len(text) <= 2 * limit else text[:limit] + "..."
