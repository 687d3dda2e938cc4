"""The command socket's limits (docs/security.md): per-uid and global connection caps, frame
and idle time-outs.  Real Unix sockets; the server's ``now`` is set by the test, and waits
are on the sockets (never sleeps).  Connections of another uid come from forked children that
drop to ``nobody`` (needs root)."""

from __future__ import annotations

import os
import pwd
import selectors
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from raetsalt.drivers.cmdsock import (
    CommandDrop,
    CommandServer,
    Limits,
    StreamClient,
    decode_frames_untrusted,
    encode_frame,
)
from raetsalt.errors import BadPacket

LIMITS = Limits(max_connections=6, max_per_uid=4, frame_timeout=5.0, idle_timeout=60.0)


class Server:
    def __init__(self, path: str, busy: Callable[[str], bool] = lambda c: False) -> None:
        self.server = CommandServer(path, LIMITS, busy)
        self.path = path
        self.selector = selectors.DefaultSelector()
        self.server.register(self.selector)
        self.now = 0.0
        self.requests: list[tuple[str, str]] = []  # (connection, the request's req)

    def pump(self, until: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.requests += [(c, str(body.get("req"))) for c, _cred, body in
                              self.server.poll(self.now)]
            if until():
                return
            assert time.monotonic() < deadline, f"no progress; drops {self.server.drops}"
            self.selector.select(0.05)

    def connect(self, data: bytes = b"") -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.path)
        if data:
            sock.sendall(data)
        return sock


@pytest.fixture
def server() -> Iterator[Server]:
    # Under /tmp, 0755 all the way, so that other uids can reach the socket.
    root = Path(tempfile.mkdtemp(prefix="rscs", dir="/tmp"))
    root.chmod(0o755)
    s = Server(str(root / "s_cmd" / "master.sock"))
    yield s
    s.server.unregister(s.selector)
    s.server.close()
    shutil.rmtree(root, ignore_errors=True)


def closed_by_peer(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:  # closed with our bytes unread
        return True
    except TimeoutError:
        return False


def test_one_uid_holds_at_most_max_per_uid(server: Server) -> None:
    socks = [server.connect(b"\0\0") for _ in range(10)]
    server.pump(lambda: server.server.drops[CommandDrop.PER_UID_LIMIT] == 6)
    assert server.server.connections(os.getuid()) == 4
    assert sum(closed_by_peer(s, 0.5) for s in socks[4:]) == 6
    for s in socks:
        s.close()


def test_partial_frames_and_silent_connections_time_out(server: Server) -> None:
    partial = server.connect(b"\0\0\0")  # three bytes of a length header
    silent = server.connect()
    server.pump(lambda: server.server.connections() == 2)
    assert server.server.get_timer() == 5.0
    server.now = 4.9
    server.pump(lambda: True)
    assert server.server.connections() == 2
    server.now = 5.0
    server.pump(lambda: server.server.connections() == 0)
    assert server.server.drops[CommandDrop.PARTIAL_FRAME] == 1
    assert server.server.drops[CommandDrop.NO_FRAME] == 1
    assert closed_by_peer(partial) and closed_by_peer(silent)


def test_a_frame_begun_later_gets_its_own_time(server: Server) -> None:
    sock = server.connect(encode_frame({"req": "1"}))
    server.pump(lambda: len(server.requests) == 1)
    server.now = 30.0
    sock.sendall(encode_frame({"req": "2"})[:3])
    server.pump(lambda: server.server.get_timer() == 35.0)
    server.now = 34.0
    sock.sendall(encode_frame({"req": "2"})[3:])
    server.pump(lambda: len(server.requests) == 2)
    assert server.server.get_timer() == 34.0 + 60.0  # idle from now on
    sock.close()


def test_idle_connections_close_unless_the_master_still_owes_them(tmp_path: Path) -> None:
    owed: set[str] = set()
    s = Server(str(tmp_path / "i_cmd" / "master.sock"), busy=lambda conn: conn in owed)
    try:
        waiting = s.connect(encode_frame({"req": "w"}))
        idle = s.connect(encode_frame({"req": "i"}))
        s.pump(lambda: len(s.requests) == 2)
        owed.add(s.requests[0][0] if s.requests[0][0] < s.requests[1][0] else s.requests[1][0])
        s.now = 60.0
        s.pump(lambda: s.server.connections() == 1)
        assert s.server.drops[CommandDrop.IDLE] == 1
        assert closed_by_peer(idle) and s.server.has(next(iter(owed)))
        owed.clear()
        s.now = 120.0
        s.pump(lambda: s.server.connections() == 0)
        waiting.close()
    finally:
        s.server.unregister(s.selector)
        s.server.close()


def as_nobody(path: str, count: int) -> int:
    """Fork a child that connects ``count`` times as ``nobody`` and holds them until its
    stdin closes; returns its pid (the parent keeps the other end in ``_held``)."""
    info = pwd.getpwnam("nobody")
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = b"e"
        try:
            for fd in (ready_r, hold_w, *_held.values()):  # EOF must reach us and others
                os.close(fd)
            os.setgroups([])
            os.setgid(info.pw_gid)
            os.setuid(info.pw_uid)
            socks = []
            for _ in range(count):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(path)
                socks.append(sock)
            status = b"k"
        finally:
            os.write(ready_w, status)
            if status == b"k":
                os.read(hold_r, 1)
            os._exit(0)
    os.close(ready_w)
    os.close(hold_r)
    ok = os.read(ready_r, 1) == b"k"
    os.close(ready_r)
    _held[pid] = hold_w
    if not ok:
        release(pid)
        raise AssertionError("the nobody child could not connect")
    return pid


_held: dict[int, int] = {}


def release(pid: int) -> None:
    os.close(_held.pop(pid))
    os.waitpid(pid, 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_a_full_socket_still_lets_a_new_user_in(server: Server) -> None:
    os.chmod(os.path.dirname(server.path), 0o755)
    socks = [server.connect(b"\0") for _ in range(4)]
    server.pump(lambda: server.server.connections() == 4)
    child = as_nobody(server.path, 2)  # 6 connections: full
    try:
        server.pump(lambda: server.server.connections() == 6)
        # A third nobody connection: nobody (2) holds clearly less than root (4).
        third = as_nobody(server.path, 1)
        server.pump(lambda: server.server.drops[CommandDrop.EVICTED] == 1)
        assert server.server.connections(os.getuid()) == 3
        assert server.server.connections(pwd.getpwnam("nobody").pw_uid) == 3
        # Root now holds 3 and nobody 3: nobody may not take more from root.
        fourth = as_nobody(server.path, 1)
        server.pump(lambda: server.server.drops[CommandDrop.FULL] == 1)
        for pid in (third, fourth):
            release(pid)
    finally:
        release(child)
        for s in socks:
            s.close()


def test_a_client_that_never_reads_is_dropped(server: Server) -> None:
    sock = server.connect(encode_frame({"req": "r"}))
    server.pump(lambda: len(server.requests) == 1)
    conn = server.requests[0][0]
    big = {"req": "r", "blob": "x" * 900_000}
    while server.server.send(conn, big):
        pass
    assert server.server.drops[CommandDrop.SLOW_READER] == 1
    sock.close()


def test_stream_client_against_limits(server: Server) -> None:
    with StreamClient(server.path) as client:
        req = client.request("publish", fun="test.ping")
        server.pump(lambda: len(server.requests) == 1)
        assert server.server.send(server.requests[0][0], {"req": req})
        assert client.receive(5.0) == [{"req": req}]


def test_a_frame_nested_deeper_than_a_road_body_is_refused(server: Server) -> None:
    deep: list[object] = []
    cur = deep
    for _ in range(1000):  # the master's JSON job cache would hit the recursion limit
        cur.append([])
        cur = cur[0]  # type: ignore[assignment]
    sock = server.connect(encode_frame({"req": "r", "arg": [deep]}))
    server.pump(lambda: server.server.drops[CommandDrop.BAD_FRAME] == 1)
    assert server.requests == [] and closed_by_peer(sock)
    with pytest.raises(BadPacket, match="nests deeper"):
        decode_frames_untrusted(bytearray(encode_frame({"a": [[[[[[]]]]]] * 1, "b": deep})))


def test_a_pipelining_client_does_not_delay_another_clients_request(server: Server) -> None:
    flood = server.connect(b"".join(encode_frame({"req": f"f{i}"}) for i in range(1000)))
    server.pump(lambda: len(server.requests) >= 4)  # the flood is being served...
    other = server.connect(encode_frame({"req": "other"}))
    polls = 0
    while not any(req == "other" for req in _reqs(server)):
        polls += 1
        server.pump(lambda: True)
        assert polls < 50, "the other client's request is stuck behind the flood"
        server.selector.select(0.05)
    assert server.server.get_timer() == server.now  # the flood's backlog is due at once
    taken = sum(1 for r in _reqs(server) if r.startswith("f"))
    assert taken < 100  # FRAMES_PER_POLL per pass, not the whole flood at once
    flood.close()
    other.close()


def _reqs(server: Server) -> list[str]:
    return [req for _conn, req in server.requests]
