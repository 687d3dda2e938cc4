"""The minion's Salt scheduler and beacons: a long-lived child of the Salt zygote.

Salt's ``Schedule`` and ``Beacon`` keep state between runs (next fire times, beacons'
intervals and open handles) and need a persistent loader, so they cannot live in a
forked job.  The zygote (``raetsalt.saltbridge.zygote``) forks this process once its
loader is up (copy-on-write: no second load of Salt) and again if it dies.  It:

* evaluates Salt's ``Schedule`` every ``loop_interval`` seconds (``schedule:`` in the
  minion's config, ``schedule`` in its pillar, what ``schedule.add`` added and
  ``_schedule.conf`` kept).  Salt's job processes fire their return on the minion bus as
  ``__schedule_return``; this process hands it to the minion daemon (control op
  ``schedule_return`` on the zygote's socket), which sends it to the master as a
  return with jid ``req``: the master gives it a real jid and stores it in its job cache;
* (``mine_interval`` is not a scheduled job here: the minion daemon's own timer runs
  ``mine.update`` in every execution mode, ``raetsalt.services.mineclock``);
* runs Salt's ``Beacon.process`` on the same beat (``beacons:`` in config and pillar)
  and fires all the events of one beat as one ``fire_master`` batch on the minion bus;
  the minion daemon sends a batch to the master as few road messages;
* runs Salt's engines (``engines:``) through Salt's ``start_engines`` and
  ``ProcessManager``; their events (``event.send``) go to the master's bus;
* answers ``manage_schedule`` / ``manage_beacons`` events, which Salt's ``schedule.*``
  and ``beacons.*`` functions fire on the minion bus; Salt's ``Schedule``/``Beacon``
  methods fire the ``/salt/minion/minion_schedule_*_complete`` (beacons:
  ``minion_beacon_*_complete``) answers those functions wait for.

Pillar: the daemon sends the minion's pillar to the zygote (op ``pillar``), which
passes it on through this process's own socket; Salt reads ``opts['pillar']`` on each
evaluation.  After the zygote reloads Salt's modules it says ``reload`` here too.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from typing import Any

from raetsalt.drivers.jobchild import plain
from raetsalt.errors import BadPacket

from . import control

log = logging.getLogger("raetsalt.saltbridge.scheduler")

SCHEDULE_FUNCS = {
    "delete": ("delete_job", ("name", "persist")),
    "add": ("add_job", ("schedule", "persist")),
    "modify": ("modify_job", ("name", "schedule", "persist")),
    "enable": ("enable_schedule", ("persist",)),
    "disable": ("disable_schedule", ("persist",)),
    "enable_job": ("enable_job", ("name", "persist")),
    "run_job": ("run_job", ("name",)),
    "disable_job": ("disable_job", ("name", "persist")),
    "postpone_job": ("postpone_job", ("name", "*")),
    "skip_job": ("skip_job", ("name", "*")),
    "reload": ("reload", ("schedule",)),
    "list": ("list", ("where",)),
    "save_schedule": ("save_schedule", ()),
    "get_next_fire_time": ("get_next_fire_time", ("name",)),
    "job_status": ("job_status", ("name", "fire_event")),
}
"""``manage_schedule``'s ``func`` -> Salt's ``Schedule`` method and its arguments (keys
of the event's data; ``*``: the whole data), as Salt's minion maps them."""
BEACON_FUNCS = {
    "add": ("add_beacon", ("name", "beacon_data")),
    "modify": ("modify_beacon", ("name", "beacon_data")),
    "delete": ("delete_beacon", ("name",)),
    "enable": ("enable_beacons", ()),
    "disable": ("disable_beacons", ()),
    "enable_beacon": ("enable_beacon", ("name",)),
    "disable_beacon": ("disable_beacon", ("name",)),
    "list": ("list_beacons", ("include_opts", "include_pillar")),
    "list_available": ("list_available_beacons", ()),
    "validate_beacon": ("validate_beacon", ("name", "beacon_data")),
    "reset": ("reset", ()),
}
"""``manage_beacons``'s ``func`` -> Salt's ``Beacon`` method and its keyword arguments."""
ENGINE_CHECK = 5.0
"""Seconds between looks at the engine processes."""
MAX_BEACON_EVENTS = 1000
"""Beacon events fired per beat at most (a runaway beacon cannot flood the road)."""


class Scheduler:
    """The scheduler process's state (see the module docstring)."""

    def __init__(self, runtime: Any, daemon: socket.socket, private: socket.socket) -> None:
        import salt.beacons
        import salt.utils.event
        import salt.utils.schedule

        self.runtime = runtime
        self.opts = runtime.opts
        self.daemon = daemon
        self.private = private
        self.opts.setdefault("pillar", {})
        self.opts.setdefault("schedule", {})
        self.opts.setdefault("beacons", {})
        self.schedule = salt.utils.schedule.Schedule(
            self.opts, runtime.functions, runtime.returners(), new_instance=True)
        self.beacons = salt.beacons.Beacon(self.opts, runtime.functions)
        self.bus = salt.utils.event.get_event("minion", opts=self.opts, listen=True)
        self.dropped_beacon_events = 0
        self.engines: Any = None
        self._engines_at = 0.0

    def start_engines(self) -> None:
        """Salt's engines (``engines:``), as Salt's minion starts them: Salt's
        ``start_engines`` with Salt's ``ProcessManager`` (restarted when they die, looked
        at every ``ENGINE_CHECK`` seconds).  Their ``event.send`` goes through the minion
        bus to the master, as every Salt job's does here."""
        if not self.opts.get("engines"):
            return
        from .mastersalt import start_salt_engines

        try:
            manager = start_salt_engines(self.opts, "raetsalt-minion engines")
        except Exception as exc:  # noqa: BLE001 - one line; the scheduler goes on
            log.error("engines: not started: %s: %s", type(exc).__name__, exc)
            return
        self.engines = manager

    def stop_engines(self) -> None:
        if self.engines is not None:
            self.engines.stop_restarting()
            self.engines.kill_children()
            self.engines = None

    def serve(self) -> int:
        try:
            return self._serve()
        finally:
            self.stop_engines()

    def _serve(self) -> int:
        interval = max(0.05, float(self.opts.get("loop_interval") or 1))
        next_beat = time.monotonic()
        while True:
            if not self._control():
                return 0
            now = time.monotonic()
            if self.engines is not None and now >= self._engines_at:
                self._engines_at = now + ENGINE_CHECK
                self.engines.check_children()
            if now >= next_beat:
                next_beat = now + interval
                self._beat()
            event = self.bus.get_event(wait=max(0.01, next_beat - time.monotonic()),
                                       full=True)
            while event is not None:
                self._on_event(str(event.get("tag")), event.get("data"))
                event = self.bus.get_event(no_block=True, full=True)

    # -- the beat ---------------------------------------------------------------------------

    def _beat(self) -> None:
        try:
            self.schedule.eval(now=datetime.datetime.now())
        except Exception as exc:  # noqa: BLE001 - a bad job must not stop the scheduler
            log.error("schedule: evaluation failed: %s: %s", type(exc).__name__, exc)
        try:
            events = self._beacon_events()
        except Exception as exc:  # noqa: BLE001 - a bad beacon must not stop the others
            log.error("beacons: processing failed: %s: %s", type(exc).__name__, exc)
            return
        if not events:
            return
        if len(events) > MAX_BEACON_EVENTS:
            self.dropped_beacon_events += len(events) - MAX_BEACON_EVENTS
            log.warning("beacons: %d events in one beat, %d dropped (%d in all)",
                        len(events), len(events) - MAX_BEACON_EVENTS,
                        self.dropped_beacon_events)
            events = events[:MAX_BEACON_EVENTS]
        self.bus.fire_event({"events": plain(events), "pretag": None, "tag": None,
                             "data": None}, "fire_master")

    def _beacon_events(self) -> list[dict[str, Any]]:
        functions = self.runtime.functions
        merge = functions.get("config.merge") if hasattr(functions, "get") else None
        config = (merge("beacons", self.opts.get("beacons") or {}, omit_opts=True)
                  if merge is not None else self.opts.get("beacons"))
        if not config:
            return []
        found: list[dict[str, Any]] = self.beacons.process(config, self.opts["grains"])
        return found

    # -- the minion bus ---------------------------------------------------------------------

    def _on_event(self, tag: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if tag.startswith("manage_schedule"):
            self._manage(self.schedule, SCHEDULE_FUNCS, data, keywords=False)
        elif tag.startswith("manage_beacons"):
            self._manage(self.beacons, BEACON_FUNCS, data, keywords=True)
        elif tag.startswith("__schedule_return"):
            ret = {k: v for k, v in data.items() if not k.startswith("_")}
            try:
                control.send(self.daemon, {"op": "schedule_return"}, plain(ret))
            except OSError as exc:
                log.warning("schedule: the return of %s not sent: %s",
                            data.get("schedule"), exc)

    @staticmethod
    def _manage(target: Any, table: dict[str, tuple[str, tuple[str, ...]]],
                data: dict[str, Any], *, keywords: bool) -> None:
        func = data.get("func")
        entry = table.get(func) if isinstance(func, str) else None
        if entry is None:
            log.error("%s: unknown function %r", type(target).__name__, func)
            return
        method, names = entry
        try:
            if keywords:
                getattr(target, method)(**{n: data.get(n) for n in names})
            else:
                getattr(target, method)(*(data if n == "*" else data.get(n) for n in names))
        except Exception as exc:  # noqa: BLE001 - the caller times out and says so
            log.error("%s.%s failed: %s: %s", type(target).__name__, method,
                      type(exc).__name__, exc)

    # -- the zygote -------------------------------------------------------------------------

    def _control(self) -> bool:
        """Take what the zygote sent; False once it is gone."""
        while True:
            try:
                message = control.receive(self.private)
            except BlockingIOError:
                return True
            except BadPacket as exc:
                log.error("scheduler: bad control message: %s", exc)
                continue
            if message is None:
                return False
            header, body, fds = message
            for fd in fds:
                os.close(fd)
            if header.get("op") == "pillar" and isinstance(body, dict):
                self.opts["pillar"] = body
            elif header.get("op") == "reload":
                self._reload()

    def _reload(self) -> None:
        """Salt's modules again (after ``saltutil.sync_*``/``refresh_modules``): scheduled
        jobs and beacons see synced modules, as after Salt's ``module_refresh``."""
        import salt.beacons

        try:
            self.runtime.load()
            self.runtime._returners = None
            self.schedule.functions = self.runtime.functions
            self.schedule.returners = self.runtime.returners()
            self.beacons = salt.beacons.Beacon(self.opts, self.runtime.functions)
        except Exception as exc:  # noqa: BLE001 - keep the last good loader
            log.error("scheduler: reloading Salt's modules failed: %s: %s",
                      type(exc).__name__, exc)


def run(runtime: Any, daemon: socket.socket, private: socket.socket) -> int:
    """The scheduler process's body (in the zygote's fork); returns its exit status."""
    private.setblocking(False)
    try:
        scheduler = Scheduler(runtime, daemon, private)
    except Exception as exc:  # noqa: BLE001 - reported once, the zygote retries later
        log.error("the Salt scheduler and beacons did not start: %s: %s",
                  type(exc).__name__, exc)
        return 1
    scheduler.start_engines()
    return scheduler.serve()
