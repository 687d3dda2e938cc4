"""Integer enumerations carried in RAET packet heads (docs/raet-wire.md §4).

The values are fixed by raet 0.6.8 and appear on the wire as hex digits, so they must
never be renumbered.  Kinds that raet declares but never implements (head kind
``binary`` aside, which the contract keeps for completeness; coat kinds crc16/crc64;
foot kinds sha2/crc64) are left out on purpose: a packet naming them is rejected
instead of being half-processed as raet does.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag


class TransactionKind(IntEnum):
    """Head field ``tk``: which transaction a packet belongs to."""

    MESSAGE = 0
    JOIN = 1
    BIND = 2
    ALLOW = 3
    ALIVE = 4
    UNKNOWN = 255


class PacketKind(IntEnum):
    """Head field ``pk``: the step inside a transaction."""

    MESSAGE = 0
    ACK = 1
    NACK = 2
    RESEND = 3
    REQUEST = 4
    RESPONSE = 5
    HELLO = 6
    COOKIE = 7
    INITIATE = 8
    UNJOINED = 9
    UNALLOWED = 10
    RENEW = 11
    REFUSE = 12
    REJECT = 13
    PEND = 14
    DONE = 15
    BUSY = 16
    """raetsalt only: a main too busy for a handshake now; come back later
    (``raetsalt.engine.busy``)."""
    UNKNOWN = 255


class HeadKind(IntEnum):
    """Head field ``hk``: text head (0), JSON head (1); ``BINARY`` cannot be encoded."""

    RAET = 0
    JSON = 1
    BINARY = 2


class BodyKind(IntEnum):
    """Head field ``bk``: how the (decrypted) body is serialised."""

    NADA = 0
    JSON = 1
    RAW = 2
    MSGPACK = 3


class CoatKind(IntEnum):
    """Head field ``ck``: whether the body is wrapped in a NaCl box."""

    NADA = 0
    NACL = 1


class FootKind(IntEnum):
    """Head field ``fk``: whether the packet carries an Ed25519 signature."""

    NADA = 0
    NACL = 1


class Flag(IntFlag):
    """Bits of the head field ``fg`` (bit 7 is the most significant).

    CF correspondent (sent by the non-initiator), BF broadcast, WF wait for ack,
    SF segment, AF again (retransmission), NF NAT, DF dynamic address, VF IPv6.
    """

    CF = 0x01
    BF = 0x02
    WF = 0x04
    SF = 0x08
    AF = 0x10
    NF = 0x20
    DF = 0x40
    VF = 0x80
