"""Salt's master event bus sockets, served from raetsalt's bus (a driver: sockets).

Salt code on the master's host (``salt.utils.event.get_master_event``, the
``LocalClient``, Salt's engines) reaches the master's bus through two Unix stream
sockets in Salt's ``sock_dir``:

* ``master_event_pub.ipc``: every event of raetsalt's master bus, in Salt's framing
  (``raetsalt.saltbridge.saltframe``), to every connected subscriber;
* ``master_event_pull.ipc``: events Salt code fires, handed to raetsalt's bus
  (``fire``), from where they come back to the subscribers as every other event.

``publish_pull.ipc`` is bound too, only because Salt's ``LocalClient.pub`` looks for it
before it publishes: a connection there is closed at once (publications come through the
request channel, ``raetsalt.saltbridge.localreq``).

Who may connect: the sockets are mode 0600 in a directory of mode 0700 (or 0750 with
``sock_dir_group``), so root and the master's user, as on the master's lane.  Limits:
``MAX_CONNECTIONS`` per socket (more are closed at once); a subscriber that lets more
than ``MAX_BACKLOG`` bytes queue for it is disconnected (it reconnects, as Salt's do,
and misses what it did not read), and so is the one furthest behind when all together
hold ``MAX_TOTAL_BACKLOG``; a publisher that sends a malformed or oversized frame is
disconnected, and so is the one with the biggest unfinished frame when all together
hold ``MAX_TOTAL_PARTIAL``; events fired while the bus refuses them are counted.  Every drop is
counted in ``drops`` and logged at most once a minute per reason.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from raetsalt.drivers.uxd import unlink_if_stale
from raetsalt.log import Throttle
from raetsalt.saltbridge.saltframe import PullReader, publish_frame

log = logging.getLogger("raetsalt.saltbus")

PUB = "master_event_pub.ipc"
PULL = "master_event_pull.ipc"
MARKER = "publish_pull.ipc"
MAX_CONNECTIONS = 256
MAX_BACKLOG = 32 << 20
"""Bytes queued for one subscriber before it is disconnected."""
MAX_TOTAL_BACKLOG = 256 << 20
"""Bytes queued for all subscribers together (beyond, the one that is furthest behind
is disconnected)."""
MAX_TOTAL_PARTIAL = 64 << 20
"""Bytes of unfinished frames from all publishers together (beyond, the publisher with
the biggest one is disconnected)."""
MAX_PENDING = 64 << 20
"""Bytes of events waiting for the serving thread (beyond: dropped, counted)."""
READ_SIZE = 1 << 16
SELECT_WAIT = 0.5

Fire = Callable[[str, dict[str, Any]], bool]


@dataclass
class _Conn:
    sock: socket.socket
    kind: str
    out: bytearray = field(default_factory=bytearray)
    reader: PullReader | None = None


class EventSockets:
    """The three sockets and the thread that serves them (``serve``)."""

    def __init__(self, sock_dir: str, fire: Fire) -> None:
        self.sock_dir = sock_dir
        self.fire = fire
        self.drops: Counter[str] = Counter()
        self.fired = 0
        self.published = 0
        self._throttle = Throttle()
        self._lock = threading.Lock()
        self._pending: deque[bytes] = deque()
        self._pending_bytes = 0
        self._sel = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._listeners: dict[int, tuple[socket.socket, str]] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        for name, kind in ((PUB, "pub"), (PULL, "pull"), (MARKER, "marker")):
            self._listen(os.path.join(sock_dir, name), kind)

    def _listen(self, path: str, kind: str) -> None:
        unlink_if_stale(path, socket.SOCK_STREAM)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
        self._listeners[sock.fileno()] = (sock, kind)
        self._sel.register(sock, selectors.EVENT_READ, "listen")

    # -- from other threads -------------------------------------------------------------

    def publish(self, tag: str, data: dict[str, Any]) -> None:
        """Queue one event of raetsalt's bus for the subscribers (thread-safe)."""
        frame = publish_frame(tag, data)
        with self._lock:
            if self._pending_bytes + len(frame) > MAX_PENDING:
                self._drop("backlog_full")
                return
            self._pending.append(frame)
            self._pending_bytes += len(frame)
        try:
            self._wake_w.send(b"\0")
        except BlockingIOError:
            pass  # a wake-up is already waiting

    # -- the serving thread -------------------------------------------------------------

    def serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            for key, mask in self._sel.select(SELECT_WAIT):
                if key.data == "wake":
                    self._drain_wake()
                elif key.data == "listen":
                    self._accept(key.fd)
                else:
                    self._service(key.fd, mask)
            self._flush_pending()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _accept(self, fd: int) -> None:
        listener, kind = self._listeners[fd]
        try:
            sock, _ = listener.accept()
        except OSError:
            return
        if kind == "marker":
            sock.close()
            return
        if sum(1 for c in self._conns.values() if c.kind == kind) >= MAX_CONNECTIONS:
            sock.close()
            self._drop(f"{kind}_connections_full")
            return
        sock.setblocking(False)
        conn = _Conn(sock, kind, reader=PullReader() if kind == "pull" else None)
        self._conns[sock.fileno()] = conn
        self._sel.register(sock, selectors.EVENT_READ, "conn")

    def _service(self, fd: int, mask: int) -> None:
        conn = self._conns.get(fd)
        if conn is None:
            return
        if mask & selectors.EVENT_READ and not self._read(conn):
            return
        if mask & selectors.EVENT_WRITE:
            self._write(conn)

    def _read(self, conn: _Conn) -> bool:
        try:
            data = conn.sock.recv(READ_SIZE)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return False
        if conn.reader is None:
            return True  # a subscriber has nothing to say; what it sends is ignored
        events = conn.reader.feed(data)
        if conn.reader.pending and self._partial_bytes() > MAX_TOTAL_PARTIAL:
            biggest = max((c for c in self._conns.values() if c.reader is not None),
                          key=lambda c: c.reader.pending if c.reader else 0)
            self._drop("partial_frames_full")
            self._close(biggest)
            if biggest is conn:
                return False
        for tag, data_map in events:
            if self.fire(tag, data_map):
                self.fired += 1
            else:
                self._drop("bus_refused")
        if conn.reader.error is not None:
            self._drop("bad_frame", str(conn.reader.error))
            self._close(conn)
            return False
        return True

    def _partial_bytes(self) -> int:
        return sum(c.reader.pending for c in self._conns.values() if c.reader is not None)

    def _flush_pending(self) -> None:
        with self._lock:
            frames, self._pending = self._pending, deque()
            self._pending_bytes = 0
        if not frames:
            return
        blob = b"".join(frames)
        self.published += len(frames)
        subscribers = [c for c in self._conns.values() if c.kind == "pub"]
        total = sum(len(c.out) for c in subscribers)
        for conn in sorted(subscribers, key=lambda c: len(c.out), reverse=True):
            if (len(conn.out) + len(blob) > MAX_BACKLOG
                    or total + len(blob) > MAX_TOTAL_BACKLOG):
                total -= len(conn.out)
                self._drop("slow_subscriber")
                self._close(conn)
                continue
            total += len(blob)
            conn.out += blob
            self._write(conn)

    def _write(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.out) if conn.out else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self._close(conn)
            return
        del conn.out[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        self._sel.modify(conn.sock, events, "conn")

    def _close(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        if self._conns.pop(fd, None) is None:
            return
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def _drop(self, reason: str, detail: str = "") -> None:
        self.drops[reason] += 1
        count = self._throttle.note(reason, time.monotonic())
        if count:
            log.warning("Salt's event sockets: %s%s (%d since the last report)", reason,
                        f": {detail}" if detail else "", count)

    def close(self) -> None:
        for conn in list(self._conns.values()):
            self._close(conn)
        for sock, _kind in self._listeners.values():
            try:
                path = sock.getsockname()
                sock.close()
                if isinstance(path, str) and path:
                    os.unlink(path)
            except OSError:
                pass
        self._listeners.clear()
        self._sel.close()
        self._wake_r.close()
        self._wake_w.close()
