"""Headers and signatures for tests that pack and parse RAET packets by hand."""

from __future__ import annotations

from typing import Any

from raetsalt.wire import BodyKind, CoatKind, FootKind, Header, PacketKind, TransactionKind

# What a signing function returns in tests that do not check signatures.
SIGNATURE = bytes(range(64))


def fake_sign(message: bytes) -> bytes:
    """A signing function for ``pack_packet``: checks it was handed the zeroed foot."""
    assert message.endswith(b"\0" * 64)
    return SIGNATURE


def sealed_header(**fields: Any) -> Header:
    """The header of a packet inside a session: JSON body, NaCl coat and NaCl foot;
    ``fields`` set the rest (ids, flags, kinds, segment fields) or override these."""
    defaults: dict[str, Any] = {
        "body_kind": BodyKind.JSON,
        "coat_kind": CoatKind.NACL,
        "foot_kind": FootKind.NACL,
    }
    return Header(**{**defaults, **fields})


def join_header(packet_kind: PacketKind, **fields: Any) -> Header:
    """The header of a join packet (``tk`` 1, JSON body, plaintext and unsigned as every
    join packet); ``fields`` set the ids, flags and the rest."""
    return Header(packet_kind=packet_kind, transaction_kind=TransactionKind.JOIN,
                  body_kind=BodyKind.JSON, **fields)


def forged_busy(answered: Header) -> bytes:
    """An unsigned BUSY (retry in 10 s) that mirrors the handshake packet ``answered``:
    what an attacker who sees a minion's handshakes can forge."""
    from raetsalt.wire.enums import Flag
    from raetsalt.wire.packet import pack_packet

    busy = Header(
        packet_kind=PacketKind.BUSY, transaction_kind=answered.transaction_kind,
        source_uid=answered.destination_uid, destination_uid=answered.source_uid,
        session_id=answered.session_id, transaction_id=answered.transaction_id,
        flags=Flag.CF, foot_kind=FootKind.NADA, message_length=10_000,
    )
    return bytes(pack_packet(busy, b""))
