"""Which master of a cluster holds each minion's session, in PostgreSQL (a driver).

``raetsalt_cluster_minions`` has one row per (cluster, minion): the master holding its
session now, the grains it reported there and when.  Each master writes its own
minions' rows (``held`` on a minion's hello, ``gone`` when its session is lost here: the
row is deleted only if it still names this master, so a minion that moved is not
erased by the master it left).  Dashboards and scripts read the table; the masters
themselves learn of each other's minions over their own road
(``raetsalt.daemon.peerroad``), which is faster and needs no database.

A thread of its own writes, never the loop: the loop records the latest state of each
minion (``held``/``gone`` only update a dict, so memory is bounded by the fleet) and
the thread writes what changed, in one transaction per batch.  While the database is
unreachable the changes wait and are written when it is back; the thread logs once
when it goes and once when it is back.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from raetsalt.drivers.clock import monotonic
from raetsalt.log import Throttle
from raetsalt.store.pgconfig import describe
from raetsalt.store.pgwriter import connect_ready, first_line

log = logging.getLogger(__name__)

LOCK = 0x7261657473616C76  # the advisory lock around creating the table
CREATE = (
    f"SELECT pg_advisory_xact_lock({LOCK})",
    """CREATE TABLE IF NOT EXISTS raetsalt_cluster_minions (
        cluster_id varchar(255) NOT NULL,
        minion varchar(255) NOT NULL,
        master varchar(255) NOT NULL,
        grains jsonb,
        alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
        PRIMARY KEY (cluster_id, minion))""",
)
UPSERT = ("INSERT INTO raetsalt_cluster_minions (cluster_id, minion, master, grains) "
          "VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (cluster_id, minion) DO UPDATE SET "
          "master = EXCLUDED.master, grains = EXCLUDED.grains, alter_time = NOW()")
DELETE = ("DELETE FROM raetsalt_cluster_minions "
          "WHERE cluster_id = %s AND minion = %s AND master = %s")
RETRY = 1.0
BATCH = 500


class MinionRegistry:
    """This master's minions in the cluster's registry table (module docstring)."""

    def __init__(self, params: Mapping[str, Any], cluster_id: str, master: str, *,
                 clock: Callable[[], float] = monotonic) -> None:
        self.params = dict(params)
        self.cluster_id = cluster_id
        self.master = master
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.connected = False
        self._changes: dict[str, str | None] = {}
        """minion -> its grains as JSON (held here), or None (gone from here)."""
        self._cond = threading.Condition()
        self._stop = False
        self._throttle = Throttle(60.0)
        self._thread = threading.Thread(target=self._run, name="cluster-minions", daemon=True)
        self._thread.start()

    def held(self, minion: str, grains: Mapping[str, Any] | None) -> None:
        try:
            text = json.dumps(grains, default=str) if grains is not None else "null"
        except (TypeError, ValueError):
            text = "null"
        with self._cond:
            self._changes[minion] = text
            self._cond.notify()

    def gone(self, minion: str) -> None:
        with self._cond:
            self._changes[minion] = None
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._changes)

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(5.0)

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while True:
            with self._cond:
                while not self._changes and not self._stop:
                    self._cond.wait()
                if self._stop:
                    break
                batch = dict(list(self._changes.items())[:BATCH])
                for minion in batch:
                    del self._changes[minion]
            try:
                if conn is None:
                    conn = self._connect()
                with conn.transaction():
                    for minion, grains in batch.items():
                        if grains is None:
                            conn.execute(DELETE, (self.cluster_id, minion, self.master))
                        else:
                            conn.execute(UPSERT, (self.cluster_id, minion, self.master,
                                                  grains))
                self.stats["written"] += len(batch)
            except psycopg.Error as exc:
                with self._cond:  # back in, unless a newer change came meanwhile
                    for minion, grains in batch.items():
                        self._changes.setdefault(minion, grains)
                if conn is not None:
                    conn.close()
                    conn = None
                self._failed(exc)
                with self._cond:
                    if not self._stop:
                        self._cond.wait(RETRY)
        if conn is not None:
            conn.close()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect_ready(self.params, CREATE, autocommit=True)
        if not self.connected and self.stats["failures"]:
            log.info("cluster %s: the minion registry %s is reachable again",
                     self.cluster_id, describe(self.params))
        self.connected = True
        return conn

    def _failed(self, exc: psycopg.Error) -> None:
        self.stats["failures"] += 1
        was, self.connected = self.connected, False
        times = self._throttle.note("db", self.clock())
        if was or times:
            log.error("cluster %s: the minion registry %s is unreachable (%s); changes "
                      "wait", self.cluster_id, describe(self.params), first_line(exc))
