"""``event_return`` on the master: its bus events, batched, to returners, through an
on-disk spool so that an outage of the returner's database loses nothing.

The bus reader hands events to ``EventReturn.add``; they are appended to the spool
(``<cachedir>/event_return/``: numbered segment files of length-prefixed msgpack
``[tag, data]`` frames, synced once per append) before anything else happens to them.
A sender thread reads the spool from its committed position in batches of at most
``event_return_queue`` events (``BATCH`` when that is 0), gives each batch to every
returner of ``event_return`` (``name.event_return(events)``: Salt's returners through
Salt's loader, or the built-in ``sqlite3`` and ``pgjsonb``: ``raetsalt.store.pgevents``),
and only when all of them took it moves the
committed position (a small file replaced atomically).  A returner that fails is logged
once per ``FAIL_LOG_INTERVAL`` (with how many events wait) and the same batch is tried
again after a back-off (``RETRY_MIN`` doubling to ``RETRY_MAX``); a master restart
resumes from the committed position.  So a batch may reach a returner twice (after a
crash between its write and the commit), never zero times.

Salt 3008 logs and drops a batch its returner refused; raetsalt keeps it (the README's
divergence table).  ``event_return_whitelist``/``event_return_blacklist`` (tag globs)
choose the events; the spool holds at most ``event_return_spool_max`` bytes, beyond which
new events are dropped, counted and logged (disk is bounded; the returner is far behind).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import sqlite3
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgpack

from raetsalt.execution.returners import setting
from raetsalt.log import Throttle

log = logging.getLogger("raetsalt.event_return")

BATCH = 500
"""Events per batch when ``event_return_queue`` is 0."""
SEGMENT_BYTES = 64 << 20
RETRY_MIN = 0.2
RETRY_MAX = 10.0
FAIL_LOG_INTERVAL = 60.0
_LENGTH = struct.Struct(">I")
MAX_FRAME = 32 << 20

EventReturner = Callable[[list[dict[str, Any]]], None]


class Spool:
    """Append-only segments plus a committed position ``(segment, offset)``."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.committed = self._load_position()
        # Always a new segment: a tail torn by a crash stays at the end of an old one,
        # which the reader leaves for the next (appending after it would misalign every
        # frame that follows).
        segments = self._segments()
        self.write_segment = max([*segments, self.committed[0] - 1]) + 1
        self._out = open(self._path(self.write_segment), "ab")  # noqa: SIM115 - kept open

    def _path(self, number: int) -> str:
        return os.path.join(self.directory, f"{number:012d}.spool")

    def _segments(self) -> list[int]:
        found = []
        for name in os.listdir(self.directory):
            if name.endswith(".spool") and name[:-6].isdigit():
                found.append(int(name[:-6]))
        return sorted(found)

    def _load_position(self) -> tuple[int, int]:
        try:
            with open(os.path.join(self.directory, "position")) as handle:
                segment, offset = handle.read().split()
            return int(segment), int(offset)
        except (OSError, ValueError):
            return 0, 0

    def size(self) -> int:
        total = 0
        for number in self._segments():
            try:
                total += os.path.getsize(self._path(number))
            except OSError:
                pass
        if self.committed[0] in self._segments():
            total -= self.committed[1]
        return total

    def append(self, events: Sequence[tuple[str, Mapping[str, Any]]]) -> int:
        """Write ``events`` durably (one sync); returns the bytes written."""
        chunks = []
        for tag, data in events:
            frame = msgpack.packb([tag, data], use_bin_type=True, default=str)
            chunks.append(_LENGTH.pack(len(frame)) + frame)
        blob = b"".join(chunks)
        self._out.write(blob)
        self._out.flush()
        os.fsync(self._out.fileno())
        if self._out.tell() >= SEGMENT_BYTES:
            self._out.close()
            self.write_segment += 1
            self._out = open(self._path(self.write_segment), "ab")  # noqa: SIM115
        return len(blob)

    def read(self, limit: int) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        """Up to ``limit`` events from the committed position, and the position after."""
        segment, offset = self.committed
        events: list[dict[str, Any]] = []
        while len(events) < limit:
            try:
                with open(self._path(segment), "rb") as handle:
                    handle.seek(offset)
                    while len(events) < limit:
                        head = handle.read(_LENGTH.size)
                        if len(head) < _LENGTH.size:
                            break
                        (length,) = _LENGTH.unpack(head)
                        frame = handle.read(length) if length <= MAX_FRAME else b""
                        if len(frame) < length or not frame:
                            break  # a torn tail (a crash mid-write): the writer goes on
                        offset += _LENGTH.size + length
                        try:
                            tag, data = msgpack.unpackb(frame, raw=False)
                        except (ValueError, TypeError, msgpack.UnpackException):
                            continue  # not a frame of ours: left out
                        if isinstance(tag, str):
                            events.append({"tag": tag, "data": data})
            except FileNotFoundError:
                pass
            if len(events) >= limit or segment >= self.write_segment:
                break
            segment, offset = segment + 1, 0
        return events, (segment, offset)

    def commit(self, position: tuple[int, int]) -> None:
        tmp = os.path.join(self.directory, "position.tmp")
        with open(tmp, "w") as handle:
            handle.write(f"{position[0]} {position[1]}\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, os.path.join(self.directory, "position"))
        for number in self._segments():
            if number < position[0]:
                try:
                    os.unlink(self._path(number))
                except OSError:
                    pass
        self.committed = position

    def close(self) -> None:
        self._out.close()


class EventReturn:
    """The spool, its sender thread and the returners (see the module docstring)."""

    def __init__(self, opts: Mapping[str, Any], returners: dict[str, EventReturner], *,
                 directory: str | None = None) -> None:
        self.opts = opts
        self.returners = returners
        batch = int(opts.get("event_return_queue") or 0)
        self.batch = batch if batch > 0 else BATCH
        self.whitelist = list(opts.get("event_return_whitelist") or [])
        self.blacklist = list(opts.get("event_return_blacklist") or [])
        self.spool = Spool(directory or os.path.join(str(opts["cachedir"]), "event_return"),
                           int(opts.get("event_return_spool_max") or 1 << 30))
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self._fail_log = Throttle(FAIL_LOG_INTERVAL)
        self._drop_log = Throttle(FAIL_LOG_INTERVAL)
        self._spooled_bytes = self.spool.size()
        self._thread = threading.Thread(target=self._send_loop, name="event-return",
                                        daemon=True)
        self._thread.start()

    def wanted(self, tag: str) -> bool:
        if self.whitelist and not any(fnmatch.fnmatchcase(tag, g) for g in self.whitelist):
            return False
        return not any(fnmatch.fnmatchcase(tag, g) for g in self.blacklist)

    def add(self, events: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Spool the wanted ``events`` (the bus reader's thread)."""
        chosen = [e for e in events if self.wanted(e[0])]
        if not chosen:
            return
        if self._spooled_bytes > self.spool.max_bytes:
            self.stats["dropped"] += len(chosen)
            count = self._drop_log.note("full", time.monotonic())
            if count:
                log.error("event_return: the spool holds more than %d bytes; %d event(s) "
                          "dropped (the returners are far behind)", self.spool.max_bytes,
                          len(chosen))
            return
        with self._lock:
            self._spooled_bytes += self.spool.append(chosen)
            self.stats["spooled"] += len(chosen)
            self._wake.notify()

    def _send_loop(self) -> None:
        delay = RETRY_MIN
        while True:
            with self._lock:
                events, position = self.spool.read(self.batch)
                while not events and not self._stop:
                    self._wake.wait(1.0)
                    events, position = self.spool.read(self.batch)
                if not events and self._stop:
                    return
            problem = self._deliver(events)
            if problem is None:
                with self._lock:
                    self.spool.commit(position)
                    self._spooled_bytes = self.spool.size()
                    self.stats["returned"] += len(events)
                delay = RETRY_MIN
                continue
            self.stats["failures"] += 1
            count = self._fail_log.note(problem[0], time.monotonic())
            if count:
                log.error("event_return: returner %s failed (%s); the events wait in the "
                          "spool (%d bytes) and are tried again", problem[0], problem[1],
                          self._spooled_bytes)
            with self._lock:
                if self._stop:
                    return
                self._wake.wait(delay)
            delay = min(RETRY_MAX, delay * 2)

    def _deliver(self, events: list[dict[str, Any]]) -> tuple[str, str] | None:
        for name, returner in self.returners.items():
            try:
                returner(events)
            except Exception as exc:  # noqa: BLE001 - a returner's failure waits in the spool
                return name, " ".join(str(exc).split())[:300] or type(exc).__name__
        return None

    def close(self, timeout: float = 5.0) -> None:
        """Stop the sender after the batch it is giving (what is left stays spooled)."""
        with self._lock:
            self._stop = True
            self._wake.notify_all()
        self._thread.join(timeout)
        self.spool.close()
        for returner in self.returners.values():
            closer = getattr(returner, "close", None)
            if callable(closer):
                try:
                    closer()
                except Exception:  # noqa: BLE001 - stopping; nothing is lost by this
                    log.debug("closing an event_return returner failed", exc_info=True)


def sqlite_event_return(opts: Mapping[str, Any]) -> EventReturner:
    """The built-in ``sqlite3`` returner's ``event_return``: rows in ``salt_events`` (tag,
    data, master_id, alter_time) of ``sqlite3.database``, one transaction per batch."""
    path = setting(opts, {}, "sqlite3.database")
    if not isinstance(path, str) or not path:
        raise ValueError("event_return sqlite3 needs sqlite3.database")
    timeout = setting(opts, {}, "sqlite3.timeout")
    wait = float(timeout) if isinstance(timeout, int | float) else 5.0
    master_id = str(opts.get("id"))

    def event_return(events: list[dict[str, Any]]) -> None:
        conn = sqlite3.connect(path, timeout=wait)
        try:
            with conn:
                conn.execute("CREATE TABLE IF NOT EXISTS salt_events (id INTEGER PRIMARY KEY, "
                             "tag TEXT, data TEXT, master_id TEXT, alter_time TEXT)")
                now = datetime.now(UTC).isoformat()
                conn.executemany(
                    "INSERT INTO salt_events (tag, data, master_id, alter_time) "
                    "VALUES (?, ?, ?, ?)",
                    [(str(e["tag"]), json.dumps(e["data"], default=str), master_id, now)
                     for e in events])
        finally:
            conn.close()

    return event_return


def _psycopg_available() -> bool:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return False
    return True


def event_returners(opts: Mapping[str, Any]) -> dict[str, EventReturner]:
    """The ``event_return`` returners: built-in ``sqlite3`` and (with the ``cluster``
    extra) ``pgjsonb``, else Salt's (raises ``LookupError`` naming what is missing,
    ``StoreConfigError`` for an unusable database setting)."""
    names = opts.get("event_return") or []
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    found: dict[str, EventReturner] = {}
    salt_funcs: Any = None
    for name in names:
        if name == "sqlite3":
            found[name] = sqlite_event_return(opts)
            continue
        if name == "pgjsonb" and _psycopg_available():
            from raetsalt.store.pgevents import PgEventReturn

            found[name] = PgEventReturn(opts)
            continue
        if salt_funcs is None:
            from raetsalt.saltbridge.mastersalt import salt_returners

            salt_funcs = salt_returners(opts)
        func = salt_funcs.get(f"{name}.event_return")
        if func is None:
            raise LookupError(f"event_return: Salt has no returner {name!r} with "
                              "event_return")
        found[name] = func
    return found
