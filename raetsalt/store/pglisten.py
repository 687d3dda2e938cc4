"""A thread that keeps one LISTEN connection to the cluster's store (a driver's base).

``Listener`` runs the connection's life for ``raetsalt.store.pgkeys`` and
``raetsalt.store.pgtokens``: it (re)connects (``_connect``, the subclass's catch-up),
does the subclass's work (``_work``: write what was queued, read what was notified),
then waits for the database or a ``kick`` (a byte on a pipe: something was queued),
at most ``LISTEN_WAIT`` seconds.  A database error closes the connection, is counted
and logged (at once when the store was reachable, then at most once a minute), and the
thread tries again every ``RETRY`` seconds.  Callers never wait for it: they queue under
``_lock`` and kick.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import psycopg

from raetsalt.log import Throttle
from raetsalt.store.pgconfig import describe
from raetsalt.store.pgwriter import connect_ready, first_line

log = logging.getLogger(__name__)
Item = TypeVar("Item")

RETRY = 1.0
LISTEN_WAIT = 5.0
"""Seconds the thread waits at most for a notification or a kick (its only wake-up when
nothing happens)."""


def drain(fd: int) -> None:
    """Read a non-blocking pipe empty."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class Listener(Generic[Item]):
    """The connection's thread (module docstring); subclasses call ``start`` last.
    ``_outbox`` holds what callers queued (under ``_lock``), written in order."""

    what = "store"
    """What the log calls this store."""
    shares = "changes"
    """What it shares, for the log."""
    channel = ""
    """The channel listened to."""
    create: tuple[str, ...] = ()
    """The statements creating its table."""
    meanwhile = ""
    """What happens while the database is unreachable, for the log."""

    def __init__(self, params: Mapping[str, Any], cluster_id: str, *, name: str,
                 clock: Callable[[], float]) -> None:
        self.params = dict(params)
        self.cluster_id = cluster_id
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.connected = False
        self._lock = threading.Condition()
        self._stop = False
        self._outbox: list[Item] = []
        self._throttle = Throttle(60.0)
        self._kick_r, self._kick_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        """Wake the thread (something was queued)."""
        try:
            os.write(self._kick_w, b"k")
        except OSError:
            pass  # a byte is waiting already

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        self.kick()
        self._thread.join(5.0)
        for fd in (self._kick_r, self._kick_w):
            os.close(fd)

    # -- for the subclass -----------------------------------------------------------------

    def _write_one(self, conn: psycopg.Connection[Any], item: Item) -> None:
        """Write one queued item (in a transaction of its own)."""
        raise NotImplementedError

    def _written(self, item: Item) -> None:
        """``item`` is committed."""

    def _write(self, conn: psycopg.Connection[Any]) -> None:
        """Write what was queued, in order; an item leaves the queue once committed (an
        error leaves it first in line for the next connection)."""
        while True:
            with self._lock:
                if not self._outbox:
                    return
                item = self._outbox[0]
            with conn.transaction():
                self._write_one(conn, item)
            with self._lock:
                if self._outbox and self._outbox[0] is item:
                    del self._outbox[0]
            self._written(item)

    def _catch_up(self, conn: psycopg.Connection[Any]) -> int:
        """Read what is stored (at each connection); returns how many rows."""
        raise NotImplementedError

    def _work(self, conn: psycopg.Connection[Any]) -> None:
        """Write what was queued, read what was notified."""
        raise NotImplementedError

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect_ready(self.params, self.create, autocommit=True)
        try:
            self._write(conn)  # ours first: they are newer than what is stored
            conn.execute(f"LISTEN {self.channel}")
            count = self._catch_up(conn)
        except BaseException:
            conn.close()
            raise
        with self._lock:
            was, self.connected = self.connected, True
        if not was:
            log.info("cluster %s: %s shared through %s (%d stored)", self.cluster_id,
                     self.shares, describe(self.params), count)
        return conn

    def _stopped(self) -> None:
        """The thread ends (after its connection is closed)."""

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while True:
            with self._lock:
                if self._stop:
                    break
            try:
                if conn is None:
                    conn = self._connect()
                self._work(conn)
                select.select([conn.fileno(), self._kick_r], [], [], LISTEN_WAIT)
                drain(self._kick_r)
            except psycopg.Error as exc:
                if conn is not None:
                    conn.close()
                    conn = None
                self._failed(exc)
                with self._lock:
                    if not self._stop:
                        self._lock.wait(RETRY)
        if conn is not None:
            conn.close()
        self._stopped()

    def _failed(self, exc: psycopg.Error) -> None:
        self.stats["failures"] += 1
        with self._lock:
            was, self.connected = self.connected, False
        times = self._throttle.note("db", self.clock())
        if was or times:
            log.error("cluster %s: the %s %s is unreachable (%s); %s", self.cluster_id,
                      self.what, describe(self.params), first_line(exc), self.meanwhile)
