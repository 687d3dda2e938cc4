"""Reactions claimed in the cluster's store, so an event several masters see reacts once.

Each master's reactor, before it carries out a reaction, claims ``(cluster id, event
key, reaction id)`` with one statement: an insert into ``raetsalt_reaction_claims``
whose primary key is that triple.  The insert that creates the row (or renews a claim
older than ``window`` seconds: the same event again, later) wins and reacts; every other
master's insert finds the row and does nothing.  PostgreSQL's unique index decides; no
other agreement between masters is needed.

When the store cannot be reached the master reacts by itself (a reaction may then run
on several masters) and says so once per ``LOG_INTERVAL``; it does not try the store
again for ``RETRY`` seconds, so reactions are not held up by connection attempts.
Claims older than twice the window are removed now and then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import psycopg

from raetsalt.log import Throttle
from raetsalt.store import schema
from raetsalt.store.pgconfig import connection_params, describe
from raetsalt.store.pgwriter import close_quietly, connect_ready

log = logging.getLogger("raetsalt.reactor")

CREATE = (
    f"SELECT pg_advisory_xact_lock({schema.LOCK})",  # masters starting together
    """CREATE TABLE IF NOT EXISTS raetsalt_reaction_claims (
        cluster_id varchar(255) NOT NULL,
        event_key char(64) NOT NULL,
        reaction varchar(255) NOT NULL,
        master varchar(255) NOT NULL,
        claimed_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT NOW(),
        PRIMARY KEY (cluster_id, event_key, reaction))""",
)
CLAIM = ("INSERT INTO raetsalt_reaction_claims (cluster_id, event_key, reaction, master) "
         "VALUES (%s, %s, %s, %s) "
         "ON CONFLICT (cluster_id, event_key, reaction) DO UPDATE "
         "SET master = EXCLUDED.master, claimed_at = NOW() "
         "WHERE raetsalt_reaction_claims.claimed_at < NOW() - make_interval(secs => %s) "
         "RETURNING master")
"""Parameters: cluster id, event key, reaction id, this master, the window (s).  A row
comes back only to the master that claimed it."""
PURGE = ("DELETE FROM raetsalt_reaction_claims WHERE cluster_id = %s "
         "AND claimed_at < NOW() - make_interval(secs => %s)")
RETRY = 5.0
LOG_INTERVAL = 60.0
PURGE_INTERVAL = 60.0
WINDOW = 60.0
"""Seconds during which the same event (same tag and data) claims a reaction once."""


class ReactionClaims:
    """``claim(event_key, reaction_id)``: True when this master is to react."""

    def __init__(self, opts: Mapping[str, Any], *, window: float = WINDOW) -> None:
        self.params = connection_params(opts)  # raises StoreConfigError
        self.cluster_id = str(opts["cluster_id"])
        self.master = str(opts.get("id"))
        self.window = window
        self.where = describe(self.params)
        self.stats: Counter[str] = Counter()
        self._lock = threading.Lock()  # the reactor's worker threads share the connection
        self._conn: psycopg.Connection[Any] | None = None
        self._down_until = 0.0
        self._next_purge = 0.0
        self._throttle = Throttle(LOG_INTERVAL)

    def claim(self, event_key: str, reaction: str) -> bool:
        with self._lock:
            now = time.monotonic()
            if now < self._down_until:
                self.stats["unclaimed"] += 1
                return True
            try:
                conn = self._connection()
                with conn.transaction():
                    row = conn.execute(CLAIM, (self.cluster_id, event_key, reaction[:255],
                                               self.master, self.window)).fetchone()
                    if now >= self._next_purge:
                        self._next_purge = now + PURGE_INTERVAL
                        conn.execute(PURGE, (self.cluster_id, 2 * self.window))
            except psycopg.Error as exc:
                self._failed(exc, now)
                return True
        self.stats["claimed" if row is not None else "taken"] += 1
        return row is not None

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        self._close()
        self._conn = connect_ready(self.params, CREATE, autocommit=True)
        return self._conn

    def _failed(self, exc: psycopg.Error, now: float) -> None:
        self.stats["unclaimed"] += 1
        self._down_until = now + RETRY
        self._close()
        times = self._throttle.note("down", now)
        if times:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else \
                type(exc).__name__
            log.error("reactor: the cluster store (%s) cannot be reached (%s); reacting on "
                      "this master alone, a reaction may also run on another master "
                      "(%d time(s))", self.where, first, times)

    def _close(self) -> None:
        close_quietly(self._conn)
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()
