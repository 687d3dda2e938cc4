"""Property tests: codec round trips, and "a Packet/value or BadPacket, nothing else"."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire import (
    BodyKind,
    CoatKind,
    Flag,
    FootKind,
    Header,
    HeadKind,
    PacketKind,
    TransactionKind,
    decode_body_untrusted,
    encode_body,
    pack_packet,
    parse_packet_untrusted,
)
from raetsalt.wire.header import _CANONICAL_RE, _parse_raet_fields, _parse_raet_lines

uint32 = st.one_of(st.integers(0, 16), st.integers(0, 0xFFFFFFFF))

headers = st.builds(
    Header,
    packet_kind=st.sampled_from(PacketKind),
    transaction_kind=st.sampled_from(TransactionKind),
    source_uid=uint32,
    destination_uid=uint32,
    session_id=uint32,
    transaction_id=uint32,
    flags=st.integers(0, 255).map(Flag),
    segment_number=uint32,
    segment_count=uint32,
    message_length=uint32,
    body_kind=st.sampled_from(BodyKind),
    coat_kind=st.sampled_from(CoatKind),
    foot_kind=st.sampled_from(FootKind),
    head_kind=st.sampled_from([HeadKind.RAET, HeadKind.JSON]),
)


def _sign(message: bytes) -> bytes:
    return bytes(64 - len(message) % 64) + bytes(len(message) % 64)


def _packed(header: Header, coat: bytes) -> bytes:
    return pack_packet(header, coat, _sign)


@given(header=headers, coat=st.binary(max_size=600))
def test_header_round_trip(header: Header, coat: bytes) -> None:
    datagram = _packed(header, coat)
    packet = parse_packet_untrusted(datagram)
    assert packet.header == header
    assert packet.coat == coat
    assert packet.head + packet.coat + packet.foot == datagram
    assert len(packet.foot) == (64 if header.foot_kind == FootKind.NACL else 0)
    # Re-encoding the parsed header gives the same bytes: the head is canonical.
    assert _packed(packet.header, packet.coat) == datagram


@given(header=headers.filter(lambda h: h.head_kind == HeadKind.RAET), coat=st.binary(max_size=8))
def test_fast_and_line_parsers_agree(header: Header, coat: bytes) -> None:
    head = parse_packet_untrusted(_packed(header, coat)).head
    assert _CANONICAL_RE.fullmatch(head) is not None  # our own heads take the fast path
    assert _parse_raet_fields(head) == _parse_raet_lines(head)


def _parse_or_bad(data: bytes) -> None:
    try:
        packet = parse_packet_untrusted(data)
    except BadPacket as exc:
        assert isinstance(exc.trigger, str) and exc.trigger
        return
    assert packet.head + packet.coat + packet.foot == data


@given(st.binary(max_size=1100))
@example(b"ri RAET\n\n")
@example(b'{"ri":"RAET",\r\n\r\n')
@example(b"ri RAET\npl 0010\nhl 10\n\n")
def test_arbitrary_bytes_parse_or_drop(data: bytes) -> None:
    _parse_or_bad(data)


head_lines = st.lists(
    st.tuples(
        st.sampled_from(["pk", "se", "de", "si", "ti", "tk", "sn", "sc", "ml", "bk", "ck",
                         "fk", "fl", "vn", "hk", "dt", "oi", "fg", "xx", "bl"]),
        st.text(alphabet="0123456789abcdefABCDEF -.x\u00e9", max_size=10),
    ),
    max_size=8,
)  # fmt: skip


@given(lines=head_lines, tail=st.binary(max_size=80))
def test_text_head_lookalikes_parse_or_drop(lines: list[tuple[str, str]], tail: bytes) -> None:
    body = "".join(f"\n{key} {value}" for key, value in lines)
    for hl in range(0, 256, 51):
        head = f"ri RAET\npl {hl + len(tail):04x}\nhl {hl:02x}\nfg 00{body}\n\n".encode()
        _parse_or_bad(head + tail)
    # and with the length fields right, so the later checks are reached too
    head = f"ri RAET\npl XXXX\nhl XX\nfg 00{body}\n\n".encode()
    head = head.replace(b"hl XX", b"hl %02x" % (len(head) % 256))
    _parse_or_bad(head.replace(b"pl XXXX", b"pl %04x" % (len(head) + len(tail))) + tail)


mutations = st.lists(
    st.tuples(st.sampled_from(["flip", "insert", "delete", "truncate"]),
              st.integers(0, 2000), st.integers(0, 255)),
    min_size=1,
    max_size=4,
)  # fmt: skip


def _mutate(data: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, position, value in steps:
        if not buf:
            break
        i = position % len(buf)
        if op == "flip":
            buf[i] ^= value or 1
        elif op == "insert":
            buf.insert(i, value)
        elif op == "delete":
            del buf[i]
        else:
            del buf[i:]
    return bytes(buf)


@settings(max_examples=300)
@given(header=headers, coat=st.binary(max_size=200), steps=mutations)
def test_mutated_packets_parse_or_drop(
    header: Header, coat: bytes, steps: list[tuple[str, int, int]]
) -> None:
    _parse_or_bad(_mutate(_packed(header, coat), steps))


# --- bodies --------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=10), json_values, max_size=6)


@given(json_objects)
def test_json_body_round_trip(value: dict[str, Any]) -> None:
    data = encode_body(BodyKind.JSON, value)
    assert (data == b"") == (value == {})
    decoded = decode_body_untrusted(BodyKind.JSON, data)
    assert decoded == value
    assert list(decoded) == list(value)


msgpack_values = st.recursive(
    json_scalars | st.binary(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), msgpack_values, max_size=6))
def test_msgpack_body_round_trip(value: dict[str, Any]) -> None:
    assert decode_body_untrusted(BodyKind.MSGPACK, encode_body(BodyKind.MSGPACK, value)) == value


@given(kind=st.sampled_from(BodyKind), data=st.binary(max_size=300))
@example(kind=BodyKind.MSGPACK, data=b"\xdd\xff\xff\xff\xff")  # array claiming 4G items
@example(kind=BodyKind.MSGPACK, data=b"\x81\x90\x01")  # map with a list key
@example(kind=BodyKind.MSGPACK, data=b"\xd6\xff\x00\x00\x00\x00")  # timestamp ext
@example(kind=BodyKind.JSON, data=b"[" * 100_000)
@example(kind=BodyKind.JSON, data=b"\xff")
def test_arbitrary_bodies_decode_or_drop(kind: BodyKind, data: bytes) -> None:
    try:
        decode_body_untrusted(kind, data)
    except BadPacket as exc:
        assert exc.trigger == "body"


@given(st.text(alphabet='{}[]":,0123456789.eE-+ntrufasl\\ u', max_size=200))
def test_json_lookalikes_decode_or_drop(text: str) -> None:
    try:
        value = decode_body_untrusted(BodyKind.JSON, text.encode())
    except BadPacket:
        return
    assert isinstance(value, dict)


@given(st.one_of(st.lists(st.integers()), st.integers(), st.text(), st.none()))
def test_encode_json_body_refuses_non_mappings(value: Any) -> None:
    try:
        encode_body(BodyKind.JSON, value)
    except LocalError:
        return
    raise AssertionError("non-mapping body was encoded")
