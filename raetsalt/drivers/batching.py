"""Fewer system calls per datagram for the UDP driver (``bench/bench_road.py``
measures what they save).

* **UDP GSO** (Linux 4.18+, ``UDP_SEGMENT``): consecutive datagrams of one size to one
  address leave in one ``sendmsg`` of their buffers (gathered by the kernel: no copy here),
  cut back into datagrams by the kernel or the network card.
* **UDP GRO** (Linux 5.0+, ``UDP_GRO``): the kernel hands such runs over joined, the
  segment size in a control message; ``receive`` cuts them apart again.
* **recvmmsg** (Linux): every datagram waiting, up to ``MMSG_BATCH``, in one system call,
  with each one's GRO segment size: through ``raetsalt._udpio`` (raetsalt/_udpio.c, built
  with the C kernel) where it was built, so a wake-up costs one read, and a read that
  returns fewer than it asked for tells that the socket is empty (``drained``) without
  another call; else through ctypes, only where GRO is off (2.1 against 2.4 us per
  300-byte datagram on this machine's loopback).
* **sendmmsg** (Linux, through ctypes) likewise for sending, but only when asked for
  (``send_mmsg``): filling its headers through ctypes costs more than it saves (4.9
  against 3.7 us per datagram on loopback, where the kernel's delivery dominates); GSO
  already sends the runs of one size to one address, where batching pays.
* Elsewhere, or once the kernel refuses one of them (an old kernel, a device without
  checksum offload: ``EIO``), one ``sendto``/``recvfrom_into`` per datagram (the driver
  then asks ``poll`` whether more is waiting, which is cheaper than a receive that raises
  ``BlockingIOError``).  A refused
  mechanism stays off for the socket's life; the datagrams it did not send are sent the
  plain way, so nothing is lost or sent twice.

``DatagramIO`` only moves bytes: what a datagram means is the road's business, and a
datagram the kernel reports an error for is counted in ``stats`` and dropped, as before.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import socket
import struct
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from raetsalt.engine.native.trains import Train

Address = tuple[str, int]
Datagram = bytes | bytearray

UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)
UDP_GRO = getattr(socket, "UDP_GRO", 104)
MAX_SEGMENTS = 64
"""Segments the kernel takes in one GSO send (UDP_MAX_SEGMENTS)."""
MAX_GSO_BYTES = 65000
"""Payload of one GSO send (below the 64 KiB an IP datagram can carry)."""
MMSG_BATCH = 32
"""Datagrams per sendmmsg/recvmmsg call."""
SLOT = 65536
"""Bytes of one ``recv_many`` slot: a whole GRO train (or the largest datagram)."""
_REFUSED = frozenset({errno.EIO, errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP})
_SEGMENT_SIZE = struct.Struct("=H")
_GRO_SIZE = struct.Struct("=i")

Handler = Callable[[bytes, Address], None]
TrainHandler = Callable[[memoryview, int, Address], bool]
"""Takes a GRO train (datagrams of the given size back to back, the last may be shorter);
False: not taken, each datagram goes to the ``Handler``."""


def _load_recv_many() -> Callable[..., Any] | None:
    """``raetsalt._udpio.recv_many``, or None (not built, not Linux, or the pure-Python
    paths forced with ``RAETSALT_PURE_PYTHON``)."""
    if os.environ.get("RAETSALT_PURE_PYTHON"):
        return None
    try:
        from raetsalt import _udpio  # type: ignore[attr-defined]
    except ImportError:
        return None
    found: Callable[..., Any] | None = getattr(_udpio, "recv_many", None)
    return found


RECV_MANY = _load_recv_many()


def _errname(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno)).lower()


class DatagramIO:
    """Sends and receives a UDP socket's datagrams in as few system calls as it can.

    ``gso``, ``gro`` and ``mmsg`` (recvmmsg) turn a mechanism off, ``send_mmsg`` turns
    sendmmsg on (tests use them to check each path and the fallbacks); on platforms
    without them they are off whatever is asked.  ``many``: receives go through
    ``raetsalt._udpio`` (recvmmsg with GRO), after which ``drained`` tells whether the
    socket was found empty.
    """

    def __init__(
        self,
        sock: socket.socket,
        stats: Counter[str],
        *,
        gso: bool = True,
        gro: bool = True,
        mmsg: bool = True,
        send_mmsg: bool = False,
    ) -> None:
        self.sock = sock
        self.stats = stats
        self.trim = sock.family == socket.AF_INET6  # IPv6 sources come as 4-tuples
        linux = sys.platform.startswith("linux")
        self.gso = gso and linux
        self.gro = gro and linux and self._enable_gro()
        self.mmsg: _Mmsg | None = None  # recvmmsg
        self.send_mmsg: _Mmsg | None = None
        self.many = mmsg and linux and RECV_MANY is not None
        self.drained = False
        """The last ``receive`` found the socket empty (``many`` only)."""
        self._slots: mmap.mmap | None = None
        self._slots_view: memoryview | None = None
        self._largest = 0
        if linux and (mmsg or send_mmsg):
            loaded = _Mmsg.load(sock)
            self.mmsg = loaded if mmsg else None
            self.send_mmsg = loaded if send_mmsg else None

    def _enable_gro(self) -> bool:
        try:
            self.sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
        except OSError:
            return False
        return True

    # -- sending ------------------------------------------------------------------------

    def send(self, out: list[tuple[Datagram, Address]], start: int = 0) -> int:
        """Send ``out[start:]``; returns the index of the first datagram not sent because
        the socket is full (``len(out)`` when all went; a ``Train`` sent in part is
        replaced by what is left of it).  Other errors drop the datagram they concern
        (counted as ``tx_error_<errno>``)."""
        index, end = start, len(out)
        sent = 0
        stats = self.stats
        while index < end:
            if isinstance(out[index][0], Train):
                went, done = self._send_train(out, index)
                sent += went
                if not done:
                    break  # the socket is full: the rest of the train waits in out[index]
                index += 1
                continue
            run = self._run(out, index, end) if self.gso else 1
            mmsg = self.send_mmsg if run == 1 and index + 1 < end else None
            try:
                if run > 1:
                    self._send_gso(out, index, run)
                    stats["tx_gso"] += 1
                elif mmsg is not None:
                    run = mmsg.send(out, index, min(end, index + MMSG_BATCH))
                    if not run:
                        raise BlockingIOError
                    stats["tx_mmsg"] += 1
                else:
                    data, address = out[index]
                    self.sock.sendto(data, address)
            except BlockingIOError:
                stats["tx_blocked"] += 1
                break
            except OSError as exc:
                if exc.errno in _REFUSED and run > 1:
                    self.gso = False  # this path cannot segment: send them one by one
                    stats["gso_off"] += 1
                    continue
                if exc.errno in _REFUSED and mmsg is not None:
                    self.send_mmsg = None
                    stats["mmsg_off"] += 1
                    continue
                stats[f"tx_error_{_errname(exc)}"] += 1  # dropped like a lost datagram
                run = 1
            index += run
            sent += run
        if sent:
            self.stats["tx"] += sent
        return index

    def _send_train(self, out: list[tuple[Datagram, Address]], index: int) -> tuple[int, bool]:
        """Send the ``Train`` at ``out[index]``: GSO sends of up to ``MAX_SEGMENTS``
        segments and ``MAX_GSO_BYTES``, else segment by segment.  Returns how many
        datagrams went and whether all did; when the socket fills, ``out[index]`` becomes
        what is left of the train (a new ``Train``)."""
        train, address = out[index]
        assert isinstance(train, Train)
        segment, size = train.segment, len(train)
        view = memoryview(train)
        per_send = min(MAX_SEGMENTS, MAX_GSO_BYTES // segment) if self.gso else 1
        step = max(1, per_send) * segment
        stats, start, sent = self.stats, 0, 0
        while start < size:
            piece = view[start : start + step]
            try:
                if len(piece) > segment:
                    control = [(socket.IPPROTO_UDP, UDP_SEGMENT, _SEGMENT_SIZE.pack(segment))]
                    self.sock.sendmsg([piece], control, 0, address)
                    stats["tx_gso"] += 1
                else:
                    self.sock.sendto(piece, address)
            except BlockingIOError:
                stats["tx_blocked"] += 1
                rest = Train(view[start:])
                rest.segment = segment
                out[index] = (rest, address)
                return sent, False
            except OSError as exc:
                if exc.errno in _REFUSED and len(piece) > segment:
                    self.gso = False  # this path cannot segment: send them one by one
                    stats["gso_off"] += 1
                    step = segment
                    continue
                stats[f"tx_error_{_errname(exc)}"] += 1  # dropped like lost datagrams
            start += len(piece)
            sent += -(-len(piece) // segment)
        return sent, True

    @staticmethod
    def _run(out: Sequence[tuple[Datagram, Address]], index: int, end: int) -> int:
        """How many datagrams from ``index`` make one GSO send: one address, one size
        (the last may be shorter), at most ``MAX_SEGMENTS`` and ``MAX_GSO_BYTES``."""
        data, address = out[index]
        size = len(data)
        total = size
        stop = index + 1
        limit = min(end, index + MAX_SEGMENTS)
        while stop < limit:
            nxt, where = out[stop]
            length = len(nxt)
            if (
                where != address
                or length > size
                or total + length > MAX_GSO_BYTES
                or isinstance(nxt, Train)
            ):
                break
            total += length
            stop += 1
            if length < size:
                break  # only the last segment may be shorter
        return stop - index

    def _send_gso(self, out: Sequence[tuple[Datagram, Address]], index: int, run: int) -> None:
        first, address = out[index]
        buffers = [data for data, _ in out[index : index + run]]
        control = [(socket.IPPROTO_UDP, UDP_SEGMENT, _SEGMENT_SIZE.pack(len(first)))]
        self.sock.sendmsg(buffers, control, 0, address)

    # -- receiving ----------------------------------------------------------------------

    def receive(
        self, buf: bytearray, handle: Handler, budget: int, train: TrainHandler | None = None
    ) -> int:
        """Read one system call's worth of datagrams into ``buf`` (and the mmsg buffers)
        and hand each to ``handle``, or a GRO train whole to ``train`` when given and it
        takes it (a view of ``buf``, valid during the call); returns the bytes read (0: nothing was
        waiting, or an error was counted).  ``budget`` caps what one call may return."""
        if self.many:
            return self._receive_many(handle, budget, train)
        if self.mmsg is not None and not self.gro:
            return self.mmsg.receive(handle, self.trim, self.stats)
        view = memoryview(buf)
        try:
            if self.gro:
                size, ancdata, _, source = self.sock.recvmsg_into([buf], 64)
            else:
                size, source = self.sock.recvfrom_into(buf)
                ancdata = None
        except BlockingIOError:
            return 0
        except OSError as exc:
            # An ICMP error queued on the socket (ECONNREFUSED, EHOSTUNREACH ...) is
            # reported once by the next receive; the datagram is not lost.
            self.stats[f"rx_error_{_errname(exc)}"] += 1
            return 0
        if self.trim:
            source = source[:2]
        segment = size
        if ancdata:
            for level, kind, data in ancdata:
                if level == socket.IPPROTO_UDP and kind == UDP_GRO and len(data) >= 4:
                    segment = _GRO_SIZE.unpack_from(data)[0] or size
        if segment >= size:
            self.stats["rx"] += 1
            handle(view[:size].tobytes(), source)
            return size
        self.stats["rx_gro"] += 1
        if train is not None and train(view[:size], segment, source):
            self.stats["rx"] += -(-size // segment)
            return size
        count = 0
        for offset in range(0, size, segment):
            count += 1
            handle(view[offset : min(size, offset + segment)].tobytes(), source)
        self.stats["rx"] += count
        return size


    def _receive_many(self, handle: Handler, budget: int, train: TrainHandler | None) -> int:
        """``receive`` through ``raetsalt._udpio.recv_many``: as many datagrams as wait, up
        to ``MMSG_BATCH`` and about ``budget`` bytes (judged by the largest datagram of
        the previous call), in one system call."""
        view = self._slots_view
        if view is None:
            # Anonymous memory: a slot's pages become resident only where the kernel
            # writes, so small datagrams cost a page each, not 64 KiB.
            self._slots = mmap.mmap(-1, MMSG_BATCH * SLOT)
            view = self._slots_view = memoryview(self._slots)
        count = budget // self._largest if self._largest else MMSG_BATCH
        count = MMSG_BATCH if count > MMSG_BATCH else (count or 1)
        assert RECV_MANY is not None
        got = RECV_MANY(self.sock.fileno(), view, SLOT, count)
        stats = self.stats
        if type(got) is int:
            # An ICMP error queued on the socket (ECONNREFUSED, EHOSTUNREACH ...) is
            # reported once by the next receive; no datagram is lost.
            stats[f"rx_error_{errno.errorcode.get(got, str(got)).lower()}"] += 1
            self.drained = False
            return 0
        self.drained = len(got) < count
        if not got:
            return 0
        stats["rx_mmsg"] += 1
        total = largest = datagrams = 0
        for start, size, segment, source in got:
            total += size
            if size > largest:
                largest = size
            if segment >= size:
                datagrams += 1
                handle(view[start : start + size].tobytes(), source)
                continue
            stats["rx_gro"] += 1
            data = view[start : start + size]
            if train is not None and train(data, segment, source):
                datagrams += -(-size // segment)
                continue
            for offset in range(0, size, segment):
                datagrams += 1
                handle(data[offset : offset + segment].tobytes(), source)
        stats["rx"] += datagrams
        self._largest = largest
        return total


class _Mmsg:
    """sendmmsg/recvmmsg through ctypes (glibc or musl, Linux)."""

    def __init__(self, libc: Any, sock: socket.socket) -> None:
        self.libc = libc
        self.sock = sock
        self.fd = sock.fileno()
        self.family = sock.family
        self._names: dict[Address, tuple[Any, int, int]] = {}
        self._recv: _RecvArrays | None = None
        self._send: _SendArrays | None = None

    @classmethod
    def load(cls, sock: socket.socket) -> _Mmsg | None:
        libc = _libc()
        return None if libc is None else cls(libc, sock)

    def _name(self, address: Address) -> tuple[int, int]:
        """(address of, size of) the ``sockaddr`` for ``address``, made once (at most
        4096 kept; the calls that use them are synchronous, so clearing is safe)."""
        name = self._names.get(address)
        if name is None:
            if len(self._names) >= 4096:
                self._names.clear()
            raw = _sockaddr(self.family, address)
            name = self._names[address] = (raw, ctypes.addressof(raw), ctypes.sizeof(raw))
        return name[1], name[2]

    def send(self, out: Sequence[tuple[Datagram, Address]], start: int, stop: int) -> int:
        """Send ``out[start:stop]`` in one call; returns how many went (0: the socket
        is full).  Raises ``OSError`` for the first datagram the kernel refused."""
        arrays = self._send
        if arrays is None:
            arrays = self._send = _SendArrays()
        msgs, iovs = arrays.msgs, arrays.iovs
        count = stop - start
        keep = []  # the buffers stay alive (and unmoved) until the call returns
        for n in range(count):
            data, address = out[start + n]
            if isinstance(data, bytearray):
                buffer: Any = (ctypes.c_char * len(data)).from_buffer(data)
                iovs[n].iov_base = ctypes.addressof(buffer)
            else:
                buffer = ctypes.c_char_p(data)
                iovs[n].iov_base = ctypes.cast(buffer, ctypes.c_void_p).value
            keep.append(buffer)
            iovs[n].iov_len = len(data)
            header = msgs[n].msg_hdr
            header.msg_name, header.msg_namelen = self._name(address)
        sent = self.libc.sendmmsg(self.fd, msgs, count, socket.MSG_DONTWAIT)
        if sent < 0:
            code = ctypes.get_errno()
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                return 0
            raise OSError(code, "sendmmsg failed")
        return int(sent)

    def receive(self, handle: Handler, trim: bool, stats: Counter[str]) -> int:
        arrays = self._recv
        if arrays is None:
            arrays = self._recv = _RecvArrays(self.family)
        got = self.libc.recvmmsg(self.fd, arrays.msgs, MMSG_BATCH, socket.MSG_DONTWAIT, None)
        if got <= 0:
            code = ctypes.get_errno()
            if got < 0 and code not in (errno.EAGAIN, errno.EWOULDBLOCK):
                stats[f"rx_error_{errno.errorcode.get(code, str(code)).lower()}"] += 1
            return 0
        total = 0
        stats["rx"] += got
        stats["rx_mmsg"] += 1
        for n in range(got):
            size = arrays.msgs[n].msg_len
            total += size
            handle(arrays.views[n][:size].tobytes(), arrays.source(n, trim))
        return total


_LIBC: list[Any] = []


def _libc() -> Any:
    """The C library with sendmmsg and recvmmsg (loaded once), or None."""
    if not _LIBC:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.sendmmsg.restype = ctypes.c_int
            libc.recvmmsg.restype = ctypes.c_int
        except (OSError, AttributeError):
            libc = None
        _LIBC.append(libc)
    return _LIBC[0]


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(_IoVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


def _sockaddr(family: int, address: Address) -> Any:
    """A ``struct sockaddr_in``/``sockaddr_in6`` for ``address`` (numeric host)."""
    host, port = address
    if family == socket.AF_INET6:
        raw = struct.pack(
            "=HH4s16s4s", family, socket.htons(port), bytes(4),
            socket.inet_pton(socket.AF_INET6, host), bytes(4),
        )
        return (ctypes.c_char * 28).from_buffer_copy(raw[:28])
    raw = struct.pack("=HH4s8s", family, socket.htons(port), socket.inet_aton(host), bytes(8))
    return (ctypes.c_char * 16).from_buffer_copy(raw)


class _SendArrays:
    """Headers for sendmmsg, made once per socket (one iovec each)."""

    def __init__(self) -> None:
        self.iovs = (_IoVec * MMSG_BATCH)()
        self.msgs = (_MMsgHdr * MMSG_BATCH)()
        for n in range(MMSG_BATCH):
            header = self.msgs[n].msg_hdr
            header.msg_iov = ctypes.pointer(self.iovs[n])
            header.msg_iovlen = 1


class _RecvArrays:
    """Buffers and headers for one recvmmsg call, made once per socket."""

    def __init__(self, family: int) -> None:
        self.family = family
        self.buffers = [bytearray(65536) for _ in range(MMSG_BATCH)]
        self.views = [memoryview(b) for b in self.buffers]
        self.names = [(ctypes.c_char * 28)() for _ in range(MMSG_BATCH)]
        self.iovs = (_IoVec * MMSG_BATCH)()
        self.msgs = (_MMsgHdr * MMSG_BATCH)()
        self._keep = [(ctypes.c_char * 65536).from_buffer(b) for b in self.buffers]
        for n in range(MMSG_BATCH):
            self.iovs[n].iov_base = ctypes.addressof(self._keep[n])
            self.iovs[n].iov_len = 65536
            header = self.msgs[n].msg_hdr
            header.msg_name = ctypes.addressof(self.names[n])
            header.msg_namelen = 28
            header.msg_iov = ctypes.pointer(self.iovs[n])
            header.msg_iovlen = 1

    def source(self, n: int, trim: bool) -> Address:
        raw = bytes(self.names[n])
        self.msgs[n].msg_hdr.msg_namelen = 28  # the kernel shrank it to the one it wrote
        port = struct.unpack_from("!H", raw, 2)[0]
        if self.family == socket.AF_INET6:
            return (socket.inet_ntop(socket.AF_INET6, raw[8:24]), port)
        return (socket.inet_ntoa(raw[4:8]), port)
