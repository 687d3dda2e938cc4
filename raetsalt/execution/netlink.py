"""The host's interface addresses, asked of the kernel over rtnetlink (no ``ip`` command).

``interface_addresses()`` sends one ``RTM_GETADDR`` dump request and returns every
address in the kernel's order, which is the order ``ip addr show`` prints them in.
``parse_dump`` is the pure part: it reads the kernel's answer and never trusts a length
field (a malformed message ends the parse; nothing is read past the data).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

__all__ = ["InterfaceAddress", "interface_addresses", "parse_dump"]

_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTATTR = struct.Struct("=HH")  # length, type
_FLAGS = struct.Struct("=I")

_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_RTM_NEWADDR = 20
_RTM_GETADDR = 22
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300

_IFA_ADDRESS = 1
_IFA_LOCAL = 2
_IFA_FLAGS = 8
_IFA_F_SECONDARY = 0x01

_MAX_REPLY = 1 << 20  # the whole dump of a host with many addresses fits well under this


@dataclass(frozen=True, slots=True)
class InterfaceAddress:
    """One address as ``ip addr`` shows it: IPv4 uses the local address (not a
    point-to-point peer); ``secondary`` is only ever set for IPv4."""

    index: int
    family: int
    address: str
    secondary: bool


def _align(n: int) -> int:
    return (n + 3) & ~3


def _attributes(data: bytes, start: int, end: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    pos = start
    while pos + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, pos)
        if length < _RTATTR.size or pos + length > end:
            break
        found.setdefault(kind, data[pos + _RTATTR.size:pos + length])
        pos += _align(length)
    return found


def _address(family: int, raw: bytes | None) -> str | None:
    if family == socket.AF_INET and raw is not None and len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    if family == socket.AF_INET6 and raw is not None and len(raw) == 16:
        return str(ipaddress.IPv6Address(raw))
    return None


def parse_dump(data: bytes) -> tuple[list[InterfaceAddress], bool]:
    """The addresses in one read of the dump, and whether the dump has ended."""
    found: list[InterfaceAddress] = []
    pos = 0
    while pos + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _port = _NLMSG.unpack_from(data, pos)
        if length < _NLMSG.size or pos + length > len(data):
            return found, True  # malformed: stop here rather than guess
        if kind in (_NLMSG_DONE, _NLMSG_ERROR):
            return found, True
        body = pos + _NLMSG.size
        if kind == _RTM_NEWADDR and body + _IFADDRMSG.size <= pos + length:
            family, _prefix, flags, _scope, index = _IFADDRMSG.unpack_from(data, body)
            attrs = _attributes(data, body + _IFADDRMSG.size, pos + length)
            if _IFA_FLAGS in attrs and len(attrs[_IFA_FLAGS]) == _FLAGS.size:
                flags = _FLAGS.unpack(attrs[_IFA_FLAGS])[0]
            raw = attrs.get(_IFA_LOCAL) if family == socket.AF_INET else None
            address = _address(family, raw or attrs.get(_IFA_ADDRESS))
            if address is not None:
                secondary = family == socket.AF_INET and bool(flags & _IFA_F_SECONDARY)
                found.append(InterfaceAddress(index, family, address, secondary))
        pos += _align(length)
    return found, False


def interface_addresses(timeout: float = 2.0) -> list[InterfaceAddress]:
    """Every IPv4 and IPv6 address of the host; empty when rtnetlink is not there."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    except (OSError, AttributeError):
        return []
    with sock:
        sock.settimeout(timeout)
        sequence = int.from_bytes(os.urandom(4), "little")
        request = _NLMSG.pack(_NLMSG.size + 8, _RTM_GETADDR, _NLM_F_REQUEST | _NLM_F_DUMP,
                              sequence, 0) + struct.pack("=B3xI", socket.AF_UNSPEC, 0)
        found: list[InterfaceAddress] = []
        received = 0
        try:
            sock.send(request)
            while received < _MAX_REPLY:
                data = sock.recv(65536)
                if not data:
                    break
                received += len(data)
                more, done = parse_dump(data)
                found.extend(more)
                if done:
                    break
        except OSError:
            return found
        return found
