"""The reactor's worker: renders the SLS files an event selects and carries out their
reactions, off the bus (``raetsalt.services.reactor`` decides what; this does it).

``Reactor.offer(tag, data)`` is all the bus reader calls: a tag glob match (microseconds)
and, when files match, a put on a bounded queue (``reactor_worker_hwm``).  A full queue
drops the event: counted (``stats['dropped']``) and logged at most once a minute with
the count, never blocking the reader.  ``reactor_worker_threads`` threads take events,
render each file with Salt's renderers (``tag`` and ``data`` in the template's context;
a ``Renderer``, see ``raetsalt.saltbridge.mastersalt.salt_renderer``), and run the reactions:

* ``local.FUN``: publishes the job through the master's lane, as the master's user,
  without waiting for returns (``raetsalt.clients.LocalClient.cmd_async``);
* ``runner.FUN``: raetsalt's runners through the master (``RunnerClient``);
* ``wheel.key.accept|reject|delete`` (``match``): key decisions sent to the master as
  ``raetsalt-key`` sends them (``WheelClient``);
* ``caller.FUN``: raetsalt's own execution functions, run in the worker on the master's
  host (Salt's masterless ``Caller``).

A failing reaction (rendering, a malformed reaction, a refusal by the master) is logged
once per (file, tag, problem) with its file and tag, never with a traceback.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import msgpack

from raetsalt.clients import LocalClient, RunnerClient, WheelClient
from raetsalt.errors import DaemonUnavailable
from raetsalt.log import Throttle, clip
from raetsalt.services.reactor import (
    Reaction,
    ReactorMap,
    event_key,
    reactions_of_event,
)

log = logging.getLogger("raetsalt.reactor")

Renderer = Callable[[str, str, Mapping[str, Any]], Any]
"""``(sls path, tag, data)`` -> the rendered high data (raises on a bad file)."""


class Claims(Protocol):
    """Who reacts to an event that several masters see (``raetsalt.store.pgclaims``)."""

    def claim(self, event_key: str, reaction: str) -> bool: ...


MAX_QUEUED_BYTES = 64 << 20
"""Bytes of event data (msgpack) waiting for the workers; beyond, events are dropped as
when the queue is full (a minion may fire large events with a matching tag)."""
DROP_LOG_INTERVAL = 60.0
STOP_CHECK = 0.25
"""Seconds an idle worker waits for an event before looking whether it must stop."""


class Reactor:
    """The bounded queue and its worker threads (see the module docstring)."""

    def __init__(self, mapping: ReactorMap, render: Renderer, opts: Mapping[str, Any], *,
                 threads: int = 4, hwm: int = 10000,
                 client_factory: Callable[[], Any] | None = None,
                 claims: Claims | None = None) -> None:
        self.mapping = mapping
        self.claims = claims
        self.render = render
        self.opts = opts
        self.queue: queue.Queue[tuple[str, dict[str, Any], list[str], int] | None] = \
            queue.Queue(hwm)
        self.queued_bytes = 0
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._throttle = Throttle(DROP_LOG_INTERVAL)
        self._failures = Throttle(3600.0, max_keys=4096)
        self._client_factory = client_factory or self._master_client
        self._idle = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._work, name=f"reactor-{n}", daemon=True)
                         for n in range(max(1, threads))]
        for thread in self._threads:
            thread.start()

    # -- the reader's side ----------------------------------------------------------------

    def offer(self, tag: str, data: dict[str, Any]) -> bool:
        """Queue the event when its tag selects files; False when it was dropped."""
        files = self.mapping.files_for(tag)
        if not files:
            return True
        try:
            size = len(msgpack.packb(data, use_bin_type=True, default=str))
        except (TypeError, ValueError, OverflowError):
            size = MAX_QUEUED_BYTES
        with self._lock:
            self.stats["matched"] += 1
            room = self.queued_bytes + size <= MAX_QUEUED_BYTES
            if room:
                self.queued_bytes += size
        try:
            if not room:
                raise queue.Full
            self.queue.put_nowait((tag, data, files, size))
            with self._lock:
                self.stats["queued"] += 1
        except queue.Full:
            with self._lock:
                if room:
                    self.queued_bytes -= size
                self.stats["dropped"] += 1
            count = self._throttle.note("full", time.monotonic())
            if count:
                log.warning("reactor: %d event(s) dropped, the reaction queue is full "
                            "(reactor_worker_hwm %d events or %d MiB); latest tag %s", count,
                            self.queue.maxsize, MAX_QUEUED_BYTES >> 20,
                            clip(tag, 120, bare=True))
            return False
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until every queued event was reacted to; False after ``timeout`` s."""
        with self._idle:
            return self._idle.wait_for(lambda: self.stats["done"] >= self.stats["queued"],
                                       timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers within ``timeout`` s: the reactions they are running finish,
        events still queued are dropped (counted and logged: the master is stopping)."""
        self._stopping.set()
        left = 0
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                left += 1
                with self._lock:
                    self.queued_bytes -= item[3]
        if left:
            with self._lock:
                self.stats["dropped"] += left
            log.warning("reactor: stopping; %d queued event(s) not reacted to", left)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- the workers ----------------------------------------------------------------------

    def _master_client(self) -> Any:
        from raetsalt.drivers.laneclient import CommandClient

        return CommandClient("master", str(self.opts["sock_dir"]))

    def _work(self) -> None:
        client: Any = None
        while not self._stopping.is_set():
            try:
                item = self.queue.get(timeout=STOP_CHECK)
            except queue.Empty:
                continue
            if item is None:
                break
            tag, data, files, size = item
            client = self._react(client, files, tag, data)
            with self._lock:
                self.stats["done"] += 1
                self.queued_bytes -= size
                self._idle.notify_all()
        if client is not None:
            client.close()

    def _react(self, client: Any, files: list[str], tag: str, data: dict[str, Any]) -> Any:
        rendered: list[tuple[str, Any]] = []
        for sls in files:
            try:
                rendered.append((sls, self.render(sls, tag, data)))
            except Exception as exc:  # noqa: BLE001 - any renderer failure is the file's
                self._failed(sls, tag, f"cannot be rendered: {_one_line(exc)}")
        reactions, problems = reactions_of_event(rendered)
        for sls, problem in problems:
            self._failed(sls, tag, problem)
        key = event_key(tag, data) if self.claims is not None and reactions else ""
        for reaction in reactions:
            if self.claims is not None and not self.claims.claim(
                    key, f"{reaction.sls}#{reaction.id}#{reaction.kind}.{reaction.fun}"):
                with self._lock:
                    self.stats["claimed_elsewhere"] += 1
                continue
            sls = reaction.sls
            try:
                if client is None and reaction.kind != "caller":
                    client = self._client_factory()
                self._run(client, reaction)
                with self._lock:
                    self.stats["reactions"] += 1
                    self.stats[reaction.kind] += 1
            except DaemonUnavailable as exc:
                if client is not None:
                    client.close()
                client = None
                self._failed(sls, tag, f"{reaction.kind}.{reaction.fun}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a reaction's failure is logged
                self._failed(sls, tag, f"{reaction.kind}.{reaction.fun} ({reaction.id}): "
                                       f"{_one_line(exc)}")
        return client

    def _failed(self, sls: str, tag: str, problem: str) -> None:
        with self._lock:
            self.stats["failed"] += 1
        if self._failures.note((sls, tag, problem), time.monotonic()):
            log.error("reactor: %s for tag %s: %s", sls, clip(tag, 120, bare=True),
                      clip(problem, 300, bare=True))

    def _run(self, client: Any, reaction: Reaction) -> None:
        match reaction.kind:
            case "local":
                self._local(client, reaction)
            case "runner":
                self._runner(client, reaction)
            case "wheel":
                self._wheel(client, reaction)
            case "caller":
                self._caller(reaction)
            case _:
                raise AssertionError(reaction.kind)

    def _local(self, client: Any, reaction: Reaction) -> None:
        jid = LocalClient(self.opts, client=client).cmd_async(
            reaction.tgt, reaction.fun, reaction.arg, reaction.tgt_type, reaction.ret,
            reaction.kwarg, timeout=reaction.timeout)
        with self._lock:
            self.stats["jobs"] += 1 if jid else 0

    def _runner(self, client: Any, reaction: Reaction) -> None:
        RunnerClient(self.opts, client=client).cmd(reaction.fun, reaction.arg,
                                                    reaction.kwarg)

    def _wheel(self, client: Any, reaction: Reaction) -> None:
        WheelClient(self.opts, client=client).cmd(reaction.fun, reaction.arg,
                                                  reaction.kwarg)

    def _caller(self, reaction: Reaction) -> None:
        from raetsalt.execution.grains import core_grains
        from raetsalt.execution.loader import Context, Loader

        loader = Loader()
        ctx = Context(opts=dict(self.opts), grains=core_grains(str(self.opts["id"])), loader=loader)
        loader.call(reaction.fun, list(reaction.arg), dict(reaction.kwarg), ctx)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
