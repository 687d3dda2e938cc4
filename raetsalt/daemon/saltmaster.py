"""The master daemon's side of the Salt bridge: ``SaltRequests`` (sans-IO,
``raetsalt.saltbridge.service``) wired to worker processes.

``MasterBridge`` feeds the service what arrives (``salt_req`` and ``pillar_refresh`` from
minions, hellos) and carries out its actions: ``ToMinion`` goes back to the master's job
service, ``ToWorker`` to a worker process (``raetsalt.saltbridge.worker``: one for the
file server, started when first needed, and one for pillar, started with the master when
a ``pillar_roots`` directory exists, else when first needed), ``RestartWorker`` kills a
late worker.
A worker runs one request at a time; the bridge keeps the others in order and writes the
next one when the answer comes, so the daemon's loop never waits on a worker.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, assert_never

from raetsalt.daemon.childproc import python_child
from raetsalt.drivers.jobchild import plain
from raetsalt.errors import BadPacket
from raetsalt.saltbridge.control import FrameReader, daemon_log_levels, encode_frame, write_all
from raetsalt.saltbridge.service import Action as SaltAction
from raetsalt.saltbridge.service import RestartWorker, SaltRequests, ToWorker
from raetsalt.services.master import ToMinion

log = logging.getLogger("raetsalt.daemon")

ROOTS_CHECK_EVERY = 5.0
_WORKER_KEYS = ("id", "cachedir", "log_file", "file_roots", "pillar_roots", "hash_type",
                "file_buffer_size", "renderer", "nodegroups", "__salt")


@dataclass(slots=True)
class _Worker:
    kind: str
    proc: subprocess.Popen[bytes]
    read_fd: int
    write_fd: int
    reader: FrameReader = field(default_factory=FrameReader)
    queue: deque[ToWorker] = field(default_factory=deque)
    busy: int | None = None
    """The op id the worker is running now."""


class MasterBridge:
    """The master's Salt requests and its worker processes."""

    def __init__(self, opts: Mapping[str, Any], estate: str | None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self.clock = clock
        self.requests = SaltRequests(opts, estate=estate)
        self._workers: dict[str, _Worker] = {}
        self._selectors: dict[selectors.BaseSelector, Any] = {}
        self._roots_checked = float("-inf")
        self._roots_exist = False
        if self.pillar_roots_exist(clock()):
            # Loaded before the minions connect: their pillar is ready soon after hello.
            try:
                self._spawn("pillar")
            except OSError as exc:
                log.error("the pillar worker did not start: %s", exc)

    # -- from the job service -------------------------------------------------------------

    def on_request(self, minion: str, body: Mapping[str, Any],
                   grains: Mapping[str, Any] | None) -> list[ToMinion]:
        now = self.clock()
        return self._carry(self.requests.on_request(minion, body, now, grains), now)

    def on_hello(self, minion: str, grains: Mapping[str, Any] | None) -> list[ToMinion]:
        now = self.clock()
        return self._carry(self.requests.on_hello(minion, grains or {}, now,
                                                  self.pillar_roots_exist(now)), now)

    def on_pillar_refresh(self, minion: str, grains: Mapping[str, Any] | None
                          ) -> list[ToMinion]:
        now = self.clock()
        return self._carry(self.requests.on_pillar_refresh(minion, grains or {}, now,
                                                           self.pillar_roots_exist(now)), now)

    def poll(self, grains: Mapping[str, Mapping[str, Any]]) -> list[ToMinion]:
        """Worker answers and time-outs; ``grains`` by minion (for pillar re-compiles)."""
        now = self.clock()
        out: list[ToMinion] = []
        for worker in list(self._workers.values()):
            out.extend(self._read(worker, grains, now))
        timer = self.requests.get_timer()
        if timer is not None and timer <= now:
            out.extend(self._carry(self.requests.handle_timer(now), now))
        return out

    def pillar_roots_exist(self, now: float) -> bool:
        """Whether any ``pillar_roots`` directory exists (looked up every few seconds)."""
        if now - self._roots_checked >= ROOTS_CHECK_EVERY:
            self._roots_checked = now
            roots = self.opts.get("pillar_roots") or {}
            self._roots_exist = any(os.path.isdir(d) for dirs in roots.values() for d in dirs)
        return self._roots_exist

    # -- Wakeable -------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        self._selectors[selector] = data
        for worker in self._workers.values():
            selector.register(worker.read_fd, selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        self._selectors.pop(selector, None)
        for worker in self._workers.values():
            try:
                selector.unregister(worker.read_fd)
            except (KeyError, ValueError):
                pass

    def timeout(self) -> float | None:
        timer = self.requests.get_timer()
        return None if timer is None else max(0.0, timer - self.clock())

    def close(self) -> None:
        for kind in list(self._workers):
            self._stop(kind)

    # -- internals ------------------------------------------------------------------------

    def _carry(self, actions: Iterable[SaltAction], now: float) -> list[ToMinion]:
        """Carry out the Salt requests' actions but the road messages, which go back to
        the job service's caller; what a worker's failure leads to is carried out too."""
        out: list[ToMinion] = []
        todo = deque(actions)
        while todo:
            action = todo.popleft()
            match action:
                case ToMinion():
                    out.append(action)
                case ToWorker():
                    todo.extend(self._to_worker(action, now))
                case RestartWorker(kind=kind):
                    log.warning("the %s worker is late: restarting it", kind)
                    self._stop(kind)
                    todo.extend(self.requests.on_worker_lost(kind, now))
                case _:
                    assert_never(action)
        return out

    def _to_worker(self, action: ToWorker, now: float) -> list[SaltAction]:
        worker = self._workers.get(action.kind)
        if worker is None:
            try:
                worker = self._spawn(action.kind)
            except OSError as exc:
                log.error("the %s worker did not start: %s", action.kind, exc)
                return self.requests.on_result(action.op_id, {"error": str(exc)}, now)
        worker.queue.append(action)
        return self._next(worker, now)

    def _next(self, worker: _Worker, now: float) -> list[SaltAction]:
        """Write the next queued request if the worker is idle."""
        if worker.busy is not None or not worker.queue:
            return []
        action = worker.queue.popleft()
        frame = encode_frame(plain({"id": action.op_id, "op": action.op, "args": action.args}))
        try:
            write_all(worker.write_fd, frame)
        except OSError as exc:
            return self.requests.on_result(action.op_id, {"error": f"worker: {exc}"}, now)
        worker.busy = action.op_id
        return []

    def _read(self, worker: _Worker, grains: Mapping[str, Mapping[str, Any]], now: float
              ) -> list[ToMinion]:
        actions: list[SaltAction] = []
        while True:
            try:
                chunk = os.read(worker.read_fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                log.warning("the %s worker stopped", worker.kind)
                self._stop(worker.kind)
                actions.extend(self.requests.on_worker_lost(worker.kind, now))
                return self._carry(actions, now)
            try:
                frames = worker.reader.feed(chunk)
            except BadPacket as exc:
                log.error("the %s worker sent garbage (%s): restarting it", worker.kind, exc)
                self._stop(worker.kind)
                actions.extend(self.requests.on_worker_lost(worker.kind, now))
                return self._carry(actions, now)
            for frame in frames:
                op_id = frame.get("id") if isinstance(frame, dict) else None
                if isinstance(op_id, int) and op_id == worker.busy:
                    worker.busy = None
                    minion = self.requests.op_minion(op_id)
                    actions.extend(self.requests.on_result(
                        op_id, frame, now, grains.get(minion) if minion else None))
                actions.extend(self._next(worker, now))
        return self._carry(actions, now)

    def _spawn(self, kind: str) -> _Worker:
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        try:
            proc = subprocess.Popen(
                python_child("raetsalt.saltbridge.worker", str(to_worker_r),
                             str(from_worker_w)),
                pass_fds=(to_worker_r, from_worker_w), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, close_fds=True)
        except OSError:
            for fd in (to_worker_w, from_worker_r):
                os.close(fd)
            raise
        finally:
            os.close(to_worker_r)
            os.close(from_worker_w)
        os.set_blocking(from_worker_r, False)
        worker = _Worker(kind, proc, from_worker_r, to_worker_w)
        config = {key: self.opts.get(key) for key in _WORKER_KEYS}
        write_all(to_worker_w, encode_frame(plain({"kind": kind, "opts": config,
                                                   "log": daemon_log_levels()})))
        self._workers[kind] = worker
        for selector, data in self._selectors.items():
            selector.register(from_worker_r, selectors.EVENT_READ, data)
        log.info("started the %s worker (pid %d)", kind, proc.pid)
        return worker

    def _stop(self, kind: str) -> None:
        worker = self._workers.pop(kind, None)
        if worker is None:
            return
        for selector in self._selectors:
            try:
                selector.unregister(worker.read_fd)
            except (KeyError, ValueError):
                pass
        os.close(worker.read_fd)
        os.close(worker.write_fd)
        if worker.proc.poll() is None:
            worker.proc.kill()
        worker.proc.wait()
