"""The built-in ``pgjsonb`` ``event_return`` returner: bus events as rows of Salt's
``salt_events`` table (tag, data jsonb, master_id, alter_time), with psycopg 3 (the
``cluster`` extra) rather than Salt's psycopg2.

The database is where ``master_job_cache: pgjsonb`` finds it (``cluster_store``, else
Salt's ``returner.pgjsonb.*`` keys).  One connection is kept and made again after a
failure; the tables are created (Salt's schema, ``raetsalt.store.schema``) on each
connection.  A batch is one transaction written with ``COPY``; the data is JSON text
``jsonb`` takes (U+0000 and unpaired surrogates become U+FFFD, as in the job cache).
When the database still refuses a row for its content (a tag it cannot hold), each row
gets its own savepoint and the refused ones are counted and logged, so they cannot hold
back the events after them.
Any other failure raises: ``EventReturn`` keeps the batch in its spool and tries again.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import psycopg

from raetsalt.log import Throttle
from raetsalt.store import schema
from raetsalt.store.pgconfig import connection_params
from raetsalt.store.pgwriter import close_quietly, connect_ready
from raetsalt.store.rows import json_text

log = logging.getLogger("raetsalt.event_return")

COPY = "COPY salt_events (tag, data, master_id, alter_time) FROM STDIN"
INSERT = ("INSERT INTO salt_events (tag, data, master_id, alter_time) "
          "VALUES (%s, %s::jsonb, %s, to_timestamp(%s))")
REJECT_LOG_INTERVAL = 60.0


class PgEventReturn:
    """``event_return(events)`` for the built-in ``pgjsonb`` returner."""

    def __init__(self, opts: Mapping[str, Any]) -> None:
        self.params = connection_params(opts)  # raises StoreConfigError
        self.master_id = str(opts.get("id"))
        self.stats: Counter[str] = Counter()
        self._conn: psycopg.Connection[Any] | None = None
        self._throttle = Throttle(REJECT_LOG_INTERVAL)

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self.close()
        self._conn = connect_ready(self.params, schema.CREATE)
        return self._conn

    def __call__(self, events: list[dict[str, Any]]) -> None:
        conn = self._connection()
        at = time.time()
        rows = [(str(e["tag"])[:255], json_text(e["data"], "event")) for e in events]
        try:
            with conn.transaction(), conn.cursor() as cur, cur.copy(COPY) as copy:
                stamp = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(at))
                for tag, data in rows:
                    copy.write_row((tag, data, self.master_id, stamp))
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            if conn.broken:
                raise
            log.debug("event_return pgjsonb: a row refused (%s); row by row", exc)
            self._one_by_one(conn, rows, at)

    def _one_by_one(self, conn: psycopg.Connection[Any], rows: list[tuple[str, str]],
                    at: float) -> None:
        with conn.transaction(), conn.cursor() as cur:
            for tag, data in rows:
                try:
                    with conn.transaction():
                        cur.execute(INSERT, (tag, data, self.master_id, at))
                except (psycopg.DataError, psycopg.IntegrityError) as exc:
                    if conn.broken:
                        raise
                    self.stats["rejected"] += 1
                    times = self._throttle.note("rejected", time.monotonic())
                    if times:
                        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                        log.error("event_return pgjsonb: the database refused the event "
                                  "%r: %s (%d time(s)); left out", tag[:100], first, times)

    def close(self) -> None:
        close_quietly(self._conn)
        self._conn = None
