"""A daemon's log: the console and a log file nobody but its owner (and group) reads.

Used by the daemons' process entry (``raetsalt.cli.daemon``) and by the processes they
start that log on their own (the Salt zygote, ``raetsalt.saltbridge.control``).
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import stat
import sys
from typing import Any

from raetsalt.log import LOG_LEVELS as LEVELS


def setup_logging(opts: dict[str, Any], console_level: str, *, node: str) -> None:
    """Console (stderr) and file handlers on the root logger.  Raises OSError when the
    log file cannot be opened."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(LEVELS[console_level])
    console.setFormatter(logging.Formatter("[%(levelname)-8s] %(message)s"))
    file_level = opts.get("log_level_logfile") or console_level
    handler = PrivateFileHandler(opts["log_file"], encoding="utf-8")
    handler.setLevel(LEVELS[file_level])
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s [%(name)-18s][%(levelname)-8s][raetsalt-{node} %(process)d] %(message)s"
        )
    )
    root.addHandler(console)
    root.addHandler(handler)
    root.setLevel(min(console.level, handler.level))


LOG_FILE_MODE = 0o600
"""A new log file's mode; an existing one keeps at most 0640 (its group may read)."""


class PrivateFileHandler(logging.handlers.WatchedFileHandler):
    """A ``WatchedFileHandler`` whose file is never world-readable: created 0600 (also
    when it reopens after log rotation), an existing one tightened to at most 0640.  Log
    lines name users, minions and the rules that refused them."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                     LOG_FILE_MODE)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & ~0o640:
                os.fchmod(fd, mode & 0o640)
            return io.TextIOWrapper(io.FileIO(fd, "a"), encoding=self.encoding,
                                    errors=self.errors)
        except BaseException:
            os.close(fd)
            raise
