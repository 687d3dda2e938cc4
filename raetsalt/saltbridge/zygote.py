"""The Salt zygote: one process per minion that holds Salt's loader and forks each job.

Why a zygote: Salt's loader costs about a second and ~100 MB to import and load, and
Salt's modules are not safe to share between threads.  Loading it in the minion daemon
would stall the daemon's loop (keep-alives, the road, the bus) and bloat the process
every job forks from.  Instead the daemon (``raetsalt.daemon.saltminion``) starts
``python -m raetsalt.saltbridge.zygote FD`` once: the zygote loads Salt
(``SaltRuntime``), reports the grains, then waits.  For each job the daemon sends the
job (spec, grains, pillar) with the write end of the job's outcome pipe; the zygote
forks, the child runs the job with the loader already in memory (copy-on-write) and
writes its outcome to the pipe, which the daemon watches like any job of its own.  A
job therefore starts in milliseconds, the daemon never imports Salt, and a job that
crashes or leaks cannot harm the loader the next job forks from.

Control messages (``raetsalt.saltbridge.control`` on a ``SOCK_SEQPACKET`` pair):

daemon -> zygote: ``init`` (body: the config ``SaltRuntime`` needs, log levels), ``job``
``{jid}`` (body: payload; descriptor: the outcome pipe), ``reload`` (grains and modules
again, after ``saltutil.sync_*``/``refresh_*``), ``pillar`` (body: the minion's pillar,
for the scheduler), ``connected`` (a session with the master began).  End of stream:
exit (running jobs go on and still report).

zygote -> daemon: ``ready`` (body: ``{grains, version}``) after every load, ``started``
``{jid, pid}``, ``failed`` ``{jid, reason}`` (no fork), ``unavailable`` ``{reason}``
(Salt cannot be loaded; the zygote exits).  The scheduler process
(``raetsalt.saltbridge.scheduler``, forked once the loader is up, again when it dies)
sends ``schedule_return`` (body: Salt's return of a scheduled job) on the same socket.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import sys
import time
import warnings
from typing import Any

from raetsalt.drivers.jobchild import plain, run_in_child
from raetsalt.errors import BadPacket

from . import control
from .saltjob import WARM

log = logging.getLogger("raetsalt.saltbridge.zygote")

SCHEDULER_RESTART = 10.0
"""Seconds between two starts of the scheduler process, at least."""


class Zygote:
    """The zygote's loop: control messages from the daemon, children to reap."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.runtime: Any = None
        self.children: set[int] = set()
        self._warming: list[str] = []
        self.scheduler: int | None = None
        self._to_scheduler: socket.socket | None = None
        self._scheduler_at = 0.0
        self._pillar: dict[str, Any] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        for end in (self._wake_r, self._wake_w):
            end.setblocking(False)

    def start(self, config: dict[str, Any]) -> bool:
        from .saltjob import SaltRuntime  # imports Salt: reported as "unavailable" if it fails

        try:
            self.runtime = SaltRuntime(config)
            # Salt puts its own warning filters first when imported: ours go back in front.
            warnings.filterwarnings("ignore", category=DeprecationWarning)
        except Exception as exc:  # noqa: BLE001 - reported to the daemon, which decides
            log.warning("Salt's loader is not available: %s", exc,
                        exc_info=not isinstance(exc, ImportError))
            control.send(self.sock, {"op": "unavailable", "reason": f"{type(exc).__name__}: "
                                                                     f"{exc}"})
            return False
        self._ready()
        self._start_scheduler()
        return True

    def _ready(self) -> None:
        """Report the grains; what jobs use is imported between jobs (``serve``)."""
        control.send(self.sock, {"op": "ready"},
                     {"grains": plain(self.runtime.grains()), "version": self.runtime.version})
        self._warming = list(WARM)

    def serve(self) -> int:
        signal.set_wakeup_fd(self._wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)
        while True:
            wait = 0 if self._warming else (
                None if self.scheduler is not None
                else max(0.0, self._scheduler_at - time.monotonic()))
            ready = selector.select(wait)
            if self.scheduler is None and time.monotonic() >= self._scheduler_at:
                self._start_scheduler()
            if not ready and self._warming:
                self.runtime.warm(self._warming.pop(0))  # nothing waiting: warm up a bit
            for key, _events in ready:
                if key.fileobj is self._wake_r:
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    continue
                try:
                    message = control.receive(self.sock)  # one packet is waiting
                except BadPacket as exc:
                    log.error("zygote: bad control message: %s", exc)
                    continue
                if message is None:
                    return 0
                try:
                    self._handle(*message)
                except OSError as exc:  # the daemon is gone: so are we
                    log.info("zygote: the minion daemon went away (%s)", exc)
                    return 0
            self._reap()

    def _handle(self, header: dict[str, Any], body: Any, fds: list[int]) -> None:
        op = header.get("op")
        if op == "job" and len(fds) == 1 and isinstance(body, dict):
            self._fork(str(header.get("jid")), body, fds[0])
            return
        for fd in fds:
            os.close(fd)
        if op == "pillar" and isinstance(body, dict):
            self._pillar = body
            self._tell_scheduler({"op": "pillar"}, body)
        elif op == "reload":
            try:
                self.runtime.load()
            except Exception:  # noqa: BLE001 - keep the last good loader
                log.exception("zygote: reloading Salt's modules failed")
            self._ready()
            self._tell_scheduler({"op": "reload"}, None)
        else:
            log.error("zygote: unexpected control message %r", op)

    def _fork(self, jid: str, payload: dict[str, Any], result_fd: int) -> None:
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(result_fd)
            control.send(self.sock, {"op": "failed", "jid": jid, "reason": str(exc)})
            return
        if pid == 0:
            run_in_child(jid, result_fd, lambda: self.runtime.run(payload))
        os.close(result_fd)
        self.children.add(pid)
        control.send(self.sock, {"op": "started", "jid": jid, "pid": pid})

    def _start_scheduler(self) -> None:
        """Fork the scheduler process (at most every ``SCHEDULER_RESTART`` seconds)."""
        from . import scheduler

        self._scheduler_at = time.monotonic() + SCHEDULER_RESTART
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError as exc:
            log.error("the Salt scheduler process did not start: %s", exc)
            ours.close()
            theirs.close()
            return
        if pid == 0:
            status = 1
            try:
                ours.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if self._pillar:
                    self.runtime.opts["pillar"] = self._pillar
                status = scheduler.run(self.runtime, self.sock, theirs)
            finally:
                os._exit(status)
        theirs.close()
        ours.setblocking(False)
        if self._to_scheduler is not None:
            self._to_scheduler.close()
        self._to_scheduler = ours
        self.scheduler = pid

    def _tell_scheduler(self, header: dict[str, Any], body: Any) -> None:
        if self._to_scheduler is None:
            return
        try:
            control.send(self._to_scheduler, header, body)
        except OSError as exc:
            log.warning("zygote: the scheduler missed %s: %s", header.get("op"), exc)

    def _reap(self) -> None:
        if self.scheduler is not None:
            try:
                done, _status = os.waitpid(self.scheduler, os.WNOHANG)
            except ChildProcessError:
                done = self.scheduler
            if done:
                log.warning("the Salt scheduler process ended; starting it again")
                self.scheduler = None
        for pid in list(self.children):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)


def main(argv: list[str]) -> int:
    # Salt imports modules Python deprecates; that is not the operator's business.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    sock = socket.socket(fileno=int(argv[0]))
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    first = control.receive(sock)
    if first is None or first[0].get("op") != "init" or not isinstance(first[1], dict):
        return 2
    config = first[1]
    control.child_logging(config.get("log_file"), config.get("log"), "minion")
    zygote = Zygote(sock)
    if not zygote.start(config):
        return 1
    return zygote.serve()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
