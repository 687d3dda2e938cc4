"""The minion daemon's side of the Salt bridge: its Salt zygote process.

``minion_bridge(opts, executor)`` gives a ``MinionBridge`` when the minion runs Salt's
loader (``execution_mode``, ``raetsalt.saltbridge.modes``), else None.  The bridge starts
the zygote (``raetsalt.saltbridge.zygote``) with the config it needs, hands it the jobs
that go to Salt (``submit``: the payload in a memfd, the write end of the job's outcome
pipe; the read end goes to the daemon's ``ForkExecutor``, so a Salt job finishes like
any other), and turns what the zygote reports into job-service calls (``poll``): its
grains (the minion says hello to the master only once it has them, so grain targeting
sees Salt's grains from the start; at most ``HELLO_WAIT`` seconds after start), the pid
of each job, forks that failed, the returns of Salt's scheduled jobs (sent to the
master as returns with jid ``req``, ``raetsalt.services.scheduled``).  The minion's
pillar goes to the zygote for the scheduler and beacons (``set_pillar``).

The zygote is restarted with back-off (1 s doubling to 60 s) when it dies; jobs that
were handed over but not started fail with the reason.  In ``auto`` mode a zygote that
cannot load Salt (``unavailable``) turns the bridge off: the minion goes on with its
native functions and grains, and says so once in the log.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.daemon.childproc import python_child
from raetsalt.daemon.executor import ForkExecutor
from raetsalt.drivers.jobchild import plain
from raetsalt.errors import BadPacket, LocalError
from raetsalt.execution.returners import module_settings
from raetsalt.saltbridge import control
from raetsalt.saltbridge.modes import runs_in_salt, salt_importable, uses_salt
from raetsalt.saltbridge.saltjob import CONFIG_KEYS
from raetsalt.services.minion import Action as MinionAction
from raetsalt.services.minion import JobSpec, MinionJobs, ToMaster, returner_fields
from raetsalt.services.scheduled import scheduled_return

log = logging.getLogger("raetsalt.daemon")

RESTART_MIN = 1.0
RESTART_MAX = 60.0
HELLO_WAIT = 30.0
"""Longest the first hello waits for Salt's grains (then it carries the native ones)."""
MAX_QUEUED = 256
"""Jobs waiting for the zygote to be ready, at most."""


def minion_bridge(opts: Mapping[str, Any], executor: ForkExecutor) -> MinionBridge | None:
    """The bridge for this minion's ``execution_mode``; raises LocalError in ``salt``
    mode when Salt is not importable."""
    mode = str(opts.get("execution_mode", "auto"))
    importable = salt_importable()
    if mode == "salt" and not importable:
        raise LocalError("execution_mode is 'salt' but the salt package is not importable "
                         "(pip install 'raetsalt[salt]')")
    if not uses_salt(mode, importable):
        say_unrun(opts, "needs the salt package (pip install 'raetsalt[salt]')"
                  if not importable else "runs with Salt's loader (execution_mode auto or "
                  f"salt), and execution_mode is {mode!r}")
        return None
    return MinionBridge(opts, executor, mode)


def say_unrun(opts: Mapping[str, Any], why: str) -> None:
    """One line per configured key that Salt's scheduler process would have served."""
    for key, what in (("schedule", "Salt's scheduler"), ("beacons", "Salt's beacons"),
                      ("engines", "Salt's engines")):
        if opts.get(key):
            log.warning("%s: ignored: %s %s", key, what, why)


class MinionBridge:
    """One minion's Salt zygote (see the module docstring)."""

    def __init__(self, opts: Mapping[str, Any], executor: ForkExecutor, mode: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self.executor = executor
        self.mode = mode
        self.clock = clock
        self.active = True
        """False once Salt turned out not to load (``auto`` mode): native from then on."""
        self.ready = False
        self.version: str | None = None
        self.hello_due = False
        """The session came up before the zygote's grains: say hello when they come (or
        after ``HELLO_WAIT`` seconds)."""
        self._hello_by = clock() + HELLO_WAIT
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._queue: list[tuple[str, dict[str, Any], int]] = []
        self._unstarted: set[str] = set()
        self._restart_at: float | None = None
        self._backoff = RESTART_MIN
        self._selectors: dict[selectors.BaseSelector, Any] = {}
        self._pillar: dict[str, Any] | None = None
        self._start()

    # -- what the job service asks ----------------------------------------------------------

    def holds_hello(self) -> bool:
        """Whether the first hello must wait for the zygote's grains."""
        return (self.active and not self.ready and self.version is None
                and self.clock() < self._hello_by)

    def wants(self, fun: str, native: Mapping[str, Any], arg: list[Any] | None = None
              ) -> bool:
        """Whether the job of ``fun`` (with publication arguments ``arg``) goes to Salt's
        loader."""
        return self.active and runs_in_salt(fun, self.mode, native, arg)

    def submit(self, spec: JobSpec, grains: Mapping[str, Any], pillar: Mapping[str, Any]
               ) -> str | None:
        """Hand a job to the zygote; returns why it cannot be started, or None."""
        payload = {"spec": {**returner_fields(spec), "tgt": spec.tgt,
                            "tgt_type": spec.tgt_type, "user": spec.user, "kind": spec.kind},
                   "grains": plain(dict(grains)), "pillar": plain(dict(pillar))}
        if not self.ready and len(self._queue) >= MAX_QUEUED:
            return "too many jobs are waiting for Salt's loader"
        read_fd, write_fd = os.pipe()
        self.executor.adopt(spec.jid, read_fd)
        if self.ready:
            self._send_job(spec.jid, payload, write_fd)
        else:
            self._queue.append((spec.jid, payload, write_fd))
        return None

    def reload(self) -> None:
        """Load grains and modules again (after a sync or a refresh)."""
        if self.ready and self._sock is not None:
            self._send({"op": "reload"})

    def set_pillar(self, pillar: Mapping[str, Any]) -> None:
        """The minion's pillar changed: the scheduler and beacons read theirs from it."""
        self._pillar = plain(dict(pillar))
        if self.ready:
            self._send({"op": "pillar"}, self._pillar)

    def poll(self, jobs: MinionJobs) -> list[MinionAction]:
        """Apply what the zygote reported to ``jobs``; returns the job service's actions."""
        actions: list[MinionAction] = []
        now = self.clock()
        if self._restart_at is not None and now >= self._restart_at:
            self._restart_at = None
            self._start()
        if self.hello_due and now >= self._hello_by:
            log.warning("Salt's loader has not reported grains within %g s: saying hello "
                        "with raetsalt's own", HELLO_WAIT)
            self.hello_due = False
            actions.extend(jobs.release_hellos())
        while self._sock is not None:
            try:
                message = control.receive(self._sock)
            except BlockingIOError:
                break
            except (BadPacket, OSError) as exc:
                log.error("Salt zygote: bad control message: %s", exc)
                continue
            if message is None:
                actions.extend(self._lost(jobs, "Salt's loader process exited"))
                break
            header, body, fds = message
            for fd in fds:
                os.close(fd)
            actions.extend(self._on_message(jobs, header, body))
        return actions

    # -- Wakeable ---------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self._selectors[selector] = data
        if self._sock is not None:
            selector.register(self._sock, selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self._selectors.pop(selector, None)
        if self._sock is not None:
            try:
                selector.unregister(self._sock)
            except (KeyError, ValueError):
                pass

    def timeout(self) -> float | None:
        due = [t for t in (self._restart_at, self._hello_by if self.hello_due else None)
               if t is not None]
        return max(0.0, min(due) - self.clock()) if due else None

    def close(self) -> None:
        self._drop_socket()
        for _jid, _payload, write_fd in self._queue:
            os.close(write_fd)
        self._queue.clear()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(2.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    # -- internals --------------------------------------------------------------------------

    def _start(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                python_child("raetsalt.saltbridge.zygote", str(child.fileno())),
                pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, close_fds=True)
        except OSError as exc:
            parent.close()
            log.error("Salt's loader process did not start: %s", exc)
            self._schedule_restart()
            return
        finally:
            child.close()
        config = {key: self.opts.get(key) for key in CONFIG_KEYS}
        config.update(module_settings(self.opts))  # returners' settings (sqlite3.database)
        config["log"] = control.daemon_log_levels()
        control.send(parent, {"op": "init"}, plain(config))
        parent.setblocking(False)
        self._sock = parent
        for selector, data in self._selectors.items():
            selector.register(parent, selectors.EVENT_READ, data)

    def _on_message(self, jobs: MinionJobs, header: dict[str, Any], body: Any
                    ) -> list[MinionAction]:
        op = header.get("op")
        actions: list[MinionAction] = []
        if op == "ready" and isinstance(body, dict) and isinstance(body.get("grains"), dict):
            first = self.version is None
            self.ready = True
            self.version = str(body.get("version"))
            self._backoff = RESTART_MIN
            if first:
                log.info("Salt %s loaded: Salt's functions, states and grains are in use",
                         self.version)
            actions.extend(jobs.set_grains(body["grains"]))
            if self._pillar is not None:
                self._send({"op": "pillar"}, self._pillar)
            queued, self._queue = self._queue, []
            for jid, payload, write_fd in queued:
                self._send_job(jid, payload, write_fd)
        elif op == "started" and isinstance(header.get("pid"), int):
            jid = str(header.get("jid"))
            self._unstarted.discard(jid)
            self.executor.set_pid(jid, header["pid"])
            jobs.on_started(jid, header["pid"])
        elif op == "failed":
            jid = str(header.get("jid"))
            self._unstarted.discard(jid)
            actions.extend(jobs.on_spawn_failed(jid, str(header.get("reason"))))
        elif op == "schedule_return" and isinstance(body, dict):
            message = scheduled_return(jobs.estate, body)
            if message is not None:
                actions.append(ToMaster(message))
        elif op == "unavailable":
            reason = str(header.get("reason"))
            if self.mode == "auto":
                self.active = False
                log.warning("Salt's loader cannot be used (%s): running raetsalt's native "
                            "functions only", reason)
                say_unrun(self.opts, f"needs Salt's loader, which cannot be used ({reason}; "
                          "pip install 'raetsalt[salt]')")
            else:
                log.error("Salt's loader cannot be used: %s", reason)
        if self.hello_due and (self.ready or not self.active):
            self.hello_due = False
            actions.extend(jobs.release_hellos())
        return actions

    def _send_job(self, jid: str, payload: dict[str, Any], write_fd: int) -> None:
        try:
            if self._sock is None:
                raise OSError("no zygote")
            control.send(self._sock, {"op": "job", "jid": jid}, payload, (write_fd,))
            self._unstarted.add(jid)
        except OSError as exc:
            log.error("job %s not handed to Salt's loader: %s", jid, exc)
        finally:
            os.close(write_fd)  # the zygote has its own copy now (or the job ends at once)

    def _send(self, header: dict[str, Any], body: Any = None) -> None:
        try:
            if self._sock is not None:
                control.send(self._sock, header, body)
        except OSError as exc:
            log.warning("Salt zygote: %s not sent: %s", header.get("op"), exc)

    def _lost(self, jobs: MinionJobs, why: str) -> list[MinionAction]:
        self._drop_socket()
        if self._proc is not None:
            code = self._proc.wait()
            self._proc = None
            why = f"{why} (exit code {code})"
        self.ready = False
        actions: list[MinionAction] = []
        for jid in sorted(self._unstarted):
            actions.extend(jobs.on_spawn_failed(jid, why))
        self._unstarted.clear()
        if self.active:
            log.warning("%s; restarting it in %g s", why, self._backoff)
            self._schedule_restart()
        if self.hello_due and not self.active:
            self.hello_due = False
            actions.extend(jobs.release_hellos())
        return actions

    def _schedule_restart(self) -> None:
        self._restart_at = self.clock() + self._backoff
        self._backoff = min(RESTART_MAX, self._backoff * 2)

    def _drop_socket(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        for selector in self._selectors:
            try:
                selector.unregister(sock)
            except (KeyError, ValueError):
                pass
        sock.close()
