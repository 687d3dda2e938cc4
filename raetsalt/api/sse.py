"""``GET /events``: the master's bus as Server-Sent Events, to any number of clients.

One thread reads the bus (a ``SaltEvent`` on the master's lane) and hands each event,
encoded once, to every client's queue.  It is subscribed to the bus only while a client
is connected: without one, the master does not send it every job's events (a lane
datagram and a wake-up of this process for each).  A new client's stream starts
(``retry:``) once the subscription is confirmed, so it misses no event fired after.

A queue holds at most ``sse_queue`` events: a client that does not keep up is dropped
(its stream ends; counted in ``dropped``), so a slow reader never makes the API buffer
without bound nor holds the bus back.  The stream of a client whose token expires or is
removed ends at its next event or keep-alive (a comment line every ``KEEPALIVE`` seconds
of silence).

Each event is written as rest_cherrypy writes it::

    tag: salt/job/20260101.../new
    data: {"tag": "salt/job/...", "data": {...}}

"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator

from raetsalt.errors import RaetSaltError
from raetsalt.event import SaltEvent
from raetsalt.log import Throttle

log = logging.getLogger("raetsalt.api")

KEEPALIVE = 15.0
BATCH = 256
"""Events written to a client at most per write."""
ATTACH_WAIT = 5.0
"""Longest wait of a new stream for the bus subscription (the bus may be down: the
stream then starts anyway, and gets events once the hub is subscribed)."""
_CLOSED = b""


class Subscriber:
    def __init__(self, limit: int) -> None:
        self.queue: queue.Queue[bytes] = queue.Queue(limit)
        self.dropped = False


class EventHub:
    """The bus reader and its subscribers (module docstring)."""

    def __init__(self, sock_dir: str, queue_size: int, max_clients: int) -> None:
        self.sock_dir = sock_dir
        self.queue_size = queue_size
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._wanted = threading.Condition(self._lock)
        """Notified when the first subscriber comes (or the hub stops)."""
        self._subscribers: set[Subscriber] = set()
        self._attached = threading.Event()
        """Set while the bus thread is subscribed; cleared (under ``_lock``) when it
        leaves the bus because no subscriber is left."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.events = 0
        self.dropped = 0
        self._log = Throttle(60.0)

    def clients(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sse-bus", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._wanted.notify_all()
            subscribers = list(self._subscribers)
        for sub in subscribers:
            self._close(sub)

    def subscribe(self) -> Subscriber | None:
        """A new subscriber, or None when ``max_clients`` are connected."""
        with self._lock:
            if len(self._subscribers) >= self.max_clients:
                return None
            sub = Subscriber(self.queue_size)
            self._subscribers.add(sub)
            self._wanted.notify_all()
            return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def _close(self, sub: Subscriber) -> None:
        self.unsubscribe(sub)
        try:
            sub.queue.put_nowait(_CLOSED)
        except queue.Full:
            pass  # dropped: the reader ends when it sees the flag

    def publish(self, tag: str, data: object) -> None:
        """Queue one bus event for every subscriber (the bus thread, and tests)."""
        self.events += 1
        with self._lock:
            subscribers = list(self._subscribers)
        if not subscribers:
            return  # nobody to encode it for (the bus carries every job's returns)
        try:
            payload = json.dumps({"tag": tag, "data": data}, default=str)
        except (TypeError, ValueError):
            return
        frame = f"tag: {tag}\ndata: {payload}\n\n".encode()
        for sub in subscribers:
            try:
                sub.queue.put_nowait(frame)
            except queue.Full:
                sub.dropped = True
                self.unsubscribe(sub)
                try:  # make room for the end mark, so that its stream ends now
                    sub.queue.get_nowait()
                    sub.queue.put_nowait(_CLOSED)
                except (queue.Empty, queue.Full):
                    pass  # its reader took the room, or refilled it: it sees the flag
                self.dropped += 1
                times = self._log.note("slow", time.monotonic())
                if times:
                    log.warning("events: %d client(s) that did not keep up were dropped "
                                "(%d queued events each); %d in all", times,
                                self.queue_size, self.dropped)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._subscribers and not self._stop.is_set():
                    self._wanted.wait()
            if self._stop.is_set():
                return
            try:
                with SaltEvent("master", self.sock_dir, listen=True) as bus:
                    self._attached.set()
                    while not self._stop.is_set() and self._wanted_still():
                        event = bus.get_event(wait=1.0, full=True)
                        if event is not None:
                            self.publish(str(event.get("tag", "")), event.get("data"))
            except (OSError, RaetSaltError) as exc:
                self._attached.clear()
                log.warning("events: the master's bus is unreachable (%s); retrying", exc)
                self._stop.wait(1.0)

    def _wanted_still(self) -> bool:
        """Whether a subscriber is left; if not, the hub leaves the bus (``_attached``
        cleared under the lock that ``subscribe`` takes, so a newcomer waits for the
        next subscription)."""
        with self._lock:
            if self._subscribers:
                return True
            self._attached.clear()
            return False

    def stream(self, sub: Subscriber, still_valid: Callable[[], bool]) -> Iterator[bytes]:
        """The bytes of one client's stream, until it is dropped, closed or its token
        is no longer valid."""
        try:
            self._attached.wait(ATTACH_WAIT)
            yield b"retry: 400\n\n"
            while True:
                try:
                    frame = sub.queue.get(timeout=KEEPALIVE)
                except queue.Empty:
                    if sub.dropped or not still_valid():
                        return
                    yield b": keep-alive\n\n"
                    continue
                if frame == _CLOSED or sub.dropped:
                    return
                frames = [frame]
                while len(frames) < BATCH:
                    try:
                        more = sub.queue.get_nowait()
                    except queue.Empty:
                        break
                    if more == _CLOSED:
                        sub.dropped = True
                        break
                    frames.append(more)
                if not still_valid():
                    return
                yield b"".join(frames)
                if sub.dropped:
                    return
        finally:
            self.unsubscribe(sub)
