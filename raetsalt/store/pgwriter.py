"""The job cache's writer: rows to the spool, then to PostgreSQL, never on the loop.

The loop calls ``submit`` (a list append under a lock) and nothing else.  Two threads:

- the **spooler** takes everything submitted so far and appends it to the spool as one
  synced frame (``raetsalt.store.spool``): a return is on disk about one ``fsync`` after
  the loop saw it, whether or not the database is up (group commit: one sync per batch);
- the **shipper** reads the spool from where it stopped and writes the rows to the
  database, a chunk per transaction (upserts: a row written twice replaces itself), then
  removes the segments it finished.  While the database is unreachable it tries again
  every ``RETRY`` seconds; the rows wait on disk (not in memory) and are written, in
  order, when it is back.  A row the database refuses for its content (a data error) is
  set aside (``rejected.jsonl`` in the spool, bounded), counted and logged, so it cannot
  stop the rows after it.

Neither thread waits for the other: a database that hangs holds the shipper only.
Failures are logged once per interval, without tracebacks.  ``on_shipped`` (called in
the shipper's thread) tells the job cache which rows the database now holds.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg

from raetsalt.drivers.clock import monotonic
from raetsalt.log import Throttle
from raetsalt.store import schema
from raetsalt.store.pgconfig import describe
from raetsalt.store.rows import CleanRow, LoadRow, ReturnRow, Row
from raetsalt.store.spool import MAX_BYTES, Spool

log = logging.getLogger(__name__)

RETRY = 1.0
"""Seconds between attempts while the database (or the disk) fails."""
MAX_QUEUED = 500_000
"""Rows waiting for the spooler (only while the disk fails) above which new ones are
dropped and counted."""
REJECTED_BYTES = 16 << 20
"""Most bytes ``rejected.jsonl`` grows to."""
SESSION = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
           "keepalives_count": 3, "options": "-c statement_timeout=60000"}
"""A dead server over TCP is noticed within about half a minute; no statement runs
longer than a minute."""


def connect(params: Mapping[str, Any], **extra: Any) -> psycopg.Connection[Any]:
    """A connection with ``params`` (``raetsalt.store.pgconfig``)."""
    kwargs = {k: v for k, v in params.items() if k != "conninfo"}
    return psycopg.connect(params.get("conninfo", ""), **{**SESSION, **kwargs, **extra})


def connect_ready(params: Mapping[str, Any], statements: Sequence[str],
                  **extra: Any) -> psycopg.Connection[Any]:
    """A connection with ``params`` on which ``statements`` (creating tables) ran in one
    transaction; closed again if they fail."""
    conn = connect(params, **extra)
    try:
        with conn.transaction():
            for statement in statements:
                conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


def close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass


def _is_row_error(exc: psycopg.Error) -> bool:
    """The database refused a row for its content (not for being unreachable)."""
    return isinstance(exc, psycopg.DataError | psycopg.IntegrityError)


class PgWriter:
    """Spooler and shipper threads for one job cache database (module docstring)."""

    def __init__(self, params: Mapping[str, Any], spool_dir: str | os.PathLike[str],
                 on_shipped: Callable[[list[Row]], None] = lambda rows: None, *,
                 max_spool: int = MAX_BYTES, clock: Callable[[], float] = monotonic) -> None:
        self.params = dict(params)
        self.where = describe(params)
        self.spool = Spool(spool_dir, max_bytes=max_spool)
        self.on_shipped = on_shipped
        self.clock = clock
        self.stats: Counter[str] = Counter()
        """Rows ``spooled``, ``shipped``, ``dropped`` (not spooled: the disk failed or the
        spool was full), ``rejected`` (by the database), ``unreadable`` (damaged in the
        spool); attempts that failed: ``db_failures``, ``disk_failures``."""
        self.database_up: bool | None = None
        """None until the first attempt."""
        self._cond = threading.Condition()
        self._queue: list[Row] = []
        self._spooling = 0
        """Rows the spooler took and has not yet appended (flush waits for them)."""
        self._durable = self.spool.position()
        self._shipped = self.spool.first()
        if self._shipped != self._durable:
            log.warning("job cache: %d byte(s) of rows from an earlier run in the spool %s: "
                        "writing them first", self.spool.total_bytes(), self.spool.directory)
        self._stopping = False
        self._abandon = False
        self._throttle = Throttle(60.0)
        self._threads = [threading.Thread(target=self._spool_loop, name="pgjobs-spool",
                                          daemon=True),
                         threading.Thread(target=self._ship_loop, name="pgjobs-ship",
                                          daemon=True)]
        for thread in self._threads:
            thread.start()

    # -- the loop's side ------------------------------------------------------------------

    def submit(self, rows: list[Row]) -> None:
        if not rows:
            return
        with self._cond:
            room = MAX_QUEUED - len(self._queue)
            if room < len(rows):
                self.stats["dropped"] += len(rows) - max(room, 0)
                rows = rows[:max(room, 0)]
                self._note("queue", "job cache: the spool cannot keep up (disk failing): "
                           "job cache rows dropped")
            self._queue.extend(rows)
            self._cond.notify_all()

    def pending(self) -> bool:
        """Rows submitted and not yet in the database."""
        with self._cond:
            return bool(self._queue) or bool(self._spooling) or self._shipped != self._durable

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted is in the database (True) or ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._spooling or self._shipped != self._durable:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _spooled(self, timeout: float) -> bool:
        """Wait until everything submitted is in the spool."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._spooling:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def close(self, timeout: float = 10.0) -> None:
        """Spool what is queued, give the database ``timeout`` to take the spool (none
        while it is known to be unreachable), stop.  What it did not take stays in the
        spool for the next start."""
        if self.database_up is False:  # only the spool: the database may be gone long
            shipped = self._spooled(timeout) and self.flush(0.0)
        else:
            shipped = self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._abandon = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(max(1.0, timeout))
        self.spool.close()
        if not shipped:
            log.warning("job cache: %d byte(s) of rows left in the spool %s for the next "
                        "start (%s unreachable)", self.spool.total_bytes(),
                        self.spool.directory, self.where)

    # -- the spooler ----------------------------------------------------------------------

    def _spool_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                rows, self._queue = self._queue, []
                self._spooling = len(rows)
            try:
                appended = self.spool.append(rows)
            except OSError as exc:
                self.stats["disk_failures"] += 1
                self._note("disk", f"job cache: the spool cannot be written: {exc}")
                with self._cond:
                    self._queue[:0] = rows  # first again, in order
                    self._spooling = 0
                    if not self._abandon:
                        self._cond.wait(RETRY)
                    elif self._queue:
                        self.stats["dropped"] += len(self._queue)
                        log.error("job cache: %d row(s) lost: the spool cannot be written",
                                  len(self._queue))
                        return
                continue
            with self._cond:
                self._spooling = 0
                if appended:
                    self.stats["spooled"] += len(rows)
                    self._durable = self.spool.position()
                else:
                    self.stats["dropped"] += len(rows)
                    self._note("full", f"job cache: the spool {self.spool.directory} is full "
                               f"({self.spool.max_bytes} bytes, {self.where} unreachable): "
                               "rows dropped")
                self._cond.notify_all()

    # -- the shipper ----------------------------------------------------------------------

    def _ship_loop(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            try:  # at once: the tables exist, and a wrong config is in the log, from the start
                conn = self._connect()
                self.database_up = True
            except psycopg.Error as exc:
                self._down(exc)
            while True:
                with self._cond:
                    while self._shipped == self._durable and not self._stopping:
                        self._cond.wait()
                    if self._abandon and (self._shipped == self._durable or
                                          self.database_up is False):
                        return
                    start, end = self._shipped, self._durable
                chunk = self.spool.read(start, end)
                if chunk.bad:
                    self.stats["unreadable"] += chunk.bad
                    self._note("unreadable", f"job cache: {chunk.bad} damaged frame(s) or "
                               "row(s) in the spool skipped")
                try:
                    if chunk.rows:
                        if conn is None:
                            conn = self._connect()
                        self._write(conn, chunk.rows)
                except psycopg.Error as exc:
                    if conn is not None:
                        conn.close()
                        conn = None
                    self._down(exc)
                    with self._cond:
                        if not self._abandon:
                            self._cond.wait(RETRY)
                    continue
                self._up(len(chunk.rows))
                self.spool.remove(chunk.finished)
                self.stats["shipped"] += len(chunk.rows)
                if chunk.rows:
                    self.on_shipped(chunk.rows)
                with self._cond:
                    self._shipped = chunk.end
                    self._cond.notify_all()
        finally:
            if conn is not None:
                conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        return connect_ready(self.params, schema.CREATE)

    def _write(self, conn: psycopg.Connection[Any], rows: list[Row]) -> None:
        try:
            with conn.transaction():
                self._execute(conn, rows)
        except psycopg.Error as exc:
            if not _is_row_error(exc) or conn.broken:
                raise
            self._one_by_one(conn, rows)

    @staticmethod
    def _execute(conn: psycopg.Connection[Any], rows: list[Row]) -> None:
        """``rows`` in order, each run of one kind as one ``executemany``."""
        with conn.cursor() as cur:
            start = 0
            while start < len(rows):
                kind = type(rows[start])
                stop = start
                while stop < len(rows) and type(rows[stop]) is kind:
                    stop += 1
                run = rows[start:stop]
                if kind is LoadRow:
                    cur.executemany(schema.INSERT_LOAD,
                                    [(r.jid, r.load) for r in run if isinstance(r, LoadRow)])
                elif kind is ReturnRow:
                    cur.executemany(schema.INSERT_RETURN,
                                    [(r.fun, r.jid, r.minion, r.success, r.at, r.full_ret)
                                     for r in run if isinstance(r, ReturnRow)])
                else:
                    for row in run:
                        assert isinstance(row, CleanRow)
                        removed = 0
                        for statement in schema.CLEAN:
                            cur.execute(statement, {"jid": row.jid, "before": row.before})
                            removed += max(cur.rowcount, 0)
                        if removed:
                            log.info("job cache: removed %d row(s) of jobs before %s",
                                     removed, row.jid)
                start = stop

    def _one_by_one(self, conn: psycopg.Connection[Any], rows: list[Row]) -> None:
        """The chunk held a row the database refuses: each row in its own savepoint."""
        with conn.transaction():
            for row in rows:
                try:
                    with conn.transaction():
                        self._execute(conn, [row])
                except psycopg.Error as exc:
                    if not _is_row_error(exc) or conn.broken:
                        raise
                    self._reject(row, exc)

    def _reject(self, row: Row, exc: psycopg.Error) -> None:
        self.stats["rejected"] += 1
        what = f"{type(row).__name__} of job {row.jid}"
        self._note("rejected", f"job cache: the database refused a row ({what}): "
                   f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        path = self.spool.directory / "rejected.jsonl"
        try:
            if path.exists() and path.stat().st_size > REJECTED_BYTES:
                return
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, (json.dumps([type(row).__name__, *row]) + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # counted and logged above

    def _down(self, exc: psycopg.Error) -> None:
        self.stats["db_failures"] += 1
        if self.database_up is not False:
            log.error("job cache: database %s unreachable (%s); rows wait in the spool %s",
                      self.where, first_line(exc), self.spool.directory)
            self._throttle.note("db", self.clock())
        else:
            self._note("db", f"job cache: database {self.where} still unreachable: "
                       f"{first_line(exc)}")
        self.database_up = False

    def _up(self, rows: int) -> None:
        if self.database_up is False and rows:
            log.warning("job cache: database %s reachable again; writing the spooled rows",
                        self.where)
        if rows:
            self.database_up = True

    def _note(self, key: str, message: str) -> None:
        times = self._throttle.note(key, self.clock())
        if times:
            log.error("%s (%d time(s))", message, times)


def first_line(exc: BaseException) -> str:
    """What a database error says, on one line (for the log)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
