"""Jobs in processes of their own: one ``fork`` per job, the result back over a pipe.

The minion daemon's loop must keep servicing the road while jobs run (salt-raet-era.md
§5.1: Salt's RAET minion joined each job process inside its loop, so a long job stopped
its keep-alives).  ``ForkExecutor.spawn`` forks; the child runs the job, writes its
outcome (msgpack) to a pipe and leaves with ``os._exit``.  The parent watches every pipe
through one inner ``epoll`` selector whose own descriptor sits in the daemon's selector
(``register``/``unregister``/``timeout``: the skedder's ``Wakeable``), so a finished job
wakes the loop, and ``poll`` collects what finished.  A job killed before it wrote its
outcome (``saltutil.kill_job``, SIGTERM) finishes with ``None``.

The child drops what it inherited and must not touch: every descriptor except stdio,
its pipe and the log files is closed (so a job that outlives a daemon restart holds no
road port or yard socket), and SIGTERM/SIGINT go back to their defaults.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import msgpack

log = logging.getLogger(__name__)

_READ = 65536
_REAP_RETRY = 0.05


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


@dataclass(slots=True)
class _Child:
    jid: str
    pid: int | None
    fd: int
    data: bytearray = field(default_factory=bytearray)
    own: bool = True
    """Forked here (reaped here); False for a job another process forked (``adopt``)."""


class ForkExecutor:
    """Run callables in forked children.

    :param run: called in the child with the job's key object; returns a mapping that is
        sent back (made ``plain`` first).
    """

    def __init__(self, run: Callable[[Any], dict[str, Any]]) -> None:
        self.run = run
        self._selector = selectors.DefaultSelector()
        self._children: dict[str, _Child] = {}
        self._zombies: list[tuple[int, str]] = []
        self._registered: dict[selectors.BaseSelector, Any] = {}

    # -- Wakeable -------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        selector.register(self._selector.fileno(), selectors.EVENT_READ, data)
        self._registered[selector] = data

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self._registered.pop(selector, None)
        try:
            selector.unregister(self._selector.fileno())
        except (KeyError, ValueError):
            pass

    def timeout(self) -> float | None:
        return _REAP_RETRY if self._zombies else None

    # -- jobs -----------------------------------------------------------------------------

    def spawn(self, jid: str, job: Any) -> int:
        """Start ``run(job)`` in a child; returns its pid.  Raises OSError."""
        read_fd, write_fd = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child never returns from here
            os.close(read_fd)
            run_in_child(jid, write_fd, lambda: self.run(job))
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        child = _Child(jid, pid, read_fd)
        self._children[jid] = child
        self._selector.register(read_fd, selectors.EVENT_READ, child)
        return pid

    def adopt(self, jid: str, fd: int) -> None:
        """Watch a job that another process runs (the Salt zygote,
        ``raetsalt.saltbridge``): ``fd`` is the read end of its outcome pipe, taken over
        here; ``set_pid`` names its process once known (for ``kill``)."""
        os.set_blocking(fd, False)
        child = _Child(jid, None, fd, own=False)
        self._children[jid] = child
        self._selector.register(fd, selectors.EVENT_READ, child)

    def set_pid(self, jid: str, pid: int) -> None:
        child = self._children.get(jid)
        if child is not None:
            child.pid = pid

    def poll(self) -> list[tuple[str, dict[str, Any] | None]]:
        """Jobs that finished since the last call: ``(jid, outcome or None)``."""
        done: list[tuple[str, dict[str, Any] | None]] = []
        if self._zombies:
            self._reap()
        if not self._children:
            return done
        for key, _events in self._selector.select(0):
            child: _Child = key.data
            if self._drain(child):
                done.append((child.jid, self._finish(child)))
        return done

    def kill(self, jid: str, sig: int = signal.SIGTERM) -> bool:
        """Signal the process of job ``jid``; False when it is not running here."""
        child = self._children.get(jid)
        if child is None or child.pid is None:
            return False
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def running(self) -> dict[str, int]:
        """jid -> pid of the jobs still running (whose pid is known)."""
        return {jid: child.pid for jid, child in self._children.items()
                if child.pid is not None}

    def close(self) -> None:
        """Terminate the jobs still running and forget them."""
        for child in list(self._children.values()):
            if child.pid is not None:
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self._selector.unregister(child.fd)
            os.close(child.fd)
            if child.own and child.pid is not None:
                self._zombies.append((child.pid, child.jid))
        self._children.clear()
        for _ in range(100):
            if not self._zombies:
                break
            self._reap()
            if self._zombies:
                # Bounded: SIGTERMed jobs end quickly; the rest are left to init.
                selectors.DefaultSelector().select(0.01)
        self._selector.close()

    # -- internals ------------------------------------------------------------------------

    def _drain(self, child: _Child) -> bool:
        """Read what the child wrote; True at end of file."""
        while True:
            try:
                chunk = os.read(child.fd, _READ)
            except BlockingIOError:
                return False
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return True
            if not chunk:
                return True
            child.data += chunk

    def _finish(self, child: _Child) -> dict[str, Any] | None:
        self._selector.unregister(child.fd)
        os.close(child.fd)
        del self._children[child.jid]
        if child.own and child.pid is not None:
            self._zombies.append((child.pid, child.jid))
            self._reap()
        if not child.data:
            return None
        try:
            outcome = msgpack.unpackb(bytes(child.data), strict_map_key=False)
        except Exception:  # noqa: BLE001 - a truncated write (killed mid-way)
            return None
        return outcome if isinstance(outcome, dict) else None

    def _reap(self) -> None:
        left: list[tuple[int, str]] = []
        for pid, jid in self._zombies:
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done == 0:
                left.append((pid, jid))
        self._zombies = left


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
