"""RAET wire format: enumerations, heads, packet framing, bodies and allow layouts.

Pure byte-level code: no sockets, no clocks, no crypto (signing is passed in as a
function).  Everything that reads peer bytes is named ``*_untrusted`` and raises only
``raetsalt.errors.BadPacket``.
"""

from __future__ import annotations

from raetsalt.wire.body import decode_body_untrusted, encode_body
from raetsalt.wire.enums import (
    BodyKind,
    CoatKind,
    Flag,
    FootKind,
    HeadKind,
    PacketKind,
    TransactionKind,
)
from raetsalt.wire.header import Header
from raetsalt.wire.packet import (
    Packet,
    pack_packet,
    parse_packet_untrusted,
    segment_payload_size,
)

__all__ = [
    "BodyKind",
    "CoatKind",
    "Flag",
    "FootKind",
    "HeadKind",
    "Header",
    "Packet",
    "PacketKind",
    "TransactionKind",
    "decode_body_untrusted",
    "encode_body",
    "pack_packet",
    "parse_packet_untrusted",
    "segment_payload_size",
]
