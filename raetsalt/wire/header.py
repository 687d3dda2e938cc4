"""The packet head: an in-memory ``Header`` and its two wire encodings.

Text head (head kind 0, docs/raet-wire.md §3.1), one ``key value`` line per field::

    ri RAET\\n            always, first
    pl 0101\\n            packet length, %04x (the last 4 digits are kept)
    hl 36\\n              head length including the terminator, %02x
    fg 00\\n              flags byte, 2 hex digits
    pk 4\\n ... fl 40\\n  the other fields, fixed order, only when not the default
    \\n                   the empty line: the head ends in b"\\n\\n"

JSON head (head kind 1, §3.2): the same keys, order and omission rule as one compact
JSON object, ``pl`` as a 7-hex-digit string, ``hl`` and ``fg`` as 2-hex-digit strings,
``"hk":1`` present, followed by ``b"\\r\\n\\r\\n"``.

Two-letter keys exist only in this module; the rest of raetsalt uses ``Header``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire.constants import (
    HEAD_END,
    JSON_HEAD_END,
    JSON_HEAD_PREFIX,
    MAX_HEAD_SIZE,
    MAX_UINT32,
    RAET_HEAD_PREFIX,
    SIGNATURE_SIZE,
    VERSION,
)
from raetsalt.wire.enums import (
    BodyKind,
    CoatKind,
    Flag,
    FootKind,
    HeadKind,
    PacketKind,
    TransactionKind,
)

__all__ = ["Header", "encode_header", "parse_header_untrusted", "foot_length"]


@dataclass(frozen=True, slots=True)
class Header:
    """Every head field raetsalt uses, with raet's defaults.

    ``pl``, ``hl``, ``fl`` and ``vn`` are not stored: they follow from the packet
    (lengths) or are constant (version 0).  ``dt`` and ``oi`` are never set by raet and
    are ignored when received.
    """

    packet_kind: PacketKind = PacketKind.MESSAGE  # pk
    transaction_kind: TransactionKind = TransactionKind.MESSAGE  # tk
    source_uid: int = 0  # se
    destination_uid: int = 0  # de
    session_id: int = 0  # si
    transaction_id: int = 0  # ti
    flags: Flag = Flag(0)  # fg
    segment_number: int = 0  # sn
    segment_count: int = 1  # sc
    message_length: int = 0  # ml
    body_kind: BodyKind = BodyKind.NADA  # bk
    coat_kind: CoatKind = CoatKind.NADA  # ck
    foot_kind: FootKind = FootKind.NADA  # fk
    head_kind: HeadKind = HeadKind.RAET  # hk


def foot_length(header: Header) -> int:
    """Bytes of foot a packet with this header carries (0, or 64 for a signature)."""
    return SIGNATURE_SIZE if header.foot_kind == FootKind.NACL else 0


# --- encoding --------------------------------------------------------------------

# "ri RAET\npl XXXX\nhl XX\nfg XX": the fixed-width start of every text head.
_RAET_FIXED_LENGTH = 27
# '{"ri":"RAET","pl":"XXXXXXX","hl":"XX","fg":"XX"': the same for JSON heads.
_JSON_FIXED_LENGTH = 47


def _optional_fields(header: Header, foot_len: int) -> list[tuple[str, int]]:
    # The fields after ``fg``, in raet's order (raeting.PACKET_DEFAULTS: vn pk hk se de
    # si ti tk dt oi sn sc ml bk ck fk fl), each only when it differs from its default.
    # vn is always 0, and dt/oi are never set, so they never appear.
    h = header
    fields: list[tuple[str, int]] = []
    if h.packet_kind:
        fields.append(("pk", int(h.packet_kind)))
    if h.head_kind:
        fields.append(("hk", int(h.head_kind)))
    if h.source_uid:
        fields.append(("se", h.source_uid))
    if h.destination_uid:
        fields.append(("de", h.destination_uid))
    if h.session_id:
        fields.append(("si", h.session_id))
    if h.transaction_id:
        fields.append(("ti", h.transaction_id))
    if h.transaction_kind:
        fields.append(("tk", int(h.transaction_kind)))
    if h.segment_number:
        fields.append(("sn", h.segment_number))
    if h.segment_count != 1:
        fields.append(("sc", h.segment_count))
    if h.message_length:
        fields.append(("ml", h.message_length))
    if h.body_kind:
        fields.append(("bk", int(h.body_kind)))
    if h.coat_kind:
        fields.append(("ck", int(h.coat_kind)))
    if h.foot_kind:
        fields.append(("fk", int(h.foot_kind)))
    if foot_len:
        fields.append(("fl", foot_len))
    return fields


def _check_encodable(header: Header) -> None:
    h = header
    for value in (
        h.source_uid,
        h.destination_uid,
        h.session_id,
        h.transaction_id,
        h.segment_number,
        h.segment_count,
        h.message_length,
    ):
        if not 0 <= value <= MAX_UINT32:
            raise LocalError(f"head field value {value!r} is not a 32-bit unsigned integer")
    if not 0 <= h.flags <= 0xFF:
        raise LocalError(f"flags {h.flags!r} do not fit one byte")


def encode_header(header: Header, coat_length: int, foot_len: int) -> bytes:
    """The head bytes, with ``pl``/``hl``/``fl`` filled in, exactly as raet 0.6.8 writes them.

    ``pl`` is written as the last 4 (text) or 7 (JSON) hex digits of the packet length,
    as raet does, so the head length never depends on the lengths it records.

    Raises ``LocalError`` for a binary head kind, out-of-range field values or a head
    longer than 255 bytes.
    """
    _check_encodable(header)
    fields = _optional_fields(header, foot_len)
    flags = int(header.flags)
    if header.head_kind == HeadKind.RAET:
        tail = "".join([f"\n{key} {value:x}" for key, value in fields])
        head_length = _RAET_FIXED_LENGTH + len(tail) + len(HEAD_END)
        if head_length > MAX_HEAD_SIZE:
            raise LocalError(f"head length {head_length} exceeds {MAX_HEAD_SIZE}")
        packet_length = head_length + coat_length + foot_len
        pl = f"{packet_length:04x}"[-4:]
        text = f"ri RAET\npl {pl}\nhl {head_length:02x}\nfg {flags:02x}{tail}\n\n"
        return text.encode("ascii")
    if header.head_kind == HeadKind.JSON:
        tail = "".join([f',"{key}":{value}' for key, value in fields])
        head_length = _JSON_FIXED_LENGTH + len(tail) + 1 + len(JSON_HEAD_END)
        if head_length > MAX_HEAD_SIZE:
            raise LocalError(f"head length {head_length} exceeds {MAX_HEAD_SIZE}")
        packet_length = head_length + coat_length + foot_len
        pl = f"{packet_length:07x}"[-7:]
        text = (
            f'{{"ri":"RAET","pl":"{pl}","hl":"{head_length:02x}","fg":"{flags:02x}"'
            f"{tail}}}\r\n\r\n"
        )
        return text.encode("ascii")
    raise LocalError(f"head kind {header.head_kind!r} cannot be encoded")


def head_size(header: Header) -> int:
    """Length in bytes of the head ``encode_header`` would write for this header."""
    fields = _optional_fields(header, foot_length(header))
    if header.head_kind == HeadKind.RAET:
        return (
            _RAET_FIXED_LENGTH
            + sum(4 + len(f"{value:x}") for _, value in fields)
            + len(HEAD_END)
        )
    if header.head_kind == HeadKind.JSON:
        return (
            _JSON_FIXED_LENGTH
            + sum(6 + len(str(value)) for _, value in fields)
            + 1
            + len(JSON_HEAD_END)
        )
    raise LocalError(f"head kind {header.head_kind!r} cannot be encoded")


# --- parsing ---------------------------------------------------------------------

# Hex numbers: 1-8 digits, nothing else.  int(x, 16) alone would also accept a sign,
# "0x", underscores and surrounding white space.
_HEX_RE = re.compile(r"[0-9a-fA-F]{1,8}")
_FLAGS_RE = re.compile(r"[0-9a-fA-F]{2}")
# dt is written with "%f"; raet never sets it, it is accepted and ignored.
_FLOAT_RE = re.compile(r"[0-9]{1,20}(?:\.[0-9]{0,20})?")

_NUMERIC_KEYS = frozenset(
    ["vn", "pk", "pl", "hk", "hl", "se", "de", "si", "ti", "tk", "oi", "sn", "sc", "ml",
     "bk", "ck", "fk", "fl"]
)  # fmt: skip

_PACKET_KINDS = {int(kind): kind for kind in PacketKind}
_TRANSACTION_KINDS = {int(kind): kind for kind in TransactionKind}
_BODY_KINDS = {int(kind): kind for kind in BodyKind}
_COAT_KINDS = {int(kind): kind for kind in CoatKind}
_FOOT_KINDS = {int(kind): kind for kind in FootKind}
_FLAGS = [Flag(value) for value in range(256)]


def _bad(message: str, trigger: DropReason = DropReason.HEADER) -> BadPacket:
    return BadPacket(message, trigger)


# Fast path: a head in exactly raet's field order (what every raet and raetsalt sender
# writes) is matched by one regular expression.  Anything else (other order, dt/oi
# lines, unknown keys, garbage) falls through to the line-by-line parser, which also
# produces the precise error.
_CANONICAL_KEYS = ("pl", "hl", "fg", "vn", "pk", "hk", "se", "de", "si", "ti", "tk",
                   "sn", "sc", "ml", "bk", "ck", "fk", "fl")  # fmt: skip
_CANONICAL_RE = re.compile(
    rb"ri RAET\npl ([0-9a-fA-F]{1,8})\nhl ([0-9a-fA-F]{1,8})\nfg ([0-9a-fA-F]{2})"
    + b"".join(
        rb"(?:\n" + key.encode() + rb" ([0-9a-fA-F]{1,8}))?" for key in _CANONICAL_KEYS[3:]
    )
    + rb"\n\n"
)


def _parse_raet_fields(head: bytes) -> dict[str, int]:
    match = _CANONICAL_RE.fullmatch(head)
    if match is not None:
        fields = {
            key: int(value, 16)
            for key, value in zip(_CANONICAL_KEYS, match.groups(), strict=True)
            if value is not None
        }
        fields["ri"] = 0
        return fields
    return _parse_raet_lines(head)


def _parse_raet_lines(head: bytes) -> dict[str, int]:
    try:
        text = head[: -len(HEAD_END)].decode("ascii")
    except UnicodeDecodeError:
        raise _bad("head is not ASCII") from None
    fields: dict[str, int] = {}
    for line in text.split("\n"):
        key, space, value = line.partition(" ")
        if not space:
            raise _bad(f"head line {line[:20]!r} has no value")
        if key in fields:
            raise _bad(f"head field {key!r} repeated")
        if key in _NUMERIC_KEYS:
            if _HEX_RE.fullmatch(value) is None:
                raise _bad(f"head field {key!r} is not a 32-bit hex number")
            fields[key] = int(value, 16)
        elif key == "fg":
            if _FLAGS_RE.fullmatch(value) is None:
                raise _bad("head field 'fg' is not 2 hex digits")
            fields[key] = int(value, 16)
        elif key == "ri":
            if value != "RAET":
                raise _bad("head field 'ri' is not RAET")
            fields[key] = 0
        elif key == "dt":
            if _FLOAT_RE.fullmatch(value) is None:
                raise _bad("head field 'dt' is not a decimal number")
            fields[key] = 0
        else:
            # raet knows a few more keys (bl, cl, flag names) but never sends them.
            raise _bad(f"unknown head field {key[:20]!r}")
    return fields


def _reject_pairs_with_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise _bad("JSON head repeats a field")
    return fields


def _reject_constant(name: str) -> Any:
    raise _bad(f"JSON head contains {name}")


def _parse_json_fields(head: bytes) -> dict[str, int]:
    try:
        raw = json.loads(
            head[: -len(JSON_HEAD_END)].decode("ascii"),
            object_pairs_hook=_reject_pairs_with_duplicates,
            parse_constant=_reject_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _bad("JSON head does not parse") from None
    if not isinstance(raw, dict):
        raise _bad("JSON head is not an object")
    fields: dict[str, int] = {}
    for key, value in raw.items():
        if key in ("pl", "hl", "fg"):
            # Lengths and flags are hex strings so their width never changes (§3.2).
            if not isinstance(value, str) or _HEX_RE.fullmatch(value) is None:
                raise _bad(f"JSON head field {key!r} is not a hex string")
            if key == "fg" and len(value) != 2:
                raise _bad("JSON head field 'fg' is not 2 hex digits")
            fields[key] = int(value, 16)
        elif key in _NUMERIC_KEYS:
            if type(value) is not int or not 0 <= value <= MAX_UINT32:
                raise _bad(f"JSON head field {key!r} is not a 32-bit unsigned integer")
            fields[key] = value
        elif key == "ri":
            if value != "RAET":
                raise _bad("JSON head field 'ri' is not RAET")
            fields[key] = 0
        elif key == "dt":
            if type(value) not in (int, float):
                raise _bad("JSON head field 'dt' is not a number")
            fields[key] = 0
        else:
            raise _bad(f"unknown JSON head field {key[:20]!r}")
    return fields


def _kind(table: dict[int, Any], fields: dict[str, int], key: str) -> Any:
    value = fields.get(key, 0)
    kind = table.get(value)
    if kind is None:
        raise _bad(f"head field {key!r} has unknown kind {value}")
    return kind


def parse_header_untrusted(datagram: bytes) -> tuple[Header, int, int]:
    """Parse and check the head at the start of ``datagram`` (docs/raet-wire.md §3.1/3.2).

    Returns ``(header, head_length, foot_length)``.  Checks, beyond well-formedness:
    ``hl`` equals the real head length, ``pl`` equals ``len(datagram)``, ``vn`` is 0,
    ``hk`` matches the detected head kind, and the foot length fits the foot kind
    (64 for nacl, 0 otherwise) and the datagram.

    Raises only ``BadPacket``; triggers: ``"header"`` (malformed or unsupported
    head), ``"length"`` (``hl``/``pl`` disagree with the bytes), ``"foot"``.
    """
    if datagram.startswith(RAET_HEAD_PREFIX):
        head_kind = HeadKind.RAET
        # The terminator must end within the first 255 bytes (hl has two hex digits).
        end = datagram.find(HEAD_END, 0, MAX_HEAD_SIZE)
        if end < 0:
            raise _bad("no head terminator within 255 bytes")
        head_length = end + len(HEAD_END)
        fields = _parse_raet_fields(datagram[:head_length])
    elif datagram.startswith(JSON_HEAD_PREFIX):
        head_kind = HeadKind.JSON
        end = datagram.find(JSON_HEAD_END, 0, MAX_HEAD_SIZE)
        if end < 0:
            raise _bad("no JSON head terminator within 255 bytes")
        head_length = end + len(JSON_HEAD_END)
        fields = _parse_json_fields(datagram[:head_length])
    else:
        raise _bad("not a RAET packet head")

    for required in ("ri", "pl", "hl", "fg"):
        if required not in fields:
            raise _bad(f"head lacks field {required!r}")
    if fields.get("hk", 0) != head_kind:
        raise _bad("head field 'hk' does not match the head's format")
    if fields["hl"] != head_length:
        raise _bad(
            f"head length field {fields['hl']} != actual {head_length}", DropReason.LENGTH
        )
    if fields["pl"] != len(datagram):
        raise _bad(
            f"packet length field {fields['pl']} != actual {len(datagram)}", DropReason.LENGTH
        )
    if fields.get("vn", 0) != VERSION:
        raise _bad(f"unsupported version {fields['vn']}")

    foot_kind = _kind(_FOOT_KINDS, fields, "fk")
    foot_len = fields.get("fl", 0)
    expected_foot = SIGNATURE_SIZE if foot_kind == FootKind.NACL else 0
    if foot_len != expected_foot:
        raise _bad(
            f"foot length {foot_len} does not fit foot kind {foot_kind.name}", DropReason.FOOT
        )
    if head_length + foot_len > len(datagram):
        raise _bad("packet too short for its foot", DropReason.FOOT)

    get = fields.get
    header = Header(
        packet_kind=_kind(_PACKET_KINDS, fields, "pk"),
        transaction_kind=_kind(_TRANSACTION_KINDS, fields, "tk"),
        source_uid=get("se", 0),
        destination_uid=get("de", 0),
        session_id=get("si", 0),
        transaction_id=get("ti", 0),
        flags=_FLAGS[fields["fg"]],
        segment_number=get("sn", 0),
        segment_count=get("sc", 1),
        message_length=get("ml", 0),
        body_kind=_kind(_BODY_KINDS, fields, "bk"),
        coat_kind=_kind(_COAT_KINDS, fields, "ck"),
        foot_kind=foot_kind,
        head_kind=head_kind,
    )
    return header, head_length, foot_len
