"""Allow handshake body layouts (docs/raet-wire.md §8.2)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire import allow


def _bytes(size: int, fill: int) -> bytes:
    return bytes([fill]) * size


def test_hello_layout() -> None:
    body = allow.pack_hello(_bytes(32, 1), _bytes(80, 2), _bytes(24, 3))
    assert len(body) == allow.HELLO_SIZE == 200
    assert body == b"0" * 64 + _bytes(32, 1) + _bytes(80, 2) + _bytes(24, 3)
    hello = allow.unpack_hello_untrusted(body)
    assert hello == allow.Hello(allow.HELLO_PLAIN, _bytes(32, 1), _bytes(80, 2), _bytes(24, 3))
    assert allow.HELLO_PLAIN == bytes(32).hex().encode()


def test_cookie_layout() -> None:
    body = allow.pack_cookie(_bytes(80, 4), _bytes(24, 5))
    assert len(body) == allow.COOKIE_SIZE == 104
    assert allow.unpack_cookie_untrusted(body) == allow.Cookie(_bytes(80, 4), _bytes(24, 5))


def test_cookie_stuff_ids_are_big_endian_uint32() -> None:
    stuff = allow.pack_cookie_stuff(_bytes(32, 6), 2, 0x01020304, _bytes(24, 7))
    assert len(stuff) == allow.COOKIE_STUFF_SIZE == 64
    assert stuff[32:40] == b"\x00\x00\x00\x02\x01\x02\x03\x04"
    assert allow.unpack_cookie_stuff_untrusted(stuff) == allow.CookieStuff(
        _bytes(32, 6), 2, 0x01020304, _bytes(24, 7)
    )


def test_initiate_layout() -> None:
    body = allow.pack_initiate(_bytes(32, 1), _bytes(24, 2), _bytes(248, 3), _bytes(24, 4))
    assert len(body) == allow.INITIATE_SIZE == 328
    assert body[32:56] == _bytes(24, 2) and body[304:] == _bytes(24, 4)
    assert allow.unpack_initiate_untrusted(body) == allow.Initiate(
        _bytes(32, 1), _bytes(24, 2), _bytes(248, 3), _bytes(24, 4)
    )


@pytest.mark.parametrize(
    ("fqdn", "on_wire", "back"),
    [
        (b"localhost", b"localhost" + b" " * 119, b"localhost"),
        (b"x" * 200, b"x" * 128, b"x" * 128),
        ("h\u00e9st.example", b"hst.example" + b" " * 117, b"hst.example"),
        (b"", b" " * 128, b""),
    ],
)
def test_initiate_stuff_fqdn_padding(fqdn: bytes | str, on_wire: bytes, back: bytes) -> None:
    stuff = allow.pack_initiate_stuff(_bytes(32, 1), _bytes(48, 2), _bytes(24, 3), fqdn)  # type: ignore[arg-type]
    assert len(stuff) == allow.INITIATE_STUFF_SIZE == 232
    assert stuff[104:] == on_wire
    assert allow.unpack_initiate_stuff_untrusted(stuff) == allow.InitiateStuff(
        _bytes(32, 1), _bytes(48, 2), _bytes(24, 3), back
    )


@pytest.mark.parametrize(
    ("unpack", "size"),
    [
        (allow.unpack_hello_untrusted, 200),
        (allow.unpack_cookie_untrusted, 104),
        (allow.unpack_cookie_stuff_untrusted, 64),
        (allow.unpack_initiate_untrusted, 328),
        (allow.unpack_initiate_stuff_untrusted, 232),
    ],
)
def test_unpack_wrong_length_is_bad_packet(unpack: object, size: int) -> None:
    for length in (0, size - 1, size + 1):
        with pytest.raises(BadPacket) as info:
            unpack(bytes(length))  # type: ignore[operator]
        assert info.value.trigger == "body"
    unpack(bytes(size))  # type: ignore[operator]


def test_pack_refuses_wrong_sizes() -> None:
    with pytest.raises(LocalError):
        allow.pack_hello(_bytes(31, 1), _bytes(80, 2), _bytes(24, 3))
    with pytest.raises(LocalError):
        allow.pack_cookie(_bytes(80, 1), _bytes(23, 2))
    with pytest.raises(LocalError):
        allow.pack_cookie_stuff(_bytes(32, 1), -1, 2, _bytes(24, 2))
    with pytest.raises(LocalError):
        allow.pack_cookie_stuff(_bytes(32, 1), 1, 1 << 32, _bytes(24, 2))
    with pytest.raises(LocalError):
        allow.pack_initiate(_bytes(32, 1), _bytes(24, 2), _bytes(247, 3), _bytes(24, 4))
    with pytest.raises(LocalError):
        allow.pack_initiate_stuff(_bytes(32, 1), _bytes(49, 2), _bytes(24, 3), b"h")


@given(st.binary(min_size=64, max_size=64))
def test_cookie_stuff_any_64_bytes_unpack(stuff: bytes) -> None:
    parsed = allow.unpack_cookie_stuff_untrusted(stuff)
    assert (parsed.near_uid, parsed.far_uid) == struct.unpack("!LL", stuff[32:40])
    assert allow.pack_cookie_stuff(*parsed) == stuff
