"""Non-blocking AF_UNIX datagram pump for lane yards (the only lane code that touches sockets).

``UxdSocket`` binds a yard's socket file, and moves datagrams between the kernel and a
sans-IO handler (``raetsalt.lane.Lane`` or ``raetsalt.manor.Manor``), which must offer
``receive_datagram(data, src_path, now)``, ``send_blocked(path, datagrams, now)``,
``send_unblocked(path, now)``, ``send_succeeded(path)`` and ``send_failed(path, now)``.

Sending never blocks: a destination whose queue is full (EAGAIN) is handed back to the
handler with the unsent datagrams, which retries later; a destination with nobody bound
(ENOENT, ECONNREFUSED), or whose socket is connected to another socket (EPERM), is
reported as failed; anything else is counted and dropped.
"Later" is as soon as the kernel has room: for each full destination (up to
``MAX_SEND_WAITERS``) the socket keeps an unbound probe connected to it, in an epoll set
whose descriptor (``wait_fileno``) the caller watches for reading; the kernel reports a
probe writable when its destination's queue has room, and ``release_writable`` then hands
that destination back to the handler (``send_unblocked``).  The handler's own back-off
timer stays the fallback (no probe left, or the destination went away).

Access control is the file system's: a yard's socket file is mode 0600 (0660 with a
group), and the node's socket directory 0700 (0750 with a group).

Linux skips the receiver's queue limit (``net.unix.max_dgram_qlen``) for a sender the
receiver is connected to, so a client connected to the socket its manor sends from could
stop reading and hold the manor's datagrams until the manor's whole send buffer is
spent; the manor could then send to nobody.  So a manor (``manor=True``) receives on its
yard's path and sends from a second socket, at ``sending_path`` (``<...>.tx.uxd``),
mode 0600 whatever the group and shut for reading: only the manor's own user could
connect to it.  A client that connects to the manor's path by its own hand gets nothing
(the kernel refuses a connected socket datagrams from any other socket) and is forgotten;
one that does not connect and stops reading fills only its own queue, and the manor
backs off for it alone.

A client of a manor (``connect_to``) is the mirror image.  Its yard's socket receives,
unconnected (it could not receive from the manor's sending socket otherwise), and takes
datagrams only from the manor's two sockets (the others are dropped and counted as
``foreign_source``).  It sends from a second socket bound at its own ``sending_path``,
shut for reading and connected to the manor: a send names no path, so the kernel does
not walk the manor's path for every datagram, and the manor's queue limit still applies
to it (the manor is connected to nobody).  The kernel reports that socket writable when
the manor's queue has room (``send_waiting`` waits so, without spinning).  A manor takes
a datagram from a sending socket as its yard's (``yard_of_sending_path``: the same name
without ``.tx``, in the same directory, so nobody gains a name they could not bind).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import stat
import time
from collections import Counter
from typing import Protocol

from raetsalt.errors import ConfigError, LocalError
from raetsalt.lane.page import MAX_PAGE_SIZE
from raetsalt.paths import (
    SENDING_MARK,
    SOCKET_SUFFIX,
    check_socket_path,
    sending_path,
    yard_of_sending_path,
)

# Asked for; Linux caps it at net.core.[rw]mem_max (raet asks for 100 pages' worth too).
SOCKET_BUFFER = 100 * MAX_PAGE_SIZE

_SENDING_END = SENDING_MARK + SOCKET_SUFFIX

MAX_SEND_WAITERS = 64
"""Full destinations watched for room at once; more wait for the handler's timer."""


class DatagramHandler(Protocol):
    def receive_datagram(self, data: bytes, src_path: str | None, now: float) -> None: ...
    def send_blocked(self, path: str, datagrams: list[bytes], now: float) -> None: ...
    def send_unblocked(self, path: str, now: float) -> None: ...
    def send_succeeded(self, path: str) -> None: ...
    def send_failed(self, path: str, now: float) -> None: ...


def prepare_sock_dir(sock_dir: str, group: int | None = None) -> None:
    """Create ``sock_dir`` (and parents) and give it mode 0700, or 0750 owned by ``group``."""
    os.makedirs(sock_dir, mode=0o700, exist_ok=True)
    info = os.stat(sock_dir)
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"sock_dir {sock_dir!r} is not a directory")
    if info.st_uid == os.geteuid():
        if group is not None:
            os.chown(sock_dir, -1, group)
            os.chmod(sock_dir, 0o750)
        else:
            os.chmod(sock_dir, 0o700)


def unlink_if_stale(path: str, kind: int = socket.SOCK_DGRAM) -> None:
    """Remove a socket file (of socket type ``kind``) nobody is bound to any more;
    refuse to steal a live one or to remove anything that is not a socket."""
    if not os.path.lexists(path):
        return
    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        raise LocalError(f"{path!r} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, kind)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
        return
    except FileNotFoundError:
        return
    finally:
        probe.close()
    raise LocalError(f"another process serves {path!r}")


def _bound(path: str, group: int | None, *, replace_stale: bool) -> socket.socket:
    """A non-blocking datagram socket bound at ``path``, mode 0600 (0660 with ``group``)."""
    if replace_stale:
        unlink_if_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        sock.bind(path)
        try:
            if group is not None:
                os.chown(path, -1, group)
            os.chmod(path, 0o660 if group is not None else 0o600)
        except BaseException:
            os.unlink(path)
            raise
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class UxdSocket:
    """One bound, non-blocking AF_UNIX datagram socket.

    :param path: where to bind (checked against the ``sun_path`` limit).
    :param group: gid that may use the socket too (mode 0660 instead of 0600).
    :param connect_to: the manor this client talks to (it sends from a second socket,
        bound at ``sending_path(path)`` and connected there: module docstring).
    :param replace_stale: unlink a dead socket file at ``path`` first (servers).
    :param manor: this is a manor's socket: it also binds ``sending_path(path)``, owner
        only, and sends from there (module docstring).
    """

    def __init__(
        self,
        path: str,
        *,
        group: int | None = None,
        connect_to: str | None = None,
        replace_stale: bool = False,
        sock_dir: str | None = None,
        manor: bool = False,
    ) -> None:
        self.path = check_socket_path(path, sock_dir)
        self.stats: Counter[str] = Counter()
        out_path = (check_socket_path(sending_path(path), sock_dir)
                    if manor or connect_to is not None else None)
        self.sock = _bound(path, group, replace_stale=replace_stale)
        self._out: socket.socket | None = None
        """A manor's sending socket (bound at ``out_path``, mode 0600), else None."""
        self._tx: socket.socket | None = None
        """A client's sending socket (bound at ``out_path``, connected to its manor)."""
        self.out_path = out_path
        self.connected_to: str | None = None
        """The manor this client talks to (its socket is not connected: module docstring)."""
        self._manor_out: str | None = None
        """The path a client's manor sends from (``sending_path``)."""
        self._peer_names: dict[str, bool] = {}
        """Source path -> whether it names the manor's sockets (bounded)."""
        self._waits: select.epoll | None = None
        """Probes of full destinations (module docstring); a manor's socket only."""
        self._waiters: dict[int, tuple[str, socket.socket]] = {}
        self._waiting: dict[str, int] = {}
        if connect_to is None:
            try:
                self._waits = select.epoll()
            except (AttributeError, OSError):  # no epoll: the handler's timer alone
                self._waits = None
        if out_path is not None:
            try:
                out = _bound(out_path, None, replace_stale=replace_stale)
                if connect_to is None:
                    self._out = out
                else:
                    self._tx = out
                out.shutdown(socket.SHUT_RD)  # it only sends: others are refused
                if connect_to is not None:
                    manor_path = check_socket_path(connect_to, sock_dir)
                    out.connect(manor_path)  # raises as a connect did: nobody serves it
                    self.connected_to = manor_path
                    self._manor_out = sending_path(manor_path)
            except BaseException:
                self.close()
                raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def wait_fileno(self) -> int | None:
        """A descriptor that is readable when a full destination has room again (then
        call ``release_writable``); None when this socket cannot tell."""
        return self._waits.fileno() if self._waits is not None else None

    def close(self) -> None:
        """Close the socket and remove its file."""
        for path in list(self._waiting):
            self._unwatch(path)
        if self._waits is not None:
            self._waits.close()
            self._waits = None
        for out in (self._out, self._tx):
            if out is None or out.fileno() < 0:
                continue
            out.close()
            assert self.out_path is not None
            try:
                os.unlink(self.out_path)
            except FileNotFoundError:
                pass
        if self.sock.fileno() >= 0:
            self.sock.close()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def receive_into(self, handler: DatagramHandler, now: float, limit: int = 512) -> int:
        """Hand up to ``limit`` waiting datagrams to ``handler``; returns how many."""
        recvfrom = self.sock.recvfrom
        manor, manor_out = self.connected_to, self._manor_out
        serves = self._out is not None
        count = 0
        while count < limit:
            try:
                # One byte over the page limit so an oversize datagram is seen as such.
                data, address = recvfrom(MAX_PAGE_SIZE + 1)
            except (BlockingIOError, InterruptedError):
                break
            count += 1
            if manor is not None and address != manor:
                # the manor sends from its sending socket: its pages are the manor's
                if address != manor_out and not self._is_manor(address):
                    self.stats["foreign_source"] += 1
                    continue
                address = manor
            elif serves and type(address) is str and address.endswith(_SENDING_END):
                address = yard_of_sending_path(address)  # a client's sending socket
            # Unbound senders show up as '' or None; abstract addresses as bytes.
            handler.receive_datagram(data, address if isinstance(address, str) else None, now)
        return count

    def _is_manor(self, address: object) -> bool:
        """Whether a source path other than the text of ``connected_to`` or its outbound
        path names one of those socket files (another spelling of the same directory);
        remembered per path."""
        manor, manor_out = self.connected_to, self._manor_out
        if not isinstance(address, str) or not address or manor is None or manor_out is None:
            return False
        known = self._peer_names.get(address)
        if known is None:
            known = False
            for own in (manor, manor_out):
                try:
                    known = known or os.path.samefile(address, own)
                except OSError:
                    pass
            if len(self._peer_names) < 64:
                self._peer_names[address] = known
        return known

    def send_all(
        self, datagrams: list[tuple[bytes, str]], handler: DatagramHandler, now: float
    ) -> None:
        """Send each (datagram, path) without blocking; report outcomes to ``handler``."""
        if not datagrams:
            return
        sendto = (self._out or self.sock).sendto
        blocked: dict[str, list[bytes]] = {}
        failed: set[str] = set()
        sent: set[str] = set()
        for data, path in datagrams:
            if path in blocked:
                blocked[path].append(data)
                continue
            if path in failed:
                continue
            try:
                sendto(data, path)
            except (BlockingIOError, InterruptedError):
                blocked[path] = [data]
            except OSError as exc:
                # EPERM: the yard's socket is connected to another socket than ours
                if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR,
                                 errno.EPERM):
                    failed.add(path)
                elif exc.errno == errno.ENOBUFS:
                    blocked[path] = [data]
                else:
                    self.stats[f"send_error_{errno.errorcode.get(exc.errno or 0, exc.errno)}"] += 1
            else:
                sent.add(path)
        waiting = self._waiting
        for path in sent:
            if waiting and path in waiting:
                self._unwatch(path)
            handler.send_succeeded(path)
        for path, rest in blocked.items():
            self._watch(path)
            handler.send_blocked(path, rest, now)
        for path in failed:
            if waiting and path in waiting:
                self._unwatch(path)
            handler.send_failed(path, now)

    def release_writable(self, handler: DatagramHandler, now: float) -> int:
        """Hand every full destination that has room again back to ``handler``
        (``send_unblocked``); returns how many."""
        waits = self._waits
        if waits is None or not self._waiters:
            return 0
        released = 0
        for fd, _mask in waits.poll(0):
            entry = self._waiters.get(fd)
            if entry is None:
                continue
            path = entry[0]
            self._unwatch(path)
            handler.send_unblocked(path, now)
            released += 1
        return released

    def _watch(self, path: str) -> None:
        """Watch the full destination ``path`` for room (at most ``MAX_SEND_WAITERS``)."""
        waits = self._waits
        if waits is None or path in self._waiting:
            return
        if len(self._waiting) >= MAX_SEND_WAITERS:
            self.stats["send_waiters_full"] += 1
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.setblocking(False)
            probe.connect(path)  # only polled: it never sends
            waits.register(probe.fileno(), select.EPOLLOUT)
        except OSError:  # gone meanwhile: the next send reports it
            probe.close()
            return
        self._waiters[probe.fileno()] = (path, probe)
        self._waiting[path] = probe.fileno()

    def _unwatch(self, path: str) -> None:
        fd = self._waiting.pop(path, None)
        if fd is None:
            return
        _path, probe = self._waiters.pop(fd)
        if self._waits is not None:
            try:
                self._waits.unregister(fd)
            except (OSError, ValueError):
                pass
        probe.close()

    def send_waiting(self, data: bytes, timeout: float | None) -> bool:
        """Send to the manor (``connect_to``), waiting up to ``timeout`` s for room in its
        queue (None: forever).

        Returns False on timeout.  Raises OSError when the manor is gone.
        """
        tx = self._tx
        if tx is None:
            raise LocalError("send_waiting needs a socket made with connect_to")
        if self._send_tx(tx, data):
            return True
        # The sending socket is connected to the manor: the kernel reports it writable only
        # when the manor's queue has room, so this waits for the manor instead of spinning.
        poller = select.poll()
        poller.register(tx.fileno(), select.POLLOUT)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining_ms = None
            if deadline is not None:
                remaining_ms = max(0, round((deadline - time.monotonic()) * 1000))
            if not poller.poll(remaining_ms) and remaining_ms is not None:
                return False
            if self._send_tx(tx, data):
                return True

    def _send_tx(self, tx: socket.socket, data: bytes) -> bool:
        """One send to the manor: True when sent, False when its queue is full.

        A manor started again since the last send leaves ``tx`` connected to its
        predecessor's closed socket (ECONNREFUSED once, then ENOTCONN): connecting again
        names the socket bound at the path now, or raises when nobody serves it.
        """
        try:
            tx.send(data)
            return True
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOTCONN):
                raise
        assert self.connected_to is not None
        self.stats["reconnects"] += 1
        tx.connect(self.connected_to)
        try:
            tx.send(data)
            return True
        except BlockingIOError:
            return False

    def wait_readable(self, timeout: float | None) -> bool:
        """Block until a datagram is waiting or ``timeout`` seconds pass (None: forever)."""
        readable, _, _ = select.select([self.sock], [], [], timeout)
        return bool(readable)
