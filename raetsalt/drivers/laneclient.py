"""The command-line side of the command protocol: a client yard on a daemon's lane.

``CommandClient('master', sock_dir)`` (or ``'minion'`` with the minion's id) binds a yard
``cl<8 hex>`` next to the daemon's manor, talking only with it, sends requests
(``request(share, **fields)`` returns the ``req`` it chose) and reads the replies
(``receive(timeout)``).  Everything stays on the host: no network, and the daemon learns
who is asking from the owner of this yard's socket file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from raetsalt.drivers.uxd import UxdSocket
from raetsalt.errors import DaemonNotRunning, DaemonUnavailable
from raetsalt.lane.engine import Lane, YardMessage
from raetsalt.paths import MANOR, lane_name_for, manor_path, yard_file_name


class CommandClient:
    """One client yard talking to a daemon's manor."""

    def __init__(self, node: str, sock_dir: str, node_id: str | None = None) -> None:
        self.node = node
        self.sock_dir = sock_dir
        self.lane_name = lane_name_for(node, node_id)
        self.manor_path = manor_path(sock_dir, node, node_id)
        self.yard = "cl" + os.urandom(4).hex()
        self._lane = Lane(lane_name=self.lane_name, yard_name=self.yard, accept=False)
        self._lane.add_yard(MANOR, self.manor_path)
        self._private_dir: str | None = None
        group: int | None = None
        bind_dir = sock_dir
        if not os.access(sock_dir, os.W_OK | os.X_OK):
            # A member of sock_dir_group may reach the manor but not create files there:
            # its yard lives in a private directory the daemon's group can read.
            try:
                group = os.stat(sock_dir).st_gid
                self._private_dir = bind_dir = tempfile.mkdtemp(prefix="rsc", dir="/tmp")
                os.chown(bind_dir, -1, group)
                os.chmod(bind_dir, 0o750)
            except OSError as exc:
                self.close()
                raise DaemonUnavailable(f"cannot use {sock_dir}: {exc.strerror}") from None
        try:
            self._sock = UxdSocket(
                os.path.join(bind_dir, yard_file_name(self.lane_name, self.yard)),
                group=group,
                connect_to=self.manor_path,
                sock_dir=sock_dir,
            )
        except (FileNotFoundError, ConnectionRefusedError):
            self.close()
            raise DaemonNotRunning(
                f"the raetsalt-{node} daemon is not running (nothing serves {self.manor_path})"
            ) from None
        except OSError as exc:
            self.close()
            raise DaemonUnavailable(f"cannot reach the raetsalt-{node} daemon at "
                                    f"{self.manor_path}: {exc.strerror or exc}") from None
        self._counter = 0
        self._inbox: list[dict[str, Any]] = []

    def request(self, share: str, *, send_timeout: float = 5.0, **fields: Any) -> str:
        """Send a request to the daemon's ``share``; returns its ``req``.  Raises
        ``DaemonUnavailable`` when the daemon is gone or does not take it in time."""
        self._counter += 1
        req = f"{self.yard}-{self._counter}"
        body = {"route": {"src": [None, self.yard, None], "dst": [None, MANOR, share]},
                "req": req, **fields}
        pages = self._lane.pack(body, MANOR)
        deadline = time.monotonic() + send_timeout
        try:
            for page in pages:
                if not self._sock.send_waiting(page, max(0.0, deadline - time.monotonic())):
                    raise DaemonUnavailable(f"the raetsalt-{self.node} daemon is not reading")
        except OSError as exc:
            raise DaemonUnavailable(
                f"the raetsalt-{self.node} daemon went away: {exc.strerror or exc}") from None
        return req

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        """Messages that arrived within ``timeout`` seconds (None: wait for one)."""
        if not self._inbox:
            if not self._sock.wait_readable(timeout):
                return []
            self._sock.receive_into(self._lane, time.monotonic())
            event = self._lane.next_event()
            while event is not None:
                if type(event) is YardMessage:
                    self._inbox.append(event.body)
                event = self._lane.next_event()
        out, self._inbox = self._inbox, []
        return out

    def fileno(self) -> int:
        """The client socket's descriptor (readable when an answer may be waiting)."""
        return self._sock.fileno()

    def pending(self) -> bool:
        """Whether received messages wait in the inbox (``receive(0)`` returns them)."""
        return bool(self._inbox)

    def daemon_alive(self) -> bool:
        """The daemon's manor socket still exists."""
        return os.path.exists(self.manor_path)

    def close(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.close()
        if self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None

    def __enter__(self) -> CommandClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
