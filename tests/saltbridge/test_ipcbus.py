"""Salt's master event sockets (raetsalt.saltbridge.ipcbus) with Salt's own event client,
and their limits against a hostile local peer."""

from __future__ import annotations

import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raetsalt.saltbridge import ipcbus
from raetsalt.saltbridge.ipcbus import PULL, EventSockets
from raetsalt.saltbridge.saltframe import pull_frame

salt_event = pytest.importorskip("salt.utils.event")


class Served:
    def __init__(self, sock_dir: Path) -> None:
        self.fired: list[tuple[str, dict[str, Any]]] = []
        self.refuse = False
        self.sockets = EventSockets(str(sock_dir), self._fire)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sockets.serve, args=(self.stop,), daemon=True)
        self.thread.start()

    def _fire(self, tag: str, data: dict[str, Any]) -> bool:
        if self.refuse:
            return False
        self.fired.append((tag, data))
        return True

    def wait(self, what: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not what():
            assert time.monotonic() < deadline
            time.sleep(0.01)  # polling a condition another thread makes true


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    sock_dir = Path(os.path.join("/tmp", f"ipc{os.getpid()}{id(tmp_path) % 10000}"))
    sock_dir.mkdir(mode=0o700)
    s = Served(sock_dir)
    try:
        yield s
    finally:
        s.stop.set()
        s.thread.join(5)
        s.sockets.close()
        for name in os.listdir(sock_dir):
            os.unlink(sock_dir / name)
        sock_dir.rmdir()


def test_salts_event_client_fires_and_listens(served: Served) -> None:
    sock_dir = served.sockets.sock_dir
    opts = {"sock_dir": sock_dir, "ipc_mode": "ipc", "transport": "zeromq"}
    for name in (ipcbus.PUB, ipcbus.PULL, ipcbus.MARKER):
        assert stat.S_IMODE(os.stat(os.path.join(sock_dir, name)).st_mode) == 0o600
    listener = salt_event.get_master_event(opts, sock_dir, listen=True)
    firer = salt_event.get_master_event(opts, sock_dir, listen=False)
    try:
        assert firer.fire_event({"a": [1, "x"]}, "custom/one")
        served.wait(lambda: served.fired)
        tag, data = served.fired[0]
        assert tag == "custom/one" and data["a"] == [1, "x"] and "_stamp" in data
        # what raetsalt's bus carries comes back to Salt's subscribers
        got = None
        deadline = time.monotonic() + 10
        while got is None and time.monotonic() < deadline:
            served.sockets.publish("salt/job/1/ret/m1", {"return": True, "id": "m1"})
            got = listener.get_event(wait=0.5, tag="salt/job/1/ret/", full=True)
        assert got == {"tag": "salt/job/1/ret/m1", "data": {"return": True, "id": "m1"}}
    finally:
        listener.destroy()
        firer.destroy()


def test_a_bad_frame_disconnects_and_is_counted(served: Served) -> None:
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.connect(os.path.join(served.sockets.sock_dir, PULL))
    peer.sendall(pull_frame("ok/one", {"n": 1}) + struct.pack(">I", 8) + b"\xc1" * 8)
    served.wait(lambda: served.sockets.drops["bad_frame"] == 1)
    assert served.fired and served.fired[0][0] == "ok/one"
    peer.settimeout(5)
    assert peer.recv(10) == b""  # closed by the server
    peer.close()
    oversize = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    oversize.connect(os.path.join(served.sockets.sock_dir, PULL))
    oversize.sendall(struct.pack(">I", (16 << 20) + 1))
    served.wait(lambda: served.sockets.drops["bad_frame"] == 2)
    oversize.close()
    served.refuse = True
    refused = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    refused.connect(os.path.join(served.sockets.sock_dir, PULL))
    refused.sendall(pull_frame("ok/two", {}))
    served.wait(lambda: served.sockets.drops["bus_refused"] == 1)
    refused.close()


def test_a_subscriber_that_does_not_read_is_dropped(served: Served,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipcbus, "MAX_BACKLOG", 1 << 20)
    lazy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    lazy.connect(os.path.join(served.sockets.sock_dir, ipcbus.PUB))
    served.wait(lambda: len(served.sockets._conns) == 1)
    blob = {"x": "y" * 60000}
    deadline = time.monotonic() + 20
    while not served.sockets.drops["slow_subscriber"]:
        assert time.monotonic() < deadline
        served.sockets.publish("big/one", blob)
        time.sleep(0.001)  # lets the serving thread run; the condition is the drop count
    served.wait(lambda: not served.sockets._conns)
    lazy.close()


def test_connections_are_bounded_and_the_marker_serves_nothing(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipcbus, "MAX_CONNECTIONS", 2)
    path = os.path.join(served.sockets.sock_dir, ipcbus.PUB)
    peers = []
    for _ in range(3):
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.connect(path)
        peers.append(peer)
    served.wait(lambda: served.sockets.drops["pub_connections_full"] == 1)
    assert len(served.sockets._conns) == 2
    marker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    marker.connect(os.path.join(served.sockets.sock_dir, ipcbus.MARKER))
    marker.settimeout(5)
    assert marker.recv(10) == b""
    for peer in [*peers, marker]:
        peer.close()


def test_unfinished_frames_are_bounded_together(served: Served,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ipcbus, "MAX_TOTAL_PARTIAL", 1000)
    path = os.path.join(served.sockets.sock_dir, PULL)
    small, big = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    small.connect(path)
    small.sendall(struct.pack(">I", 5000) + b"x" * 300)
    served.wait(lambda: served.sockets._partial_bytes() == 304)
    big.connect(path)
    big.sendall(struct.pack(">I", 5000) + b"x" * 900)
    served.wait(lambda: served.sockets.drops["partial_frames_full"] == 1)
    big.settimeout(5)
    assert big.recv(10) == b""  # the biggest unfinished frame's publisher went
    assert served.sockets._partial_bytes() == 304
    small.sendall(b"y")  # the other one is still served
    served.wait(lambda: served.sockets._partial_bytes() == 305)
    small.close()
    big.close()
