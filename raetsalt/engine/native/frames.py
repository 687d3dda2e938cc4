"""Every wire layout of the native profile, defined once (all integers big-endian).

The other modules of ``raetsalt.engine.native`` build and read datagrams only through
the names here; the compiled kernel (``raetsalt/_trains.c``) repeats the few it needs as
``#define``\\s, and ``tests/engine/native/test_frames_kernel.py`` checks that they agree.

**Negotiation marks** (inside the authenticated allow handshake, ``engine/allow.py``):
the responder's cookie ``oreo`` starts with ``OREO_MARK``, the initiator's fqdn field is
``FQDN_MARK``.  Both name the frame format's version (4): ends of different versions
talk raet's format.

**Datagram**::

    magic (2) = b"\\xf5\\x01" | receiver's uid for the sender (4) | counter (8) | box

``box`` is ``crypto_box_easy_afternm`` of the frames (``TAG`` bytes longer than them)
under the session key with the nonce ``NONCE``: the sender's direction byte
(``nonce_head``), 15 zero bytes, the counter.

**Frames** inside the box, one after another::

    DATA      0x01 | body kind (1) | stream (1) | seq (4) | total (4) | offset (4)
                   | length (2) | bytes
    ACK       0x02 | range count (1) | count x (first counter (8), last counter (8))
    LEAST     0x03 | counter (8): the sender no longer needs acks below this counter
    BATCH     0x04 | body kind (1) | stream (1) | first seq (4) | count (2)
                   | count x length (2) | the bodies of count whole messages
    ACK_NOW   0x05: acknowledge at once (alone in a packet: a presence probe)
    PATH_CHALLENGE 0x06 | token (8)        PATH_RESPONSE 0x07 | token (8)
    KEY_OFFER 0x08 | epoch (4) | public key (32)
    KEY_ACCEPT 0x09 | epoch (4) | public key (32)
    KEY_CONFIRM 0x0a | epoch (4)
    HINT      0x0b | milliseconds (4): how long the receiver may stay silent before it
                   probes the sender (``native/alive.py``; 0: its own period)

A bulk piece's datagram is ``LEAST`` + one ``DATA`` frame (+ ``ACK_NOW``): ``PIECE``
reads both heads at once; the kernels build and recognise exactly that layout.
"""

from __future__ import annotations

import struct

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket

OREO_MARK = b"RSnativ4"
"""The first 8 of the responder's 24 oreo bytes."""
FQDN_MARK = b"raetsalt-native/4"

MAGIC = b"\xf5\x01"
PREFIX = struct.Struct("!2sIQ")
"""magic, receiver's uid, counter."""
TAG = 16
"""Poly1305 tag: a box is this much longer than its frames."""
NONCE = struct.Struct("!16sQ")
"""direction byte + 15 zero bytes (``nonce_head``), counter."""
KEY_SIZE = 32
MAX_DATAGRAM = 65535

DATA_FRAME = 0x01
ACK_FRAME = 0x02
LEAST_FRAME = 0x03
BATCH_FRAME = 0x04
ACK_NOW_FRAME = 0x05
PATH_CHALLENGE_FRAME = 0x06
PATH_RESPONSE_FRAME = 0x07
KEY_OFFER_FRAME = 0x08
KEY_ACCEPT_FRAME = 0x09
KEY_CONFIRM_FRAME = 0x0A
HINT_FRAME = 0x0B

DATA_HEAD = struct.Struct("!BBBIIIH")
"""DATA: type, body kind, stream, seq, total length, offset, length; bytes follow."""
BATCH_HEAD = struct.Struct("!BBBIH")
"""BATCH: type, body kind, stream, first seq, count; then count lengths (2 bytes each),
then the bodies."""
BATCH_LENGTH = 2
"""Bytes of one message length in a BATCH frame."""
ACK_HEAD = struct.Struct("!BB")
"""ACK: type, range count; the ranges follow."""
RANGE = struct.Struct("!QQ")
"""One acknowledged range: first and last counter."""
ONE_RANGE = struct.Struct("!BBQQ")
"""An ACK frame with a single range (the usual case), read and built at once."""
LEAST = struct.Struct("!BQ")
LEAST_ACK = struct.Struct("!BQBBQQ")
"""LEAST and a one-range ACK, built at once."""
PIECE = struct.Struct("!BQ" + DATA_HEAD.format[1:])
"""LEAST then a DATA head: the frames of a bulk piece's datagram, read at once."""
ACK_NOW = bytes([ACK_NOW_FRAME])
PATH_FRAME = struct.Struct("!B8s")
"""PATH_CHALLENGE and PATH_RESPONSE: type, token."""
KEY_FRAME = struct.Struct("!BI32s")
"""KEY_OFFER and KEY_ACCEPT: type, epoch, public key."""
CONFIRM_FRAME = struct.Struct("!BI")
"""KEY_CONFIRM: type, epoch."""
HINT = struct.Struct("!BI")
"""HINT: type, milliseconds."""

EXPRESS = 0
BULK = 1
STREAMS = 2
"""Stream numbers: a DATA or BATCH frame of another stream is malformed."""
MAX_ACK_RANGES = 64
"""Ranges a receiver keeps and sends in one ACK frame (the newest)."""
ACK_DELAY = 0.001
"""Seconds a receiver holds the ack of a lone data packet for a reply to ride on (two are
acknowledged at once); the sender's probe time-out allows for it, as QUIC's
``max_ack_delay`` (``native/recovery.py``)."""
OVERHEAD = PREFIX.size + TAG + PIECE.size
"""Bytes of a bulk piece's datagram beyond its data."""

_LENGTHS: dict[int, struct.Struct] = {}
MAX_CACHED_COUNT = 1024
"""BATCH frames of at most this many messages have their lengths layout cached."""


def lengths_struct(count: int) -> struct.Struct:
    """The layout of ``count`` message lengths in a BATCH frame."""
    layout = _LENGTHS.get(count)
    if layout is None:
        layout = struct.Struct(f"!{count}H")
        if count <= MAX_CACHED_COUNT:
            _LENGTHS[count] = layout
    return layout


def nonce_head(initiator: bool) -> bytes:
    """The first 16 nonce bytes of the datagrams the allow's ``initiator`` (or its
    responder) seals: the direction byte differs, so the two never share a nonce."""
    return bytes([1 if initiator else 2]) + bytes(15)


def is_native(data: bytes) -> bool:
    return data[:2] == MAGIC


def parse_prefix_untrusted(data: bytes) -> tuple[int, int]:
    """(receiver uid, counter) of a native datagram."""
    if len(data) < PREFIX.size + TAG:
        raise BadPacket("native datagram too short", DropReason.MALFORMED)
    _, uid, counter = PREFIX.unpack_from(data)
    return uid, counter
