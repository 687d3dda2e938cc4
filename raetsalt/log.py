"""Console logging set-up with Salt's call shape (``salt.log.setup_console_logger``)."""

from __future__ import annotations

import logging

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
