"""Framing of one RAET datagram: head, coat, foot (docs/raet-wire.md §2).

::

    +-----------------+------------------------------+----------------------+
    | head (hl bytes) | coat (pl - hl - fl bytes)    | foot (fl = 0 or 64)  |
    +-----------------+------------------------------+----------------------+
    |<----------------------------- pl bytes -------------------------------->|

The coat is the body, or the boxed body (``tag || cipher || nonce``), or one segment
of a boxed message stream; this module never looks inside it.  The foot is an Ed25519
signature over the whole packet with the foot replaced by 64 zero bytes.

Drop reasons raised by ``parse_packet_untrusted`` (``raetsalt.drops``): ``LENGTH`` (too big,
or ``pl``/``hl`` wrong), ``HEADER`` (malformed head), ``FOOT`` (foot does not
fit its kind).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire.constants import (
    MAX_PACKET_SIZE,
    SEGMENT_HEAD_EXTRA_JSON,
    SEGMENT_HEAD_EXTRA_RAET,
    SIGNATURE_SIZE,
)
from raetsalt.wire.enums import HeadKind
from raetsalt.wire.header import (
    Header,
    encode_header,
    foot_length,
    head_size,
    parse_header_untrusted,
)

__all__ = ["Packet", "pack_packet", "parse_packet_untrusted", "segment_payload_size"]

_BLANK_FOOT = b"\0" * SIGNATURE_SIZE


@dataclass(frozen=True, slots=True)
class Packet:
    """A received datagram split into its parts; ``header`` is the parsed head.

    The signature in ``foot`` is *not* verified here: the engine knows which key to
    verify it with (the remote named by ``header.destination_uid``).
    """

    header: Header
    head: bytes
    coat: bytes
    foot: bytes

    def signed_bytes(self) -> bytes:
        """The bytes the foot signs: ``head || coat || 0x00 * len(foot)``."""
        return b"".join((self.head, self.coat, b"\0" * len(self.foot)))


def pack_packet(
    header: Header,
    coat: bytes,
    sign: Callable[[bytes], bytes] | None = None,
    *,
    max_size: int = MAX_PACKET_SIZE,
) -> bytes:
    """Build the datagram for ``header`` and an already encrypted (or plain) ``coat``.

    With foot kind nacl, ``sign`` is called once with ``head || coat || 64 zero bytes``
    and must return the 64-byte signature, which then replaces the zeros.

    Raises ``LocalError`` if the packet would exceed ``max_size``, if ``sign`` is
    missing or returns the wrong length, or if the header cannot be encoded.
    """
    foot_len = foot_length(header)
    head = encode_header(header, len(coat), foot_len)
    size = len(head) + len(coat) + foot_len
    if size > max_size:
        raise LocalError(f"packet length {size} exceeds max of {max_size}")
    if not foot_len:
        return head + coat
    if sign is None:
        raise LocalError("foot kind nacl needs a sign function")
    unsigned = head + coat
    signature = sign(unsigned + _BLANK_FOOT)
    if len(signature) != SIGNATURE_SIZE:
        raise LocalError(f"sign returned {len(signature)} bytes, not {SIGNATURE_SIZE}")
    return unsigned + signature


def parse_packet_untrusted(data: bytes, *, max_size: int = MAX_PACKET_SIZE) -> Packet:
    """Split a received datagram into head, coat and foot and parse the head.

    Raises only ``BadPacket`` (see the module docstring for the triggers).
    """
    if len(data) > max_size:
        raise BadPacket(f"datagram of {len(data)} bytes exceeds {max_size}", DropReason.LENGTH)
    if type(data) is not bytes:
        data = bytes(data)
    header, head_length, foot_len = parse_header_untrusted(data)
    coat_end = len(data) - foot_len
    return Packet(
        header=header,
        head=data[:head_length],
        coat=data[head_length:coat_end],
        foot=data[coat_end:],
    )


def segment_payload_size(header: Header, *, max_size: int = MAX_PACKET_SIZE) -> int:
    """Coat-stream bytes per segment of a message whose unsegmented header is ``header``.

    This is raet's rule (road/packeting.py ``Tray.packetize``, docs/raet-wire.md §5):
    ``max_size - (unsegmented head length + 27 + foot length)``, with 36 instead of 27
    for JSON heads.  The segment fields of ``header`` are ignored, so the segments'
    own headers may be passed too.  A receiver must accept whatever sizes a sender
    chose; this only matters for sending byte-identical segments.
    """
    unsegmented = replace(header, segment_number=0, segment_count=1, message_length=0)
    extra = (
        SEGMENT_HEAD_EXTRA_JSON if header.head_kind == HeadKind.JSON else SEGMENT_HEAD_EXTRA_RAET
    )
    size = max_size - (head_size(unsegmented) + extra + foot_length(header))
    if size <= 0:
        raise LocalError(f"no room for a segment payload in {max_size}-byte packets")
    return size
