"""The master's automation process: the reactor and ``event_return``, beside the master.

``start(opts)`` (called by ``raetsalt-master`` before its flow runs) decides what is
configured and usable, says in one line what is not (``reactor:`` without the salt
extra, an ``event_return`` returner that does not exist), and starts one child process
(``python -c ... main``) when there is work.  The child subscribes to the master's bus
like any listener, so the master's loop never waits for it: the bus reader only matches
tags and queues (``raetsalt.daemon.reactor``) and spools (``raetsalt.daemon.eventreturn``);
rendering, publishing and database writes happen on the child's other threads.

Events fired before the child has subscribed are not lost: the master's bus holds them
(``BUS_CLAIM``, ``raetsalt.bus.EventBus.hold``: bounded, losses counted) from its first
moment, and the child's subscription claims them, so a minion that reaches the master
while the child still loads Salt's renderers has its ``salt/minion/<id>/start`` reacted
to.  A child that restarts claims what was held while it was away; one with nothing to
run releases the hold.

The child gets its settings as one JSON line on its standard input, which then stays
open: its end (the master stopped, or died) stops the child, which finishes the batch
it is giving to a returner (what is left stays in the spool for the next start).
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raetsalt.daemon.eventreturn import EventReturn
    from raetsalt.daemon.reactor import Claims, Reactor
    from raetsalt.event import SaltEvent

log = logging.getLogger("raetsalt.daemon")

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_CHILD = ("import sys; sys.path.insert(0, sys.argv[1]); "
          "from raetsalt.daemon.automation import main; sys.exit(main())")
BUS_CLAIM = "automation"
"""The name the master's bus holds this child's events under until it subscribes."""
READ_WAIT = 0.25
"""Seconds the bus reader waits for an event before looking at its stop flag."""
DRAIN_WAIT = 0.05
"""Seconds of silence after which a stopping reader has taken all its socket held."""
READ_BATCH = 512
"""Events the reader takes from the bus before spooling them (one sync)."""
NO_SALT = ("reactor: ignored: reactor files are rendered with Salt's renderers (jinja, "
           "yaml); install the salt extra (pip install 'raetsalt[salt]') to use the "
           "'reactor' key")


def plan(opts: Mapping[str, Any]) -> dict[str, bool]:
    """What the child will run (``reactor``, ``event_return``); logs, once, why a
    configured part will not."""
    from raetsalt.saltbridge.mastersalt import salt_renderer_available
    from raetsalt.services.reactor import ReactorConfigError, ReactorMap

    wanted = {"reactor": False, "event_return": bool(opts.get("event_return"))}
    try:
        wanted["reactor"] = bool(ReactorMap.from_config(opts.get("reactor")))
    except ReactorConfigError as exc:
        log.error("reactor: ignored: %s", exc)
    if wanted["reactor"] and not salt_renderer_available():
        log.warning("%s", NO_SALT)
        wanted["reactor"] = False
    return wanted


RESTART_MIN = 1.0
RESTART_MAX = 60.0
"""Seconds before a child that died is started again (doubling while it keeps dying)."""


class Automation:
    """The master's handle on its automation child: a thread waits for it and starts it
    again when it dies while the master runs (what it had spooled is kept)."""

    def __init__(self, spawn: Any, popen: subprocess.Popen[bytes],
                 name: str = "the reactor/event_return process") -> None:
        self._spawn = spawn
        self.popen = popen
        self.name = name
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="automation", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        delay = RESTART_MIN
        while True:
            code = self.popen.wait()
            if self._stopping.is_set() or code == 0:
                return  # stopped, or nothing it could run (it said why)
            log.error("%s exited with %d; starting it again in %g s", self.name, code, delay)
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                popen = self._spawn()
                if popen is None:
                    delay = min(RESTART_MAX, delay * 2)
                    continue
                self.popen = popen
                self.restarts += 1
            delay = min(RESTART_MAX, delay * 2)

    def stop(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._stopping.set()
            popen = self.popen
        if popen.stdin is not None:
            try:
                popen.stdin.close()
            except OSError:
                pass
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) did not stop in %g s: killed", self.name, popen.pid,
                        timeout)
            popen.kill()
            popen.wait()
        self._thread.join(timeout)


def start(opts: Mapping[str, Any]) -> Automation | None:
    """Start the child when the reactor or event_return is configured and usable."""
    wanted = plan(opts)
    if not any(wanted.values()):
        return None
    return spawn_child(_CHILD, opts, wanted, "the reactor/event_return process")


def spawn_child(code: str, opts: Mapping[str, Any], wanted: Mapping[str, bool],
                name: str) -> Automation | None:
    """Start ``python -c code`` with the header line (``opts``, the log levels,
    ``wanted``) on its standard input, watched and restarted by an ``Automation``."""
    levels = [logging.getLevelName(h.level) for h in logging.getLogger().handlers]
    header = json.dumps({"opts": dict(opts), "levels": levels, "wanted": dict(wanted)},
                        default=str).encode() + b"\n"

    def spawn() -> subprocess.Popen[bytes] | None:
        try:
            popen = subprocess.Popen([sys.executable, "-c", code, _PACKAGE_ROOT],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     close_fds=True)
        except OSError as exc:
            log.error("%s did not start: %s", name, exc)
            return None
        assert popen.stdin is not None
        try:
            popen.stdin.write(header)
            popen.stdin.flush()
        except OSError:
            pass  # it died at once: the watcher sees it
        return popen

    popen = spawn()
    return None if popen is None else Automation(spawn, popen, name)


# ---------------------------------------------------------------------------- the child


def _logging(log_file: Any, levels: Any) -> None:
    """The master's console and log file, at its levels (the file exists: the master made
    it private)."""
    root = logging.getLogger()
    names = [str(n) for n in levels] if isinstance(levels, list) else ["WARNING"]
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("[%(levelname)-8s] %(message)s"))
    handlers: list[logging.Handler] = [console]
    if isinstance(log_file, str) and os.path.exists(log_file):
        try:
            handlers.append(logging.handlers.WatchedFileHandler(log_file, encoding="utf-8"))
        except OSError:
            pass
        handlers[-1].setFormatter(logging.Formatter(
            "%(asctime)s [%(name)-18s][%(levelname)-8s][raetsalt-master %(process)d] "
            "%(message)s"))
    for handler, name in zip(handlers, names + names[-1:], strict=False):
        handler.setLevel(logging.getLevelName(name) if name.isupper() else logging.WARNING)
        root.addHandler(handler)
    root.setLevel(min(h.level for h in handlers))


def child_setup() -> tuple[dict[str, Any], dict[str, bool], threading.Event] | None:
    """In a child: its header (``opts``, ``wanted``), the master's logging, and the
    event set when the master goes away (its end of our standard input closes) or sends
    SIGTERM; None when the header is not readable."""
    stdin = sys.stdin.fileno()
    line = sys.stdin.buffer.readline()
    try:
        header = json.loads(line)
    except ValueError:
        return None
    opts: dict[str, Any] = header["opts"]
    _logging(opts.get("log_file"), header.get("levels"))
    stop = threading.Event()

    def watch_parent() -> None:
        # The raw descriptor, not sys.stdin: a thread blocked in a buffered read holds
        # its lock, and a process forked meanwhile (multiprocessing closes sys.stdin in
        # its children) would wait for that lock for ever.
        try:
            while os.read(stdin, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_parent, name="parent", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master's Ctrl-C reaches us via EOF
    return opts, dict(header.get("wanted") or {}), stop


def main() -> int:
    setup = child_setup()
    if setup is None:
        return 1
    opts, wanted, stop = setup
    niceness = opts.get("reactor_niceness")
    if isinstance(niceness, int) and niceness > 0:
        try:
            os.nice(niceness)  # the master's own loop (and the bus) comes first
        except OSError as exc:
            log.warning("reactor_niceness %d not applied: %s", niceness, exc)
    try:
        return run(opts, wanted, stop)
    except Exception:  # noqa: BLE001 - logged; the master goes on without it
        log.exception("the reactor/event_return process failed")
        return 1


def _claims(opts: Mapping[str, Any]) -> Claims | None:
    """The cluster's reaction claims (``raetsalt.store.pgclaims``) when the master is in
    a cluster with a store, else None (each master reacts to what it sees)."""
    if not opts.get("cluster_id") or not opts.get("cluster_store"):
        return None
    try:
        from raetsalt.store.pgclaims import ReactionClaims

        claims = ReactionClaims(opts, window=float(opts.get("reactor_cluster_window") or 60))
    except ImportError:
        log.error("reactor: cluster_id is set but the cluster extra (psycopg) is not "
                  "installed: each master reacts to the events it sees")
        return None
    except ValueError as exc:
        log.error("reactor: reactions not claimed in the cluster store: %s", exc)
        return None
    log.info("reactor: reactions claimed in the cluster store (cluster %s): an event "
             "several masters see reacts once", claims.cluster_id)
    return claims


def _hand_over(bus: SaltEvent, first: dict[str, Any], returns: EventReturn | None,
               reactor: Reactor | None) -> None:
    """``first`` and the events already waiting after it (up to ``READ_BATCH``) to the
    spool (one sync) and the reactor's queue."""
    batch = [first]
    while len(batch) < READ_BATCH:
        more = bus.get_event_noblock()
        if more is None:
            break
        batch.append(more)
    events = [(str(e["tag"]), e["data"] if isinstance(e["data"], dict) else
               {"data": e["data"]}) for e in batch]
    if returns is not None:
        returns.add(events)
    if reactor is not None:
        for tag, data in events:
            reactor.offer(tag, data)


def run(opts: dict[str, Any], wanted: Mapping[str, bool], stop: threading.Event) -> int:
    from raetsalt.daemon.eventreturn import EventReturn, event_returners
    from raetsalt.daemon.reactor import Reactor
    from raetsalt.event import MasterEvent
    from raetsalt.saltbridge.mastersalt import salt_renderer
    from raetsalt.services.reactor import ReactorMap

    reactor: Reactor | None = None
    returns: EventReturn | None = None
    if wanted.get("reactor"):
        mapping = ReactorMap.from_config(opts.get("reactor"))
        try:
            render = salt_renderer(opts)
        except Exception as exc:  # noqa: BLE001 - one line; event_return may still run
            log.error("reactor: not started: Salt's renderers could not be loaded: %s",
                      " ".join(str(exc).split())[:300] or type(exc).__name__)
        else:
            reactor = Reactor(mapping, render, opts,
                              threads=int(opts.get("reactor_worker_threads") or 4),
                              hwm=int(opts.get("reactor_worker_hwm") or 10000),
                              claims=_claims(opts))
    if wanted.get("event_return"):
        try:
            returns = EventReturn(opts, event_returners(opts))
        except Exception as exc:  # noqa: BLE001 - one line; the reactor may still run
            log.error("event_return: not started: %s", " ".join(str(exc).split()))
    bus = MasterEvent(str(opts["sock_dir"]), opts={"event_match_type": "startswith"},
                      listen=False, claim=BUS_CLAIM)
    parts = [name for name, on in (("reactor", reactor), ("event_return", returns)) if on]
    try:
        # The master's bus comes up once its flow runs: wait for its socket (a first
        # attempt before would log that the bus cannot be reached).
        while not stop.is_set() and not (os.path.exists(bus.manor_path)
                                         and bus.connect_pub(READ_WAIT)):
            stop.wait(READ_WAIT / 5)
        if not parts:  # nothing to run after all: the bus need not hold events for us
            bus.close_pub(release=True)
            return 0
        if not stop.is_set():
            log.info("%s listening on the master's bus (pid %d)", " and ".join(parts),
                     os.getpid())
        while not stop.is_set():
            first = bus.get_event(wait=READ_WAIT, full=True)
            if first is not None:
                _hand_over(bus, first, returns, reactor)
        # Stopping (the master stopped first): what its last flush left in our socket
        # still goes to the spool.
        while returns is not None and (last := bus.get_event(
                wait=DRAIN_WAIT, full=True)) is not None:
            _hand_over(bus, last, returns, None)
    finally:
        bus.destroy()
        if reactor is not None:
            reactor.close()
        if returns is not None:
            returns.close()
    return 0
