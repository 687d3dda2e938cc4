"""The master's job cache in PostgreSQL: ``master_job_cache: pgjsonb`` (an adapter).

A ``JobStore`` (``raetsalt.services.ports``) over Salt's pgjsonb tables
(``raetsalt.store.schema``).  Writes never wait: ``save_load``/``save_return`` encode the
row (a record that cannot be stored fails in the caller, as with the file cache) and
queue it; ``commit_now`` (the loop calls it once per pass) hands the pass's rows to the
writer (``raetsalt.store.pgwriter``: spool on disk, then the database, in threads).
Until the database holds a row, reads find it here (``jobs.lookup_jid`` right after a
return, or during an outage); the rows held so are bounded (``MAX_HELD``).

Reads (runners: ``jobs.lookup_jid``, ``jobs.list_jobs``; a return for a job this master
did not publish) query the database on the loop, over a connection of their own with
short time-outs.  When it fails, reads answer from what is held here only and the
database is not asked again for ``READ_RETRY`` seconds (doubling while it keeps
failing, up to a minute), so an outage costs the loop one failed attempt per interval.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from raetsalt.drivers.clock import monotonic
from raetsalt.errors import ConfigError
from raetsalt.log import Throttle
from raetsalt.services.jids import new_jid
from raetsalt.store import schema
from raetsalt.store.pgconfig import StoreConfigError, connection_params, describe
from raetsalt.store.rows import (
    CleanRow,
    LoadRow,
    ReturnRow,
    Row,
    check_jid,
    from_full_ret,
    load_row,
    return_row,
)

log = logging.getLogger(__name__)

MAX_HELD = 200_000
"""Rows kept for reads until the database has them; beyond, reads may miss the newest
until it does (they are safe in the spool)."""
BATCH = 5_000
"""Rows queued in one pass above which they go to the writer at once."""
RECENT_LOADS = 10_000
"""Publish records kept after they are written (small, never changed): the newest jobs'
records are read without the database, during an outage too."""
READ_RETRY = 2.0
READ_RETRY_MAX = 60.0
READ_SESSION = {"connect_timeout": 2, "options": "-c statement_timeout=5000"}
"""A read waits at most about this long for the database (on the loop)."""

_LOAD = ""
"""The key of a job's publish record among its held rows (a minion id is never empty)."""


class PgJobCache:
    """Job cache rows in PostgreSQL (module docstring)."""

    def __init__(self, opts: Mapping[str, Any], spool_dir: str | os.PathLike[str], *,
                 clock: Callable[[], float] = monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        try:
            self.params = connection_params(opts)
        except StoreConfigError as exc:
            raise ConfigError(str(exc)) from None
        try:
            from raetsalt.store.pgwriter import PgWriter, connect
        except ImportError as exc:  # the 'cluster' extra is not installed
            raise ConfigError(f"master_job_cache: pgjsonb needs psycopg 3 ({exc}): "
                              "pip install 'raetsalt[cluster]'") from None
        self._connect = connect
        self.clock = clock
        self.wall = wall
        self.writer = PgWriter(self.params, spool_dir, self._shipped)
        self._lock = threading.Lock()
        self._held: dict[str, dict[str, Row]] = {}
        self._held_rows = 0
        self._batch: list[Row] = []
        self._loads: OrderedDict[str, dict[str, Any]] = OrderedDict()
        """jid -> publish record, the newest ``RECENT_LOADS`` (the loop's only)."""
        self._reader: Any = None
        self._read_after = 0.0
        self._read_wait = READ_RETRY
        self._throttle = Throttle(60.0)
        log.info("job cache: pgjsonb, database %s, spool %s", describe(self.params),
                 self.writer.spool.directory)

    # -- writes ---------------------------------------------------------------------------

    def save_load(self, jid: str, load: dict[str, Any]) -> None:
        row = load_row(jid, load, self.wall())
        self._queue(row, _LOAD)
        self._remember(jid, json.loads(row.load))

    def _remember(self, jid: str, load: dict[str, Any]) -> None:
        self._loads[jid] = load
        self._loads.move_to_end(jid)
        while len(self._loads) > RECENT_LOADS:
            self._loads.popitem(last=False)

    def save_return(self, jid: str, minion: str, ret: dict[str, Any]) -> None:
        self._queue(return_row(jid, minion, ret, self.wall()), minion)

    def _queue(self, row: LoadRow | ReturnRow, key: str) -> None:
        with self._lock:
            rows = self._held.get(row.jid)
            if rows is not None and key in rows:
                rows[key] = row  # the newer one: what reads find
            elif self._held_rows < MAX_HELD:
                self._held.setdefault(row.jid, {})[key] = row
                self._held_rows += 1
        self._batch.append(row)
        if len(self._batch) >= BATCH:
            self.commit_now()

    def commit_now(self) -> None:
        """Hand this pass's rows to the writer (never blocks)."""
        if self._batch:
            rows, self._batch = self._batch, []
            self.writer.submit(rows)

    def _shipped(self, rows: list[Row]) -> None:
        """The writer's thread: ``rows`` are in the database; reads find them there."""
        with self._lock:
            for row in rows:
                if isinstance(row, CleanRow):
                    continue
                key = row.minion if isinstance(row, ReturnRow) else _LOAD
                held = self._held.get(row.jid)
                if held is not None and held.get(key) == row:
                    del held[key]
                    self._held_rows -= 1
                    if not held:
                        del self._held[row.jid]

    def clean(self, now: datetime, keep_hours: float) -> list[str]:
        """Jobs older than ``keep_hours`` go, in the writer's order (after the rows
        queued before); what was removed is logged there, so none is listed here."""
        cutoff = now - timedelta(hours=keep_hours)
        jid = new_jid(cutoff)
        with self._lock:
            for old in [j for j in self._held if j < jid]:
                self._held_rows -= len(self._held.pop(old))
        for old in [j for j in self._loads if j < jid]:
            del self._loads[old]
        self._batch.append(CleanRow(jid, cutoff.timestamp()))
        return []

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until the database holds every row saved so far."""
        self.commit_now()
        return self.writer.flush(timeout)

    def close(self) -> None:
        self.commit_now()
        self.writer.close()
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # -- reads ----------------------------------------------------------------------------

    def _held_of(self, jid: str) -> dict[str, Row]:
        with self._lock:
            return dict(self._held.get(jid, {}))

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any] | None:
        """Rows of ``sql``, or None while the database cannot be read."""
        import psycopg

        now = self.clock()
        if now < self._read_after:
            return None
        try:
            if self._reader is None or self._reader.closed:
                self._reader = self._connect(self.params, autocommit=True, **READ_SESSION)
            rows: list[Any] = self._reader.execute(sql, params).fetchall()
        except psycopg.errors.UndefinedTable:
            return []  # the writer has not created the tables yet: nothing written
        except psycopg.Error as exc:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            self._read_after = now + self._read_wait
            self._read_wait = min(self._read_wait * 2, READ_RETRY_MAX)
            text = str(exc).strip().splitlines()
            times = self._throttle.note("read", now)
            if times:
                log.error("job cache: database %s cannot be read (%s); answering from the "
                          "rows not yet written only (%d time(s))", describe(self.params),
                          text[0] if text else type(exc).__name__, times)
            return None
        self._read_wait = READ_RETRY
        return rows

    def get_load(self, jid: str) -> dict[str, Any] | None:
        check_jid(jid)
        known = self._loads.get(jid)
        if known is not None:
            return dict(known)
        rows = self._query(schema.SELECT_LOAD, (jid,))
        if rows and isinstance(rows[0][0], dict):
            self._remember(jid, rows[0][0])
            return dict(rows[0][0])
        return None

    def get_returns(self, jid: str) -> dict[str, dict[str, Any]]:
        check_jid(jid)
        returns: dict[str, dict[str, Any]] = {}
        for minion, full in self._query(schema.SELECT_RETURNS, (jid,)) or []:
            ret = from_full_ret(full)
            if ret is not None:
                returns[str(minion)] = ret
        for key, row in self._held_of(jid).items():
            if isinstance(row, ReturnRow):
                ret = from_full_ret(json.loads(row.full_ret))
                if ret is not None:
                    returns[key] = ret
        return dict(sorted(returns.items()))

    def jids(self) -> list[str]:
        found = {str(row[0]) for row in self._query(schema.SELECT_JIDS) or []}
        with self._lock:
            found.update(self._held)
        return sorted(found)
