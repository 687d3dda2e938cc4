"""The msgpack depth limit holds on each path of its cheap pre-check.

``_decode_msgpack`` skips the exact walk when counting container-header bytes already
bounds the depth; these bodies sit on both sides of the limit, for short bodies, bodies
counted byte by byte, and bodies long enough to go straight to the walk.
"""

from __future__ import annotations

import msgpack
import pytest

from raetsalt.errors import BadPacket
from raetsalt.wire.body import decode_body_untrusted
from raetsalt.wire.constants import MAX_BODY_DEPTH
from raetsalt.wire.enums import BodyKind


def _nested(depth: int, *, pad: int = 0, leaf: object = 1) -> bytes:
    """A map whose value is nested ``depth`` containers deep in total (the map counts)."""
    value: object = leaf
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return bytes(msgpack.packb({"a": value, "pad": "x" * pad}))


@pytest.mark.parametrize("pad", [0, 1000, 70_000])
def test_depth_at_the_limit_is_accepted(pad: int) -> None:
    body = decode_body_untrusted(BodyKind.MSGPACK, _nested(MAX_BODY_DEPTH, pad=pad))
    assert len(body["pad"]) == pad


@pytest.mark.parametrize("pad", [0, 1000, 70_000])
def test_one_deeper_is_refused(pad: int) -> None:
    with pytest.raises(BadPacket):
        decode_body_untrusted(BodyKind.MSGPACK, _nested(MAX_BODY_DEPTH + 1, pad=pad))


def test_wide_16_bit_containers_count_too() -> None:
    # array16 (0xdc) and map16 (0xde) headers, nested past the limit.
    data = b"\x81\xa1a" + b"\xdc\x00\x01" * MAX_BODY_DEPTH + b"\xde\x00\x00"
    with pytest.raises(BadPacket):
        decode_body_untrusted(BodyKind.MSGPACK, data)


def test_header_like_bytes_in_strings_do_not_refuse_a_flat_body() -> None:
    # Many 0x80..0x9f bytes inside a bin value: the count is high, the walk says flat.
    value = {"b": bytes(range(0x80, 0xA0)) * 50}
    assert decode_body_untrusted(BodyKind.MSGPACK, msgpack.packb(value)) == value
