"""The master's command socket: a Unix *stream* socket for local users other than root
and the master's own user (``publisher_acl``, ``external_auth``).

Why not the lane.  A lane client is known by the owner of its yard's socket file,
which the daemon ``lstat``s when a request arrives.  That is sound only where nobody
but trusted users can create files: ``sock_dir`` (0700, or 0750 with a group that may
not write), so only root and the master's user, who are unrestricted anyway.  A user
who binds a yard in a directory of their own controls what is at that path when the
daemon looks: they can send, unlink their socket and hard-link any socket they may
read and write in its place (``fs.protected_hardlinks`` allows that for sockets such
as ``/dev/log`` or the D-Bus system socket, mode 0666, owned by root), and be taken
for its owner.  ``SO_PEERCRED`` does not exist for datagram sockets.  So other users
come through this stream socket, where the kernel records the peer's uid/gid/pid at
``connect`` and hands them to the daemon (``SO_PEERCRED``): nothing the client says or
does afterwards changes who it is.

Where: ``<sock_dir>_cmd/master.sock``, a sibling of ``sock_dir`` (which stays 0700/0750:
the bus is not opened to anyone new).  The directory is mode 0755 and the socket 0666
because every request on it is authorised by its peer credentials (publisher_acl) or
by eauth credentials; a user with no rule is refused with a message.  The master opens
it only when ``publisher_acl`` or ``external_auth`` is configured.

Frames: a 4-byte big-endian length, then one msgpack map (at most ``MAX_FRAME`` bytes,
lists and maps nested at most ``MAX_BODY_DEPTH`` deep, as on the road).
The maps are the command protocol's bodies (``raetsalt.protocol``): a request
carries ``route.dst[2]`` (its share) and ``req``; answers are the lane answers.  A peer
that sends a malformed frame is disconnected.

Limits (``Limits``, from the master's ``command_socket_*`` options), so that one local
user cannot starve the others:

* a uid holds at most ``max_per_uid`` connections; more are closed at once;
* all users together hold at most ``max_connections``; when full, a newcomer whose uid
  holds fewer connections than the biggest holder takes that holder's oldest one, so a
  user with no connection always gets in;
* a client must send its first frame within ``frame_timeout`` of connecting and finish
  every frame within ``frame_timeout`` of its first byte (a partial frame is not a place
  to park);
* a connection with nothing in flight (no partial frame and nothing the master still
  owes it: the ``busy`` callback) is closed after ``idle_timeout``, and so is one that
  has not read any of its queued answers for that long.

Every connection refused or closed by a limit is counted in ``drops`` under a
``CommandDrop`` reason and logged at most once a minute per reason.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import selectors
import socket
import stat
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from raetsalt.drivers.uxd import unlink_if_stale
from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError
from raetsalt.log import Throttle
from raetsalt.paths import check_socket_path
from raetsalt.wire.body import nests_deeper_than
from raetsalt.wire.constants import MAX_BODY_DEPTH

log = logging.getLogger(__name__)

MAX_FRAME = 1 << 20
MAX_OUTPUT = 8 << 20
"""Bytes queued for one slow client before it is disconnected."""
MAX_ACCEPTS = 64
"""Connections accepted per ``poll`` at most (a connect flood cannot hold the loop)."""
FRAMES_PER_POLL = 4
"""Requests taken from one connection per ``poll``; the rest wait in its buffer, and
nothing more is read from it until they are taken (the kernel then holds the client
back), so a client pipelining thousands of requests cannot delay everyone else's."""
SOCKET_NAME = "master.sock"
CONN_PREFIX = "cmd:"
"""Connection ids start with this (``:`` never appears in a lane yard name)."""

_LEN = struct.Struct(">I")
_UCRED = struct.Struct("3i")


def command_dir(sock_dir: str) -> str:
    """``<sock_dir>_cmd``: the directory of the command socket."""
    return os.path.normpath(sock_dir) + "_cmd"


def command_socket_path(opts: dict[str, Any] | Any) -> str:
    """Where the master's command socket is (see the module docstring)."""
    return os.path.join(command_dir(opts["sock_dir"]), SOCKET_NAME)


@dataclass(frozen=True, slots=True)
class Limits:
    """How many connections and how much time a client gets (module docstring); the
    master's ``command_socket_<field>`` options."""

    max_connections: int = 64
    max_per_uid: int = 8
    frame_timeout: float = 5.0
    idle_timeout: float = 60.0


class CommandDrop(enum.Enum):
    """Why the command socket refused or closed a connection."""

    PER_UID_LIMIT = "per_uid_limit"
    FULL = "full"
    EVICTED = "evicted"
    NO_FRAME = "no_frame"
    PARTIAL_FRAME = "partial_frame"
    IDLE = "idle"
    BAD_FRAME = "bad_frame"
    SLOW_READER = "slow_reader"


@dataclass(frozen=True, slots=True)
class PeerCred:
    """The kernel's record of who connected (``SO_PEERCRED``)."""

    pid: int
    uid: int
    gid: int


def encode_frame(body: dict[str, Any]) -> bytes:
    data: bytes = msgpack.packb(body, use_bin_type=True)
    if len(data) > MAX_FRAME:
        raise LocalError(f"a command frame of {len(data)} bytes is over {MAX_FRAME}")
    return _LEN.pack(len(data)) + data


def decode_frames_untrusted(buffer: bytearray, limit: int | None = None
                            ) -> list[dict[str, Any]]:
    """Take the complete frames (at most ``limit``) off the front of ``buffer``; raises
    only BadPacket."""
    out: list[dict[str, Any]] = []
    while len(buffer) >= _LEN.size and (limit is None or len(out) < limit):
        (size,) = _LEN.unpack_from(buffer)
        if size > MAX_FRAME:
            raise BadPacket(f"command frame of {size} bytes", DropReason.SIZE)
        if len(buffer) < _LEN.size + size:
            break
        data = bytes(buffer[_LEN.size:_LEN.size + size])
        del buffer[:_LEN.size + size]
        try:
            body = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception as exc:  # noqa: BLE001 - msgpack raises many kinds
            raise BadPacket(f"command frame is not msgpack: {exc}", DropReason.BODY) from None
        if not isinstance(body, dict):
            raise BadPacket("command frame is not a map", DropReason.BODY)
        if nests_deeper_than(body, MAX_BODY_DEPTH):
            # The master stores and re-encodes requests recursively (JSON, msgpack).
            raise BadPacket(f"command frame nests deeper than {MAX_BODY_DEPTH}", DropReason.BODY)
        out.append(body)
    return out


@dataclass(slots=True)
class _Conn:
    id: str
    sock: socket.socket
    cred: PeerCred
    opened: float
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    frames: int = 0
    """Complete frames received so far."""
    frame_start: float | None = None
    """When the first byte of the frame now in ``inbuf`` arrived."""
    last: float = 0.0
    """Last time a frame arrived or the client took some of its answers."""
    backlog: bool = False
    """``inbuf`` may hold complete frames not taken yet (``FRAMES_PER_POLL``)."""

    def deadline(self, limits: Limits) -> float:
        """When this connection is closed unless something happens first."""
        if self.frames == 0:
            return self.opened + limits.frame_timeout
        if self.frame_start is not None:
            return self.frame_start + limits.frame_timeout
        return self.last + limits.idle_timeout


class CommandServer:
    """The listening side, non-blocking, driven by the daemon's loop (``Wakeable``).

    ``poll(now)`` accepts, reads and writes what is ready, closes connections past their
    time and returns the requests that arrived as ``(connection id, PeerCred, body)``;
    ``send(conn_id, body)`` queues an answer; ``get_timer()`` is the next time ``poll``
    has a connection to close.  Everything waits in one inner selector whose descriptor
    sits in the daemon's selector.  ``busy(conn_id)`` says whether the master still owes
    that connection answers (such a connection is never idle).
    """

    def __init__(self, path: str, limits: Limits | None = None,
                 busy: Callable[[str], bool] = lambda conn_id: False) -> None:
        self.path = check_socket_path(path)
        directory = os.path.dirname(path)
        os.makedirs(directory, mode=0o755, exist_ok=True)
        info = os.lstat(directory)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise LocalError(f"{directory!r} is not a directory of this user")
        os.chmod(directory, 0o755)
        unlink_if_stale(path, socket.SOCK_STREAM)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            os.chmod(path, 0o666)
            sock.listen(16)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(sock, selectors.EVENT_READ, None)
        self._conns: dict[str, _Conn] = {}
        self._counter = 0
        self.limits = limits or Limits()
        self.busy = busy
        self.drops: Counter[CommandDrop] = Counter()
        self._log_throttle = Throttle(60.0)
        self._now = 0.0

    # -- Wakeable -------------------------------------------------------------------------

    def register(self, selector: selectors.BaseSelector, data: Any = None) -> None:
        selector.register(self._selector.fileno(), selectors.EVENT_READ, data)

    def unregister(self, selector: selectors.BaseSelector) -> None:
        try:
            selector.unregister(self._selector.fileno())
        except (KeyError, ValueError):
            pass

    def timeout(self) -> float | None:
        return None

    # -- serving --------------------------------------------------------------------------

    def has(self, conn_id: str) -> bool:
        return conn_id in self._conns

    def cred(self, conn_id: str) -> PeerCred | None:
        conn = self._conns.get(conn_id)
        return None if conn is None else conn.cred

    def poll(self, now: float) -> list[tuple[str, PeerCred, dict[str, Any]]]:
        self._now = now
        requests: list[tuple[str, PeerCred, dict[str, Any]]] = []
        for conn in [c for c in self._conns.values() if c.backlog]:
            requests.extend((conn.id, conn.cred, body) for body in self._decode(conn, now))
        for key, events in self._selector.select(0):
            if key.data is None:
                self._accept(now)
                continue
            conn = key.data
            if conn.id not in self._conns:
                continue
            if events & selectors.EVENT_WRITE:
                self._flush(conn)
            if events & selectors.EVENT_READ and conn.id in self._conns and not conn.backlog:
                requests.extend((conn.id, conn.cred, body) for body in self._read(conn, now))
        self._expire(now)
        return requests

    def get_timer(self) -> float | None:
        """The next time a connection runs out of time, or now when requests wait in a
        backlog (absolute, like ``now``)."""
        if not self._conns:
            return None
        if any(conn.backlog for conn in self._conns.values()):
            return self._now
        return min(conn.deadline(self.limits) for conn in self._conns.values())

    def connections(self, uid: int | None = None) -> int:
        """Open connections (of ``uid``, or of everyone)."""
        return sum(1 for c in self._conns.values() if uid is None or c.cred.uid == uid)

    def send(self, conn_id: str, body: dict[str, Any]) -> bool:
        """Queue ``body`` for connection ``conn_id``; False when it is gone."""
        conn = self._conns.get(conn_id)
        if conn is None:
            return False
        conn.outbuf += encode_frame(body)
        if len(conn.outbuf) > MAX_OUTPUT:
            self._drop(conn, CommandDrop.SLOW_READER)
            return False
        self._flush(conn)
        return conn.id in self._conns

    def backlog(self, conn_id: str) -> int:
        """Bytes queued for connection ``conn_id`` and not yet taken by the kernel."""
        conn = self._conns.get(conn_id)
        return len(conn.outbuf) if conn is not None else 0

    def close(self) -> None:
        for conn in list(self._conns.values()):
            self._drop(conn)
        self._selector.close()
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- internals ------------------------------------------------------------------------

    def _accept(self, now: float) -> None:
        for _ in range(MAX_ACCEPTS):
            try:
                sock, _addr = self.sock.accept()
            except OSError:  # BlockingIOError: nothing more to accept
                return
            try:
                pid, uid, gid = _UCRED.unpack(
                    sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
            except OSError:
                sock.close()
                continue
            reason = self._admit(uid)
            if reason is not None:
                sock.close()
                self._count(reason, uid)
                continue
            sock.setblocking(False)
            self._counter += 1
            conn = _Conn(f"{CONN_PREFIX}{self._counter}", sock, PeerCred(pid, uid, gid), now,
                         last=now)
            self._conns[conn.id] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _admit(self, uid: int) -> CommandDrop | None:
        """None when a new connection of ``uid`` may stay (evicting the oldest one of the
        biggest holder if that makes room), else why not."""
        held: Counter[int] = Counter(c.cred.uid for c in self._conns.values())
        if held[uid] >= self.limits.max_per_uid:
            return CommandDrop.PER_UID_LIMIT
        if len(self._conns) < self.limits.max_connections:
            return None
        top, count = held.most_common(1)[0]
        if count <= held[uid] + 1:
            return CommandDrop.FULL  # nobody holds clearly more than this uid: no room
        oldest = min((c for c in self._conns.values() if c.cred.uid == top),
                     key=lambda c: c.opened)
        self._drop(oldest, CommandDrop.EVICTED)
        return None

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if now < conn.deadline(self.limits):
                continue
            if conn.frame_start is not None:
                self._drop(conn, CommandDrop.PARTIAL_FRAME)
            elif conn.frames == 0:
                self._drop(conn, CommandDrop.NO_FRAME)
            elif conn.outbuf:
                self._drop(conn, CommandDrop.SLOW_READER)  # read nothing for idle_timeout
            elif self.busy(conn.id):
                conn.last = now  # still being served: not idle
            else:
                self._drop(conn, CommandDrop.IDLE)

    def _read(self, conn: _Conn, now: float) -> list[dict[str, Any]]:
        # One read per pass (the selector is level-triggered): a client that keeps
        # writing cannot hold the loop.
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            chunk = b""
        if not chunk:
            bodies = self._decode(conn, now)
            self._drop(conn)
            return bodies
        if not conn.inbuf:
            conn.frame_start = now
        conn.inbuf += chunk
        return self._decode(conn, now)

    def _decode(self, conn: _Conn, now: float) -> list[dict[str, Any]]:
        try:
            bodies = decode_frames_untrusted(conn.inbuf, FRAMES_PER_POLL)
        except BadPacket:
            self._drop(conn, CommandDrop.BAD_FRAME)
            return []
        conn.backlog = len(bodies) == FRAMES_PER_POLL
        if bodies:
            conn.frames += len(bodies)
            conn.last = now
            # What is left is the start of the next frame, which began just now.
            conn.frame_start = now if conn.inbuf else None
        return bodies

    def _flush(self, conn: _Conn) -> None:
        while conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn)
                return
            del conn.outbuf[:sent]
            conn.last = self._now
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        self._selector.modify(conn.sock, events, conn)

    def _drop(self, conn: _Conn, reason: CommandDrop | None = None) -> None:
        if self._conns.pop(conn.id, None) is None:
            return
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        if reason is not None:
            self._count(reason, conn.cred.uid)

    def _count(self, reason: CommandDrop, uid: int) -> None:
        self.drops[reason] += 1
        times = self._log_throttle.note(reason, self._now)
        if times:
            log.warning("command socket: closed %d connection(s) (%s), the last of uid %d; "
                        "%d connection(s) open", times, reason.value, uid, len(self._conns))


class StreamClient:
    """A command-line client on the command socket, with ``CommandClient``'s surface
    (``request``, ``receive``, ``daemon_alive``, ``close``)."""

    def __init__(self, path: str) -> None:
        from raetsalt.errors import DaemonUnavailable

        self.node = "master"
        self.path = path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
                raise DaemonUnavailable(
                    f"the raetsalt-master daemon is not running (nothing serves {path})"
                ) from None
            raise DaemonUnavailable(
                f"cannot reach the raetsalt-master daemon at {path}: {exc.strerror or exc}"
            ) from None
        self._sock = sock
        self._buffer = bytearray()
        self._counter = 0
        self._alive = True
        self._token = os.urandom(4).hex()

    def request(self, share: str, *, send_timeout: float = 5.0, **fields: Any) -> str:
        from raetsalt.errors import DaemonUnavailable

        self._counter += 1
        req = f"{self._token}-{self._counter}"
        body = {"route": {"src": [None, None, None], "dst": [None, "manor", share]},
                "req": req, **fields}
        self._sock.settimeout(send_timeout)
        try:
            self._sock.sendall(encode_frame(body))
        except OSError as exc:
            self._alive = False
            raise DaemonUnavailable(
                f"the raetsalt-master daemon went away: {exc.strerror or exc}") from None
        return req

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                frames = decode_frames_untrusted(self._buffer)
            except BadPacket:
                self._alive = False
                return []
            if frames:
                return frames
            if not self._alive:
                return []
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                return []
            except OSError:
                chunk = b""
            if not chunk:
                self._alive = False
                return []
            self._buffer += chunk

    def daemon_alive(self) -> bool:
        return self._alive

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> StreamClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
