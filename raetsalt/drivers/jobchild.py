"""The child side of a forked job: what it drops of its parent, and how its outcome goes
back (``plain`` values, msgpack, over a pipe).

The minion's ``raetsalt.daemon.executor.ForkExecutor`` and the Salt zygote
(``raetsalt.saltbridge.zygote``) both fork their jobs and run them through
``run_in_child``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any, NoReturn

import msgpack

log = logging.getLogger("raetsalt.daemon.executor")


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` with only types every road body kind can carry (str keys, no bytes, sets
    or objects); anything else becomes its ``repr``."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if depth > 64:
        return repr(value)
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): plain(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [plain(v, depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return repr(value)


_AFTER_RESULT: list[Callable[[], object]] = []
"""What a job process does once its outcome is written (``after_result``)."""


def after_result(then: Callable[[], object]) -> None:
    """In a job process: run ``then`` once the outcome has reached the daemon (a job's
    returners: the master gets the return first, as from Salt's minion)."""
    _AFTER_RESULT.append(then)


def run_in_child(jid: str, out_fd: int, produce: Callable[[], dict[str, Any]]) -> NoReturn:
    """In a freshly forked job process: drop what was inherited (``child_setup``), write
    ``produce()`` (made ``plain``, msgpack) to ``out_fd`` and leave the process, with 0
    when that worked; nothing ever returns or raises into the parent's code."""
    code = 1
    try:
        child_setup(out_fd)
        _write_all(out_fd, msgpack.packb(plain(produce())))
        code = 0
        if _AFTER_RESULT:
            os.close(out_fd)  # the daemon has the outcome now; then the returners
            for then in _AFTER_RESULT:
                then()
    except BaseException:  # noqa: BLE001 - nothing may escape into the forking code
        try:
            log.exception("job %s failed in its process", jid)
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def child_setup(keep_fd: int) -> None:
    """Default signal handling, and every descriptor closed but stdio, ``keep_fd`` and
    the log files."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:
        pass
    keep = {0, 1, 2, keep_fd}
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        try:
            keep.add(stream.fileno())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            pass
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _max_fd())


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 4096


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
