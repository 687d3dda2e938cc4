"""Lane pages: the datagrams yards exchange over Unix-domain sockets (docs/raet-wire.md §9).

A page is a text head followed by a body section.  The head has the nine fields raet
0.6.8 writes, always all of them and always in this order::

    ri RAET\\n            literal
    vn 0\\n               version, hex
    pk <k>\\n             pack kind, hex: 0 JSON, 1 msgpack
    sn <source yard>\\n
    dn <destination yard>\\n
    si <session id>\\n    the sender's session with this destination
    bi <book id>\\n       message number, hex, per destination, 1..0xffffffff
    pn <page number>\\n   4 hex digits
    pc <page count>\\n    4 hex digits
    \\n

A message whose serialized body does not fit in one page is cut into sections that all
carry the same si/bi with pn = 0..pc-1; the receiver joins the sections (see
``Reassembly`` in ``raetsalt.lane.engine``) and then decodes the body.

Where raetsalt is stricter than raet: the parser accepts only that exact field order,
lower-case hex, names from ``[A-Za-z0-9_-]`` (no dots: the yard name is what follows the
last dot of the socket file name), ``pn < pc`` and a page count bounded by the caller.
Everything a peer sends goes through ``parse_page_untrusted`` and
``decode_body_untrusted``, which raise only ``BadPacket``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

import msgpack

from raetsalt.errors import BadPacket, LocalError

# raet's UXD_MAX_PACKET_SIZE.  Linux takes larger AF_UNIX datagrams, but a page this size
# always fits the default socket buffers, and raet peers expect it.
MAX_PAGE_SIZE = 65535
# pn/pc are four hex digits on the wire.
MAX_PAGE_COUNT = 0xFFFF
MAX_BOOK_ID = 0xFFFFFFFF
# A yard or lane name: short, and free of the characters that carry meaning in a socket
# file name ('.' separates lane and yard, '/' directories) or in the head (' ', '\n').
NAME_PATTERN = r"[A-Za-z0-9_-]{1,40}"
_NAME_RE = re.compile(NAME_PATTERN)

_HEAD_RE = re.compile(
    rb"ri RAET\nvn 0\npk ([01])\nsn (" + NAME_PATTERN.encode() + rb")\ndn ("
    + NAME_PATTERN.encode()
    + rb")\nsi ([0-9A-Za-z]{1,32})\nbi ([0-9a-f]{1,8})\npn ([0-9a-f]{4})\npc ([0-9a-f]{4})\n\n"
)


class PackKind(IntEnum):
    """How a page body is serialized (raet ``PackKind``)."""

    JSON = 0
    MSGPACK = 1


class PageDropReason(StrEnum):
    """Stable trigger strings for dropped pages (``BadPacket.trigger`` and lane counters)."""

    TOO_LARGE = "page_too_large"
    BAD_HEAD = "bad_head"
    BAD_PAGE_NUMBER = "bad_page_number"
    BAD_BODY = "bad_body"
    UNBOUND_SENDER = "unbound_sender"
    SPOOFED_SOURCE = "spoofed_source"
    WRONG_DESTINATION = "wrong_destination"
    WRONG_LANE = "wrong_lane"
    NAME_CONFLICT = "yard_name_conflict"
    UNACCEPTED = "unaccepted_yard"
    DUPLICATE_PAGE = "duplicate_page"
    BOOK_MISMATCH = "book_mismatch"
    TOO_MANY_BOOKS = "too_many_books"
    BOOK_TOO_LARGE = "book_too_large"
    BOOK_EXPIRED = "book_expired"
    YARD_BOOKS_FULL = "yard_books_full"  # one source's open books hold their cap
    LANE_BOOKS_FULL = "lane_books_full"  # all open books together hold the lane's cap
    STALE_SESSION = "stale_session"


_PACK_KINDS = {b"0": PackKind.JSON, b"1": PackKind.MSGPACK}


@dataclass(frozen=True, slots=True)
class Page:
    """One parsed page; ``section`` is this page's slice of the serialized body."""

    pack_kind: PackKind
    source: str
    destination: str
    session_id: str
    book_id: int
    page_number: int
    page_count: int
    section: bytes


def check_name(name: str, what: str = "yard name") -> str:
    """Return ``name`` if it may be used as a lane or yard name, else raise LocalError."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise LocalError(f"invalid {what} {name!r}: use 1-40 characters from [A-Za-z0-9_-]")
    return name


def encode_head(
    *,
    pack_kind: PackKind,
    source: str,
    destination: str,
    session_id: str,
    book_id: int,
    page_number: int = 0,
    page_count: int = 1,
) -> bytes:
    """Page head exactly as raet 0.6.8 writes it (names are not re-checked here)."""
    return (
        f"ri RAET\nvn 0\npk {pack_kind:x}\nsn {source}\ndn {destination}\nsi {session_id}\n"
        f"bi {book_id:x}\npn {page_number:04x}\npc {page_count:04x}\n\n"
    ).encode("ascii")


def paginate(
    body: bytes,
    *,
    pack_kind: PackKind,
    source: str,
    destination: str,
    session_id: str,
    book_id: int,
    max_page_size: int = MAX_PAGE_SIZE,
    max_page_count: int = MAX_PAGE_COUNT,
) -> list[bytes]:
    """Cut an already serialized body into pages; one page when it fits.

    Raises LocalError when the message would need more than ``max_page_count`` pages.
    """
    head = encode_head(
        pack_kind=pack_kind,
        source=source,
        destination=destination,
        session_id=session_id,
        book_id=book_id,
    )
    if len(head) + len(body) <= max_page_size:
        return [head + body]
    # pn and pc have a fixed width, so every page of the book has a head this long.
    room = max_page_size - len(head)
    if room <= 0:
        raise LocalError(f"page size {max_page_size} leaves no room for a body")
    count = -(-len(body) // room)
    if count > max_page_count:
        raise LocalError(
            f"message of {len(body)} bytes needs {count} pages, more than {max_page_count}"
        )
    prefix = head[: head.index(b"\npn ") + 1]
    tail = f"pc {count:04x}\n\n".encode("ascii")
    return [
        prefix + f"pn {n:04x}\n".encode("ascii") + tail + body[n * room : (n + 1) * room]
        for n in range(count)
    ]


PageFields = tuple[PackKind, str, str, str, int, int, int, int]
"""(pack kind, source, destination, session id, book id, page number, page count, offset
of the section): a parsed head without building a ``Page``, for the lane's hot path."""


def parse_head_untrusted(
    data: bytes,
    *,
    max_page_size: int = MAX_PAGE_SIZE,
    max_page_count: int = MAX_PAGE_COUNT,
) -> PageFields:
    """Parse and check a received datagram's head.  Raises only BadPacket."""
    if len(data) > max_page_size:
        raise BadPacket(f"page of {len(data)} bytes exceeds {max_page_size}",
                        PageDropReason.TOO_LARGE)
    match = _HEAD_RE.match(data)
    if match is None:
        raise BadPacket("unrecognised page head", PageDropReason.BAD_HEAD)
    pk, sn, dn, si, bi, pn, pc = match.groups()
    page_number = int(pn, 16)
    page_count = int(pc, 16)
    if page_count == 0 or page_number >= page_count or page_count > max_page_count:
        raise BadPacket(f"page {page_number} of {page_count}", PageDropReason.BAD_PAGE_NUMBER)
    return (
        _PACK_KINDS[pk],
        sn.decode("ascii"),
        dn.decode("ascii"),
        si.decode("ascii"),
        int(bi, 16),
        page_number,
        page_count,
        match.end(),
    )


def parse_page_untrusted(
    data: bytes,
    *,
    max_page_size: int = MAX_PAGE_SIZE,
    max_page_count: int = MAX_PAGE_COUNT,
) -> Page:
    """Parse one received datagram.  Raises only BadPacket (with a PageDropReason trigger)."""
    kind, source, destination, session_id, book_id, number, count, offset = parse_head_untrusted(
        data, max_page_size=max_page_size, max_page_count=max_page_count
    )
    return Page(
        pack_kind=kind,
        source=source,
        destination=destination,
        session_id=session_id,
        book_id=book_id,
        page_number=number,
        page_count=count,
        section=data[offset:],
    )


def encode_body(value: Mapping[str, Any], pack_kind: PackKind = PackKind.MSGPACK) -> bytes:
    """Serialize a message body (a mapping).  raet writes an empty mapping as no bytes."""
    if not value:
        return b""
    if pack_kind is PackKind.MSGPACK:
        packed: bytes = msgpack.packb(value, use_bin_type=True)
        return packed
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def decode_body_untrusted(data: bytes, pack_kind: PackKind) -> dict[str, Any]:
    """Decode a complete body; it must be a mapping.  Raises only BadPacket."""
    if not data:
        return {}
    # msgpack and json raise a spread of exception types on hostile input (ValueError,
    # TypeError for unhashable keys, ExtraData, recursion limits); all of them mean the
    # same thing here: drop the message.
    try:
        if pack_kind is PackKind.MSGPACK:
            value = msgpack.unpackb(data, raw=False, strict_map_key=False)
        else:
            value = json.loads(data)
    except Exception as exc:  # noqa: BLE001 - see comment above
        reason = f"undecodable body: {exc.__class__.__name__}"
        raise BadPacket(reason, PageDropReason.BAD_BODY) from None
    if not isinstance(value, dict):
        raise BadPacket("body is not a mapping", PageDropReason.BAD_BODY)
    return value
