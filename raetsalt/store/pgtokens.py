"""The cluster's eauth tokens in PostgreSQL, heard at once with LISTEN/NOTIFY (a driver).

``raetsalt_cluster_tokens`` holds one row per (cluster, SHA-256 of a token): its record
or its revocation (``raetsalt.store.sharedtokens``).  Writing a row and ``pg_notify`` on
``raetsalt_tokens`` are one transaction.  A thread of its own does all the talking; the
callers (a master's loop, its login workers, the REST API's request threads) only touch
memory, except ``put(wait=...)`` and ``fetch``, which wait for the thread and are never
called on a loop:

- ``put``/``revoke`` queue a row; the thread writes it, and keeps it queued while the
  database is unreachable (a revocation made meanwhile reaches the others when it is
  back);
- the thread listens; at each (re)connection it reads every unexpired row (bounded), then
  each notification names a row it reads; ``mirror`` holds them for ``lookup`` and
  ``revoked``; a revocation also removes this master's own file of the token (``forget``);
- ``fetch`` asks the thread to read one row now (a token made on another master a moment
  ago, before its notification arrived here); fetches are rate-limited, so unknown tokens
  sent by clients cannot turn into a flood of queries.

Every row is checked; one that is not what a master writes (malformed, or a record longer
than ``MAX_RECORD``, which is not even fetched) is dropped and counted, never raised.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg

from raetsalt.drivers.clock import monotonic
from raetsalt.store.pglisten import Listener
from raetsalt.store.sharedtokens import (
    MAX_RECORD,
    SharedToken,
    from_payload,
    from_row,
    record_text,
    to_payload,
)

log = logging.getLogger(__name__)

CHANNEL = "raetsalt_tokens"
LOCK = 0x7261657473616C77  # the advisory lock around creating the table
CREATE = (
    f"SELECT pg_advisory_xact_lock({LOCK})",
    """CREATE TABLE IF NOT EXISTS raetsalt_cluster_tokens (
        cluster_id varchar(255) NOT NULL,
        token_hash char(64) NOT NULL,
        record text NOT NULL,
        expire double precision NOT NULL,
        revoked boolean NOT NULL DEFAULT false,
        origin varchar(255) NOT NULL,
        PRIMARY KEY (cluster_id, token_hash))""",
)
PUT = ("INSERT INTO raetsalt_cluster_tokens (cluster_id, token_hash, record, expire, origin) "
       "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (cluster_id, token_hash) DO NOTHING "
       "RETURNING token_hash")
"""A token is never written over (a revocation stays one)."""
REVOKE = ("INSERT INTO raetsalt_cluster_tokens (cluster_id, token_hash, record, expire, "
          "revoked, origin) VALUES (%s, %s, '', %s, true, %s) "
          "ON CONFLICT (cluster_id, token_hash) DO UPDATE SET revoked = true, record = ''")
NOTIFY = "SELECT pg_notify(%s, %s)"
COLUMNS = (f"SELECT token_hash, CASE WHEN length(record) <= {MAX_RECORD} THEN record END, "
           "expire, revoked FROM raetsalt_cluster_tokens WHERE cluster_id = %s ")
SELECT_SOME = COLUMNS + "AND token_hash = ANY(%s)"
SELECT_LIVE = COLUMNS + "AND expire > %s LIMIT %s"
CLEAN = "DELETE FROM raetsalt_cluster_tokens WHERE cluster_id = %s AND expire < %s"

MAX_TOKENS = 100_000
"""Tokens (and revocations) held in memory at most; more are dropped and counted."""
MAX_QUEUED = 10_000
"""Rows waiting to be written at most (only while the database is unreachable)."""
CLEAN_EVERY = 600.0
SKEW = 300.0
"""Seconds a row is kept past its expiry (the masters' clocks may differ)."""
FETCH_RATE = 20.0
FETCH_BURST = 40.0
"""Reads of single rows (``fetch``) per second, and the burst allowed."""
MAX_FETCHES = 64


class ClusterTokens(Listener[tuple[SharedToken, threading.Event | None]]):
    """The eauth tokens of cluster ``cluster_id`` (module docstring)."""

    what = "token store"
    shares = "eauth tokens"
    channel = CHANNEL
    create = CREATE
    meanwhile = ("tokens made here work here only, and logouts reach the other masters, "
                 "when it is back")

    def __init__(self, params: Mapping[str, Any], cluster_id: str, origin: str, *,
                 forget: Callable[[str], None] = lambda digest: None,
                 clock: Callable[[], float] = monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__(params, cluster_id, name="cluster-tokens", clock=clock)
        self.origin = origin
        self.forget = forget
        self.wall = wall
        self.mirror: dict[str, SharedToken] = {}
        self._fetches: dict[str, threading.Event] = {}
        self._allowance = FETCH_BURST
        self._allowed_at = clock()
        self._next_clean = clock()
        self.start()

    # -- any thread: memory only ----------------------------------------------------------

    def lookup(self, digest: str, now: float) -> dict[str, Any] | None:
        """The record of a valid token of the cluster, or None."""
        with self._lock:
            token = self.mirror.get(digest)
        if token is None or token.record is None or token.expire <= now:
            return None
        return dict(token.record)

    def revoked(self, digest: str) -> bool:
        with self._lock:
            token = self.mirror.get(digest)
        return token is not None and token.record is None

    def put(self, digest: str, record: dict[str, Any], wait: float = 0.0) -> bool:
        """Share a new token; with ``wait`` (never on a loop), wait that long for it to
        be committed (not at all while the database is unreachable).  True once it is
        (every master can then ``fetch`` it)."""
        token = SharedToken(digest, record, float(record["expire"]))
        done = threading.Event() if wait > 0 and self.connected else None
        if not self._queue(token, done):
            return False
        return done is not None and done.wait(wait)

    def revoke(self, digest: str, expire: float, wait: float = 0.0) -> bool:
        """A token logged out here: revoked everywhere (kept until ``expire``); with
        ``wait`` (never on a loop), wait that long for the commit.  True once it is."""
        done = threading.Event() if wait > 0 and self.connected else None
        if not self._queue(SharedToken(digest, None, expire), done):
            return False
        return done is not None and done.wait(wait)

    def fetch(self, digest: str, timeout: float) -> None:
        """Read the row of ``digest`` now (never on a loop): returns once it is in
        ``mirror`` (if it exists), or after ``timeout``, or at once when the database is
        unreachable or too many fetches were asked for lately."""
        with self._lock:
            if not self.connected or len(self._fetches) >= MAX_FETCHES:
                self.stats["fetch_skipped"] += 1
                return
            now = self.clock()
            self._allowance = min(FETCH_BURST, self._allowance
                                  + (now - self._allowed_at) * FETCH_RATE)
            self._allowed_at = now
            if self._allowance < 1.0:
                self.stats["fetch_limited"] += 1
                return
            self._allowance -= 1.0
            done = self._fetches.setdefault(digest, threading.Event())
        self.kick()
        done.wait(timeout)

    def _queue(self, token: SharedToken, done: threading.Event | None) -> bool:
        with self._lock:
            self._remember(token)
            if len(self._outbox) >= MAX_QUEUED:
                self.stats["dropped"] += 1
                return False
            self._outbox.append((token, done))
        self.kick()
        return True

    def _remember(self, token: SharedToken) -> None:
        """Into ``mirror`` (the lock held); a revocation is never undone by a record."""
        held = self.mirror.get(token.digest)
        if held is not None and held.record is None:
            return
        if held is None and len(self.mirror) >= MAX_TOKENS:
            now = self.wall()
            for digest in [d for d, t in self.mirror.items() if t.expire < now]:
                del self.mirror[digest]
            if len(self.mirror) >= MAX_TOKENS:
                self.stats["full"] += 1
                return
        self.mirror[token.digest] = token

    # -- the thread -----------------------------------------------------------------------

    def _work(self, conn: psycopg.Connection[Any]) -> None:
        self._write(conn)
        self._read_asked(conn)
        self._notified(conn, [n.payload for n in conn.notifies(timeout=0.0)])
        if self.clock() >= self._next_clean:
            self._next_clean = self.clock() + CLEAN_EVERY
            self._clean(conn)

    def _stopped(self) -> None:
        with self._lock:
            for event in self._fetches.values():
                event.set()

    def _catch_up(self, conn: psycopg.Connection[Any]) -> int:
        rows = conn.execute(SELECT_LIVE, (self.cluster_id, self.wall(),
                                          MAX_TOKENS)).fetchall()
        self._heard(rows)
        return len(rows)

    def _write_one(self, conn: psycopg.Connection[Any],
                   item: tuple[SharedToken, threading.Event | None]) -> None:
        token = item[0]
        if token.record is None:
            conn.execute(REVOKE, (self.cluster_id, token.digest, token.expire, self.origin))
            op: str | None = "revoke"
        else:
            new = conn.execute(PUT, (self.cluster_id, token.digest, record_text(token.record),
                                     token.expire, self.origin)).fetchone()
            op = "put" if new is not None else None
        if op is not None:
            conn.execute(NOTIFY, (CHANNEL, to_payload(self.cluster_id, op, token.digest)))

    def _written(self, item: tuple[SharedToken, threading.Event | None]) -> None:
        self.stats["written"] += 1
        if item[1] is not None:
            item[1].set()

    def _read_asked(self, conn: psycopg.Connection[Any]) -> None:
        with self._lock:
            asked = dict(self._fetches)
        if not asked:
            return
        rows = conn.execute(SELECT_SOME, (self.cluster_id, list(asked))).fetchall()
        self._heard(rows)
        with self._lock:
            for digest, event in asked.items():
                self._fetches.pop(digest, None)
                event.set()

    def _notified(self, conn: psycopg.Connection[Any], payloads: list[str]) -> None:
        wanted: list[str] = []
        for payload in payloads:
            parsed = from_payload(self.cluster_id, payload)
            if parsed is False:
                self.stats["foreign"] += 1
            elif parsed is None or parsed is True:
                self._malformed()
            else:
                wanted.append(parsed[1])
        if wanted:
            self._heard(conn.execute(SELECT_SOME, (self.cluster_id, wanted)).fetchall())

    def _heard(self, rows: list[tuple[Any, ...]]) -> None:
        for row in rows:
            token = from_row(*row) if len(row) == 4 else None
            if token is None:
                self._malformed()
                continue
            with self._lock:
                self._remember(token)
            self.stats["heard"] += 1
            if token.record is None:
                try:
                    self.forget(token.digest)
                except OSError as exc:
                    log.warning("cluster %s: a revoked token's file not removed: %s",
                                self.cluster_id, exc)

    def _clean(self, conn: psycopg.Connection[Any]) -> None:
        before = self.wall() - SKEW
        conn.execute(CLEAN, (self.cluster_id, before))
        with self._lock:
            for digest in [d for d, t in self.mirror.items() if t.expire < before]:
                del self.mirror[digest]

    def _malformed(self) -> None:
        self.stats["malformed"] += 1
        times = self._throttle.note("malformed", self.clock())
        if times:
            log.warning("cluster %s: malformed token row(s) or notification(s) from the "
                        "store dropped (%d time(s))", self.cluster_id, times)
