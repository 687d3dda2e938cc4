"""Messages between a minion daemon and its Salt zygote, and between the master daemon
and its workers (Linux: ``SOCK_SEQPACKET``, ``memfd``, ``SCM_RIGHTS``).

Zygote control (``send``/``receive``): a ``SOCK_SEQPACKET`` socket pair carries one small
msgpack *header* per packet, plus file descriptors.  A bulky body (a job's spec, grains
and pillar; the zygote's grains) travels in a sealed-size ``memfd`` whose descriptor is
the message's first one, so no packet ever nears the socket's size limit and no write
ever blocks on a full pipe.

Worker frames (``encode_frame``/``FrameReader``): a byte stream of ``<4-byte big-endian
length><msgpack>`` frames, each at most ``MAX_FRAME`` bytes.

Logging: a child process logs like the daemon that started it (``daemon_log_levels`` in
the daemon, ``child_logging`` in the child: the same log file and console).
"""

from __future__ import annotations

import array
import logging
import os
import socket
import struct
from typing import Any

import msgpack

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket

MAX_HEADER = 16384
"""Largest header packet (everything big goes in the body)."""
MAX_FDS = 4
MAX_BODY = 64 << 20
MAX_FRAME = 64 << 20
_LENGTH = struct.Struct(">I")


def _pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


def _unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def send(sock: socket.socket, header: dict[str, Any], body: Any = None,
         fds: tuple[int, ...] = ()) -> None:
    """Send one message; ``body`` (any msgpack value) goes in a memfd.  Raises OSError
    (``BlockingIOError`` when the peer is not reading)."""
    data = _pack({**header, "body": True} if body is not None else header)
    if len(data) > MAX_HEADER:
        raise ValueError(f"control header of {len(data)} bytes")
    attached = list(fds)
    memfd = -1
    if body is not None:
        payload = _pack(body)
        memfd = os.memfd_create("raetsalt", os.MFD_CLOEXEC)
        write_all(memfd, payload)
        attached.insert(0, memfd)
    try:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", attached))] \
            if attached else []
        sock.sendmsg([data], ancillary)
    finally:
        if memfd >= 0:
            os.close(memfd)


def receive(sock: socket.socket) -> tuple[dict[str, Any], Any, list[int]] | None:
    """One message: ``(header, body or None, the other descriptors)``; None at end of
    stream.  The caller owns (and must close) the descriptors.  Raises BadPacket for a
    malformed message (its descriptors are closed) and ``BlockingIOError`` when nothing
    is waiting on a non-blocking socket."""
    fd_size = array.array("i").itemsize
    data, ancdata, flags, _ = sock.recvmsg(MAX_HEADER, socket.CMSG_SPACE(MAX_FDS * fd_size))
    fds: list[int] = []
    for level, kind, raw in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(raw[: len(raw) - len(raw) % fd_size])
            fds.extend(got)
    if not data and not fds:
        return None
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise BadPacket("control message truncated", DropReason.BODY)
        header = _unpack(data)
        if not isinstance(header, dict):
            raise BadPacket("control header is not a mapping", DropReason.BODY)
        body = None
        if header.get("body"):
            if not fds:
                raise BadPacket("control message without its body", DropReason.BODY)
            body = _read_body(fds.pop(0))
        return header, body, fds
    except BadPacket:
        for fd in fds:
            os.close(fd)
        raise
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        for fd in fds:
            os.close(fd)
        raise BadPacket(f"control message: {exc}", DropReason.BODY) from None


def _read_body(fd: int) -> Any:
    try:
        size = os.fstat(fd).st_size
        if size > MAX_BODY:
            raise BadPacket(f"control body of {size} bytes", DropReason.BODY)
        chunks = []
        offset = 0
        while offset < size:
            chunk = os.pread(fd, size - offset, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
        return _unpack(b"".join(chunks))
    finally:
        os.close(fd)


def encode_frame(value: Any) -> bytes:
    data = _pack(value)
    if len(data) > MAX_FRAME:
        raise ValueError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    return _LENGTH.pack(len(data)) + data


class FrameReader:
    """Frames out of a byte stream fed in pieces."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """The frames completed by ``data``; raises BadPacket for an oversized or
        undecodable frame (the stream cannot be trusted after that)."""
        self._buffer += data
        out: list[Any] = []
        while len(self._buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise BadPacket(f"frame of {length} bytes", DropReason.BODY)
            end = _LENGTH.size + length
            if len(self._buffer) < end:
                break
            try:
                out.append(_unpack(bytes(self._buffer[_LENGTH.size:end])))
            except (ValueError, msgpack.ExtraData, msgpack.FormatError,
                    msgpack.StackError) as exc:
                raise BadPacket(f"frame: {exc}", DropReason.BODY) from None
            del self._buffer[:end]
        return out


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a blocking descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def daemon_log_levels() -> dict[str, str]:
    """The calling daemon's console and log file levels, by Salt level name."""
    levels = {"console": "warning", "file": "warning"}
    for handler in logging.getLogger().handlers:
        name = logging.getLevelName(handler.level).lower()
        name = name if name in ("debug", "info", "warning", "error", "critical") else "debug"
        levels["file" if isinstance(handler, logging.FileHandler) else "console"] = name
    return levels


def child_logging(log_file: Any, levels: Any, node: str) -> None:
    """Log to the daemon's ``log_file`` and console at its ``levels``
    (``daemon_log_levels``); without a usable log file, to the console only."""
    from raetsalt.drivers.logfile import setup_logging

    levels = levels if isinstance(levels, dict) else {}
    try:
        setup_logging({"log_file": log_file, "log_level_logfile": levels.get("file")},
                      levels.get("console", "warning"), node=node)
    except (OSError, KeyError, TypeError):
        logging.basicConfig(level=logging.WARNING)
