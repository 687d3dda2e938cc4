"""Body kinds: raet's JSON conventions, msgpack, raw, nada, and the decoding limits."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire import BodyKind, decode_body_untrusted, encode_body
from raetsalt.wire.constants import MAX_BODY_DEPTH


def _drop(kind: BodyKind, data: bytes, **kwargs: int) -> None:
    with pytest.raises(BadPacket) as info:
        decode_body_untrusted(kind, data, **kwargs)
    assert info.value.trigger == "body"


def test_json_is_compact_and_ascii_escaped_like_raet() -> None:
    body = OrderedDict([("z", 1), ("a", [1, 2]), ("msg", "h\u00e9 \u2603")])
    assert encode_body(BodyKind.JSON, body) == b'{"z":1,"a":[1,2],"msg":"h\\u00e9 \\u2603"}'


def test_empty_mapping_is_an_empty_body_and_back() -> None:
    assert encode_body(BodyKind.JSON, {}) == b""
    assert encode_body(BodyKind.MSGPACK, {}) == b""
    assert decode_body_untrusted(BodyKind.JSON, b"") == {}
    assert decode_body_untrusted(BodyKind.MSGPACK, b"") == {}


def test_decoded_json_keeps_wire_order() -> None:
    decoded = decode_body_untrusted(BodyKind.JSON, b'{"b":1,"a":2,"c":{"y":1,"x":2}}')
    assert list(decoded) == ["b", "a", "c"]
    assert list(decoded["c"]) == ["y", "x"]


@pytest.mark.parametrize(
    "data",
    [b"[]", b"1", b'"s"', b"null", b"{", b'{"a":NaN}', b'{"a":Infinity}', b"\xff\xfe",
     b'{"a":1}x', b"{}\x00"],
)  # fmt: skip
def test_bad_json_bodies(data: bytes) -> None:
    _drop(BodyKind.JSON, data)


def test_json_nesting_limit() -> None:
    ok = b'{"a":' + b"[" * (MAX_BODY_DEPTH - 1) + b"]" * (MAX_BODY_DEPTH - 1) + b"}"
    assert decode_body_untrusted(BodyKind.JSON, ok)["a"]
    deep = b'{"a":' + b"[" * MAX_BODY_DEPTH + b"]" * MAX_BODY_DEPTH + b"}"
    _drop(BodyKind.JSON, deep)
    # deeper than Python's recursion limit: still only BadPacket
    _drop(BodyKind.JSON, b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}")


def test_many_flat_containers_are_fine() -> None:
    wide = b'{"a":[' + b",".join([b"[]"] * 5000) + b"]}"
    assert len(decode_body_untrusted(BodyKind.JSON, wide)["a"]) == 5000


def test_size_limit() -> None:
    data = b'{"a":"' + b"x" * 100 + b'"}'
    assert decode_body_untrusted(BodyKind.JSON, data, max_size=len(data))["a"]
    _drop(BodyKind.JSON, data, max_size=len(data) - 1)
    _drop(BodyKind.RAW, data, max_size=10)


def test_msgpack_uses_modern_str_and_bin() -> None:
    value = {"s": "h\u00e9", "b": b"\x00\xff", "n": [1, None, True]}
    data = encode_body(BodyKind.MSGPACK, value)
    assert decode_body_untrusted(BodyKind.MSGPACK, data) == value


@pytest.mark.parametrize(
    "data",
    [
        b"\x90",  # a list, not a map
        b"\x81\xa1a",  # truncated
        b"\x80\x80",  # extra data
        b"\x81\x01\x01",  # int key
        b"\x81\xa1a\xd4\x05\x00",  # ext type
        b"\x81\xa1a\xc1",  # reserved byte
        b"\x81\xa1a\xa2\xff\xfe",  # invalid UTF-8 str
        b"\x81\xa1a\xdb\xff\xff\xff\xff",  # str claiming 4 GiB
        b"\x81\xa1a" + b"\x91" * (MAX_BODY_DEPTH + 1) + b"\x90",  # too deep
        b"\x81\xa1a" + b"\x91" * 5000 + b"\x90",  # deeper than msgpack's own stack
    ],
)
def test_bad_msgpack_bodies(data: bytes) -> None:
    _drop(BodyKind.MSGPACK, data)


def test_raw_and_nada() -> None:
    assert encode_body(BodyKind.RAW, b"\x00abc") == b"\x00abc"
    assert encode_body(BodyKind.RAW, bytearray(b"ab")) == b"ab"
    assert decode_body_untrusted(BodyKind.RAW, b"\x00abc") == b"\x00abc"
    assert encode_body(BodyKind.NADA, None) == b""
    assert decode_body_untrusted(BodyKind.NADA, b"") == {}
    _drop(BodyKind.NADA, b"x")


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (BodyKind.JSON, [1]),
        (BodyKind.JSON, {"a": object()}),
        (BodyKind.JSON, {"a": float("nan")}),
        (BodyKind.MSGPACK, "s"),
        (BodyKind.MSGPACK, {"a": object()}),
        (BodyKind.RAW, "text"),
        (BodyKind.NADA, {"a": 1}),
    ],
)
def test_encode_refuses(kind: BodyKind, value: object) -> None:
    with pytest.raises(LocalError):
        encode_body(kind, value)
