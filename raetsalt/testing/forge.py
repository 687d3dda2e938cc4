"""Datagrams an attacker can make without any secret: unsigned join requests.

A join carries only public keys (which are public: any earlier join shows them, and so
does the keep's role file), so anyone can send one with any name and any keys.  Tests
use these to check that such a datagram changes nothing it must not.
"""

from __future__ import annotations

import os

from raetsalt.wire.body import encode_body
from raetsalt.wire.enums import BodyKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet


def random_key_hex() -> str:
    """64 hex characters that look like a key (any 32 bytes pass the join parser)."""
    return os.urandom(32).hex()


def join_request(
    name: str,
    *,
    verhex: str | None = None,
    pubhex: str | None = None,
    role: str | None = None,
    source_uid: int = 7,
    destination_uid: int = 0,
    tid: int = 1,
    main: bool = False,
) -> bytes:
    """An unsigned raet join request (``destination_uid`` 0: vacuous) for ``name``."""
    header = Header(
        packet_kind=PacketKind.REQUEST,
        transaction_kind=TransactionKind.JOIN,
        source_uid=source_uid,
        destination_uid=destination_uid,
        transaction_id=tid,
        body_kind=BodyKind.JSON,
    )
    body = {
        "name": name,
        "mode": 1 if main else 0,
        "kind": 0,
        "verhex": verhex or random_key_hex(),
        "pubhex": pubhex or random_key_hex(),
        "role": name if role is None else role,
    }
    return pack_packet(header, encode_body(BodyKind.JSON, body))
