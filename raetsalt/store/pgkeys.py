"""The cluster's key decisions in PostgreSQL, heard at once with LISTEN/NOTIFY (a driver).

One row per (cluster, role) in ``raetsalt_cluster_keys`` holds the last operator decision
(``raetsalt.store.sharedkeys``); writing it and ``pg_notify`` on ``raetsalt_keys`` are one
transaction, so every master listening hears of it as it commits.  A thread of its own
does all the talking, never the loop:

- ``publish`` (the loop, after an operator's decision here) queues a decision; the
  thread writes it, and keeps it queued while the database is unreachable;
- the thread listens; each decision it hears of (and, at every (re)connection, every
  stored decision, to catch up with what it missed) updates ``book`` (read by
  ``verdict``, the key policy's hook) and is queued for the loop, which takes them with
  ``take`` when ``fileno`` (a pipe) becomes readable, and applies them to its road.

Denied key pairs (``deny``, ``undeny``) have a table of their own,
``raetsalt_cluster_denied``, one row per (cluster, role, keys), notified on the same
channel; they never enter ``book``.  ``denied`` (id -> pairs) mirrors the table, read
again at every (re)connection.  A pair is written only while the table holds fewer than
``MAX_DENIED_PER_ID`` pairs of that id and ``MAX_DENIED`` in all (checked under an
advisory lock, so two masters cannot both take the last place); beyond that it is not
stored, counted ``denied_dropped`` and logged at most once a minute, and the mirror
refuses it before it costs the database anything.

Whoever may write the table or notify on the channel decides keys for the cluster: the
database is trusted like the master's keep.  Notifications are still checked (size,
names, hex keys, cluster id) and a malformed one is dropped and counted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg

from raetsalt.drivers.clock import monotonic
from raetsalt.keep.policy import Action, Pair
from raetsalt.keep.records import Acceptance, KeyRef, KeyState
from raetsalt.store.pglisten import Listener, drain
from raetsalt.store.pgwriter import connect
from raetsalt.store.sharedkeys import (
    MAX_DENIED,
    MAX_DENIED_PER_ID,
    SharedKey,
    accepted_key,
    decided,
    denial,
    foreign,
    from_payload,
    from_row,
    is_denial,
    may_pend,
    pending_key,
    taken,
    to_payload,
    verdict,
)

log = logging.getLogger(__name__)

CHANNEL = "raetsalt_keys"
LOCK = 0x7261657473616C75  # the advisory lock around creating the table
CREATE = (
    f"SELECT pg_advisory_xact_lock({LOCK})",
    """CREATE TABLE IF NOT EXISTS raetsalt_cluster_keys (
        cluster_id varchar(255) NOT NULL,
        role varchar(255) NOT NULL,
        state varchar(10) NOT NULL,
        verhex char(64) NOT NULL,
        pubhex char(64) NOT NULL,
        origin varchar(255) NOT NULL,
        alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
        PRIMARY KEY (cluster_id, role))""",
    """CREATE TABLE IF NOT EXISTS raetsalt_cluster_denied (
        cluster_id varchar(255) NOT NULL,
        role varchar(255) NOT NULL,
        verhex char(64) NOT NULL,
        pubhex char(64) NOT NULL,
        origin varchar(255) NOT NULL,
        alter_time TIMESTAMP WITH TIME ZONE DEFAULT NOW(),
        PRIMARY KEY (cluster_id, role, verhex, pubhex))""",
)
DENY_LOCK = 0x7261657473616C76
"""The advisory lock around a denied pair's bounds check and insert."""
DENY_HELD = ("SELECT 1 FROM raetsalt_cluster_denied WHERE cluster_id = %s AND role = %s "
             "AND verhex = %s AND pubhex = %s")
DENY_COUNT = ("SELECT count(*) FILTER (WHERE role = %s), count(*) FROM raetsalt_cluster_denied "
              "WHERE cluster_id = %s")
DENY = ("INSERT INTO raetsalt_cluster_denied (cluster_id, role, verhex, pubhex, origin) "
        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING")
UNDENY = ("DELETE FROM raetsalt_cluster_denied WHERE cluster_id = %s AND role = %s "
          "AND verhex = %s AND pubhex = %s RETURNING role")
SELECT_DENIED = ("SELECT role, 'denied', verhex, pubhex, origin FROM raetsalt_cluster_denied "
                 f"WHERE cluster_id = %s ORDER BY alter_time LIMIT {MAX_DENIED}")
UPSERT = ("INSERT INTO raetsalt_cluster_keys (cluster_id, role, state, verhex, pubhex, origin) "
          "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (cluster_id, role) DO UPDATE SET "
          "state = EXCLUDED.state, verhex = EXCLUDED.verhex, pubhex = EXCLUDED.pubhex, "
          "origin = EXCLUDED.origin, alter_time = NOW()")
PEND = ("INSERT INTO raetsalt_cluster_keys (cluster_id, role, state, verhex, pubhex, origin) "
        "VALUES (%s, %s, 'pending', %s, %s, %s) ON CONFLICT (cluster_id, role) DO UPDATE SET "
        "state = EXCLUDED.state, verhex = EXCLUDED.verhex, pubhex = EXCLUDED.pubhex, "
        "origin = EXCLUDED.origin, alter_time = NOW() "
        "WHERE raetsalt_cluster_keys.state IN ('pending', 'deleted') RETURNING role")
"""A pending key is written unless a decision stands (the database decides the race)."""
NOTIFY = "SELECT pg_notify(%s, %s)"
SELECT = ("SELECT role, state, verhex, pubhex, origin FROM raetsalt_cluster_keys "
          "WHERE cluster_id = %s")
MAX_QUEUED = 100_000


def stored(params: Mapping[str, Any], cluster_id: str) -> list[SharedKey]:
    """The cluster's stored decisions, read once (``raetsalt-key`` lists the cluster's
    keys with its master's); raises ``psycopg.Error`` when the store cannot be read."""
    with connect(params, connect_timeout=5, options="-c statement_timeout=5000") as conn:
        try:
            rows = conn.execute(SELECT, (cluster_id,)).fetchall()
        except psycopg.errors.UndefinedTable:
            return []
        try:
            denied = conn.execute(SELECT_DENIED, (cluster_id,)).fetchall()
        except psycopg.errors.UndefinedTable:  # made by an older master
            denied = []
    return [found for row in rows if (found := from_row(*row)) is not None] + [
        found for row in denied if (found := from_row(*row, states=("denied",))) is not None]


class ClusterKeys(Listener[SharedKey]):
    """The shared key decisions of cluster ``cluster_id`` (module docstring)."""

    what = "key store"
    shares = "key decisions"
    channel = CHANNEL
    create = CREATE
    meanwhile = "decisions made here wait, joins are decided by this master alone"

    def __init__(self, params: Mapping[str, Any], cluster_id: str, origin: str, *,
                 clock: Callable[[], float] = monotonic) -> None:
        super().__init__(params, cluster_id, name="cluster-keys", clock=clock)
        self.origin = origin
        self.book: dict[str, SharedKey] = {}
        self.by_verify: dict[str, str] = {}
        """verify key -> id of each decision heard (``accepted_key``)."""
        self.denied: dict[str, tuple[Pair, ...]] = {}
        """id -> its denied pairs the cluster lists (module docstring)."""
        self._denied_count = 0
        self._inbox: list[SharedKey] = []
        self._woken = 0
        """Wake-up bytes written (after each byte); ``take`` reads the pipe only when
        this moved since ``_seen``, so the byte is there to read."""
        self._seen = 0
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.start()

    # -- the loop's side ------------------------------------------------------------------

    def verdict(self, role: str, verhex: str, pubhex: str) -> Acceptance | None:
        """The key policy's ``shared`` hook."""
        with self._lock:
            return verdict(self.book, role, verhex, pubhex)

    def accepted_key(self, verhex: str) -> tuple[str, str] | None:
        """The road's ``adopt_key`` hook: the id and public key the cluster accepted
        with this verify key (``raetsalt.engine.adopt``)."""
        with self._lock:
            return accepted_key(self.book, self.by_verify, verhex)

    def taken(self, role: str, verhex: str, pubhex: str) -> bool:
        """The key policy's ``taken`` hook."""
        with self._lock:
            return taken(self.book, role, verhex, pubhex)

    def holds(self, ref: KeyRef) -> bool:
        """The cluster's last decision is ``ref`` (an id accepted or rejected on another
        master, which an operator here may act on), or the cluster lists ``ref`` as
        denied."""
        with self._lock:
            if ref.state is KeyState.DENIED:
                return (ref.verhex, ref.pubhex) in self.denied.get(ref.role, ())
            shared = self.book.get(ref.role)
        return shared is not None and (shared.state, shared.verhex, shared.pubhex) == (
            ref.state.value, ref.verhex, ref.pubhex)

    def joined(self, role: str, verhex: str, pubhex: str) -> None:
        """A minion joined here with these keys (accepted by whatever policy): the
        cluster lists it as accepted, unless it does already."""
        with self._lock:
            shared = self.book.get(role)
        if shared is not None and (shared.state, shared.verhex, shared.pubhex) == (
                "accepted", verhex, pubhex):
            return
        self.publish(Action.ACCEPT, KeyRef(role, KeyState.ACCEPTED, verhex, pubhex))

    def pending(self, role: str, verhex: str, pubhex: str) -> None:
        """A minion's key waits for an operator here: listed, and decided, on every
        master (unless the cluster decided on that id already)."""
        shared = pending_key(role, verhex, pubhex, self.origin)
        with self._lock:
            if not may_pend(self.book.get(role), shared):
                return
        self._queue(shared)

    def publish(self, action: str, ref: KeyRef) -> None:
        """An operator's decision on this master, for the whole cluster (a denied pair
        accepted, rejected or deleted leaves the cluster's denied list)."""
        if ref.state is KeyState.DENIED:
            self.undeny(ref.role, (ref.verhex, ref.pubhex))
            return
        shared = decided(action, ref, self.origin)
        if shared is not None:
            self._queue(shared)

    def deny(self, role: str, pairs: Iterable[Pair]) -> None:
        """Pairs this master denied for ``role``: those the cluster does not list yet are
        written, within the bounds (module docstring)."""
        queued = False
        with self._lock:
            held = self.denied.get(role, ())
            for pair in pairs:
                if pair in held:
                    continue
                if len(held) >= MAX_DENIED_PER_ID or self._denied_count >= MAX_DENIED \
                        or len(self._outbox) >= MAX_QUEUED:
                    self._dropped_denial(role)
                    continue
                held = (*held, pair)
                self._denied_count += 1
                self._outbox.append(denial("denied", role, pair, self.origin))
                queued = True
            if held:
                self.denied[role] = held
        if queued:
            self.kick()

    def undeny(self, role: str, pair: Pair) -> None:
        """A denied pair deleted (or decided) by an operator here: it leaves the
        cluster's list, and every master's."""
        with self._lock:
            self._forget_denied(role, pair)
            if len(self._outbox) < MAX_QUEUED:
                self._outbox.append(denial("undenied", role, pair, self.origin))
            else:
                self.stats["dropped"] += 1
        self.kick()

    def _forget_denied(self, role: str, pair: Pair) -> bool:
        held = self.denied.get(role, ())
        if pair not in held:
            return False
        rest = tuple(p for p in held if p != pair)
        if rest:
            self.denied[role] = rest
        else:
            del self.denied[role]
        self._denied_count -= 1
        return True

    def _dropped_denial(self, role: str) -> None:
        """Called with ``_lock`` held."""
        self.stats["denied_dropped"] += 1
        times = self._throttle.note("denied", self.clock())
        if times:
            log.warning("cluster %s: denied key(s) not shared (at most %d per id, %d in "
                        "all; %d time(s), the last for %s); they stay on the master that "
                        "denied them", self.cluster_id, MAX_DENIED_PER_ID, MAX_DENIED,
                        times, role)

    def _queue(self, shared: SharedKey) -> None:
        with self._lock:
            self.book[shared.role] = shared
            self.by_verify[shared.verhex] = shared.role
            if len(self._outbox) < MAX_QUEUED:
                self._outbox.append(shared)
            else:
                self.stats["dropped"] += 1
        self.kick()

    def fileno(self) -> int:
        """Readable when decisions from the cluster wait for ``take``."""
        return self._wake_r

    def take(self) -> list[SharedKey]:
        """Decisions heard since the last call (cheap when there are none: the loop
        calls it every pass)."""
        if self._woken == self._seen:
            return []
        self._seen = self._woken
        drain(self._wake_r)
        with self._lock:
            taken, self._inbox = self._inbox, []
        return taken

    def close(self) -> None:
        super().close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)

    # -- the thread -----------------------------------------------------------------------

    def _work(self, conn: psycopg.Connection[Any]) -> None:
        self._write(conn)
        # What arrived (while writing, too: psycopg keeps those).
        for notify in conn.notifies(timeout=0.0):
            if foreign(self.cluster_id, notify.payload):
                self.stats["foreign"] += 1
                continue
            self._heard(from_payload(self.cluster_id, notify.payload))

    def _catch_up(self, conn: psycopg.Connection[Any]) -> int:
        rows = conn.execute(SELECT, (self.cluster_id,)).fetchall()
        for row in rows:
            self._heard(from_row(*row))
        denied: dict[str, tuple[Pair, ...]] = {}
        count = 0
        listed = conn.execute(SELECT_DENIED, (self.cluster_id,)).fetchall()
        for row in listed:
            found = from_row(*row, states=("denied",))
            if found is None:
                self._heard(None)  # counted and logged as malformed
                continue
            held = denied.get(found.role, ())
            if len(held) < MAX_DENIED_PER_ID:
                denied[found.role] = (*held, (found.verhex, found.pubhex))
                count += 1
        with self._lock:
            self.denied, self._denied_count = denied, count
        return len(rows) + len(listed)

    def _write_denial(self, conn: psycopg.Connection[Any], shared: SharedKey) -> None:
        key = (self.cluster_id, shared.role, shared.verhex, shared.pubhex)
        if shared.state == "undenied":
            if conn.execute(UNDENY, key).fetchone() is not None:
                conn.execute(NOTIFY, (CHANNEL, to_payload(self.cluster_id, shared)))
            return
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (DENY_LOCK,))
        if conn.execute(DENY_HELD, key).fetchone() is not None:
            return
        counts = conn.execute(DENY_COUNT, (shared.role, self.cluster_id)).fetchone()
        per_id, total = counts if counts is not None else (0, 0)
        if per_id >= MAX_DENIED_PER_ID or total >= MAX_DENIED:
            with self._lock:
                self._forget_denied(shared.role, (shared.verhex, shared.pubhex))
                self._dropped_denial(shared.role)
            return
        conn.execute(DENY, (*key, shared.origin))
        conn.execute(NOTIFY, (CHANNEL, to_payload(self.cluster_id, shared)))

    def _write_one(self, conn: psycopg.Connection[Any], shared: SharedKey) -> None:
        if is_denial(shared):
            self._write_denial(conn, shared)
            return
        if shared.state == "pending":
            written = conn.execute(PEND, (self.cluster_id, shared.role, shared.verhex,
                                          shared.pubhex, shared.origin)).fetchone()
        else:
            conn.execute(UPSERT, (self.cluster_id, shared.role, shared.state,
                                  shared.verhex, shared.pubhex, shared.origin))
            written = True
        if written is not None:
            conn.execute(NOTIFY, (CHANNEL, to_payload(self.cluster_id, shared)))
        else:  # a decision stood: the book takes it back
            for row in conn.execute(SELECT + " AND role = %s",
                                    (self.cluster_id, shared.role)).fetchall():
                self._heard(from_row(*row))

    def _heard(self, shared: SharedKey | None) -> None:
        if shared is None:
            self.stats["malformed"] += 1
            times = self._throttle.note("malformed", self.clock())
            if times:
                log.warning("cluster %s: malformed key decision(s) from the store dropped "
                            "(%d time(s))", self.cluster_id, times)
            return
        if is_denial(shared):
            self._heard_denial(shared)
            return
        with self._lock:
            if self.book.get(shared.role) == shared:
                return
            self.book[shared.role] = shared
            self.by_verify[shared.verhex] = shared.role
            self._inbox.append(shared)
            self.stats["heard"] += 1
        self._wake()

    def _heard_denial(self, shared: SharedKey) -> None:
        """A pair denied on some master is listed; one deleted leaves this master's
        denied pairs too (the loop's ``take``)."""
        pair = (shared.verhex, shared.pubhex)
        with self._lock:
            if shared.state == "denied":
                held = self.denied.get(shared.role, ())
                if pair not in held and len(held) < MAX_DENIED_PER_ID \
                        and self._denied_count < MAX_DENIED:
                    self.denied[shared.role] = (*held, pair)
                    self._denied_count += 1
                return
            self._forget_denied(shared.role, pair)
            self._inbox.append(shared)
            self.stats["heard"] += 1
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"k")
        except BlockingIOError:
            pass  # the loop has bytes to read already
        self._woken += 1
