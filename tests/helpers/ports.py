"""UDP ports for processes that bind their own socket.

Picking a free port, releasing it and handing the number to a process races with every
other suite on the machine: anyone may bind it in between.  So:

* a process that can bind port 0 does, and the test reads the bound port from its log
  (``port_in``);
* a port that must be known before its owner starts (a minion configured before its
  master) is held bound by the test (``HeldPort``) until that owner starts;
* a process that must bind a port it had before (a restart) is started again while the
  bind fails with "address already in use" (``retry_in_use``).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_HA = re.compile(r"127\.0\.0\.1:(\d+)")


def port_in(line: str) -> int:
    """The port of the first ``127.0.0.1:PORT`` in a log line."""
    found = _HA.search(line)
    assert found is not None, f"no 127.0.0.1:PORT in {line!r}"
    return int(found.group(1))


class HeldPort:
    """A loopback UDP port bound by this process until ``release`` (datagrams sent to it
    meanwhile are never read: to a sender it is a port where nobody answers)."""

    def __init__(self, port: int = 0) -> None:
        self.sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", port))
        self.port = int(self.sock.getsockname()[1])

    def release(self) -> int:
        """Close the socket (the port's owner is about to bind it); the port."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        return self.port


def retry_in_use(start: Callable[[], T], in_use: Callable[[T], bool], attempts: int = 10,
                 pause: float = 0.2) -> T:
    """``start()`` again while ``in_use(result)`` says its bind found the port taken (a
    short-lived socket of another suite may hold it for a moment)."""
    for _ in range(attempts - 1):
        result = start()
        if not in_use(result):
            return result
        time.sleep(pause)
    return start()


def refused_from(source: str, to: tuple[str, int]) -> bool:
    """Send one datagram to ``to`` from a socket bound on ``source``; True when the kernel
    answers as for a closed port (ICMP port unreachable: ConnectionRefusedError), False
    when something took it (no answer within 5 s)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((source, 0))
        probe.connect(to)
        probe.settimeout(5.0)
        probe.send(b"hello from elsewhere")
        try:
            probe.recv(2048)
        except ConnectionRefusedError:
            return True
        except TimeoutError:
            return False
        return False
