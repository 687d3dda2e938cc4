"""A UDP relay on loopback between one minion and its master, for attacks by someone on
the path (dropping chosen datagrams) or at the master's address (answering for it).

The minion is configured with the relay's port as its master's (``Relay.port``: a socket
bound to port 0 and kept); the relay forwards what the minion sends to the master's
port and what comes from there to the minion, from the same socket, so each side sees
the relay's address as the other's.  ``Relay.judge(direction, data)`` (``UP``: minion
to master, ``DOWN``: master to minion) says whether a datagram is forwarded; it may
answer the sender itself (``Relay.reply``).  Everything happens in the relay's thread;
tests wait on ``Relay.wait`` (a condition over the counters), never on a sleep.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

UP = "up"
"""Minion to master."""
DOWN = "down"
"""Master to minion."""

Judge = Callable[[str, bytes], bool]


class Relay:
    """Forwards datagrams between a minion and the master at ``master_port`` (module
    docstring)."""

    def __init__(self, master_port: int, judge: Judge | None = None) -> None:
        self.master = ("127.0.0.1", master_port)
        self.judge: Judge = judge or (lambda direction, data: True)
        self.minion: tuple[str, int] | None = None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.forwarded = {UP: 0, DOWN: 0}
        self.dropped = {UP: 0, DOWN: 0}
        self.changed = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    def reply(self, direction: str, data: bytes) -> None:
        """Send ``data`` back to the sender of a datagram going ``direction``, from the
        relay's address (for the minion: the master's, as a spoofed datagram would be)."""
        to = self.minion if direction == UP else self.master
        if to is not None:
            self.sock.sendto(data, to)

    def wait(self, condition: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until ``condition()`` (evaluated under the relay's lock, after each datagram)
        holds; fails the test when it does not within ``timeout`` (a hang detector)."""
        with self.changed:
            assert self.changed.wait_for(condition, timeout), "relay: condition not met"

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)
        self.sock.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop:
            if not select.select([self.sock], [], [], 0.1)[0]:
                continue
            try:
                data, source = self.sock.recvfrom(65536)
            except OSError:  # an ICMP error from a port nobody holds (the master is down)
                continue
            if source == self.master:
                direction, to = DOWN, self.minion
            else:
                self.minion = source
                direction, to = UP, self.master
            with self.changed:
                if to is not None and self.judge(direction, data):
                    self.forwarded[direction] += 1
                    try:
                        self.sock.sendto(data, to)
                    except OSError:
                        pass
                else:
                    self.dropped[direction] += 1
                self.changed.notify_all()
