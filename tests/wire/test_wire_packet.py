"""Packet framing: pack limits, signing, and the checks of parse_packet_untrusted."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.wire import SIGNATURE, sealed_header

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
    pack_packet,
    parse_packet_untrusted,
    segment_payload_size,
)

SIGNED = sealed_header(
    packet_kind=PacketKind.ACK,
    transaction_kind=TransactionKind.ALIVE,
    source_uid=3,
    destination_uid=7,
    session_id=9,
    transaction_id=11,
)
PLAIN = Header(packet_kind=PacketKind.ACK, transaction_kind=TransactionKind.JOIN, source_uid=2)


# The first four lines of every text head, with placeholders for the lengths.
HEAD = ["ri RAET", "pl XXXX", "hl XX", "fg 00"]


def _head(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n\n").encode()


def _with_lengths(lines: list[str], tail: bytes = b"") -> bytes:
    """A text head from ``lines`` (pl/hl placeholders fixed up) followed by ``tail``."""
    raw = _head(*lines)
    head = raw.replace(b"hl XX", b"hl %02x" % len(raw))
    total = len(head) + len(tail)
    return head.replace(b"pl XXXX", b"pl %04x" % total) + tail


def _bad(data: bytes, trigger: str, **kwargs: int) -> None:
    with pytest.raises(BadPacket) as info:
        parse_packet_untrusted(data, **kwargs)
    assert info.value.trigger == trigger, str(info.value)


# --- packing -----------------------------------------------------------------------


def test_sign_receives_zero_foot_and_signature_replaces_it() -> None:
    seen: list[bytes] = []

    def sign(message: bytes) -> bytes:
        seen.append(message)
        return SIGNATURE

    datagram = pack_packet(SIGNED, b"coat", sign)
    assert seen == [datagram[:-64] + bytes(64)]
    assert datagram.endswith(SIGNATURE)
    packet = parse_packet_untrusted(datagram)
    assert (packet.coat, packet.foot) == (b"coat", SIGNATURE)
    assert packet.signed_bytes() == seen[0]


def test_nacl_foot_needs_sign_function() -> None:
    with pytest.raises(LocalError):
        pack_packet(SIGNED, b"")


def test_sign_must_return_64_bytes() -> None:
    with pytest.raises(LocalError):
        pack_packet(SIGNED, b"", lambda message: b"short")


def test_unsigned_packet_never_calls_sign() -> None:
    def sign(message: bytes) -> bytes:
        raise AssertionError("must not sign")

    assert parse_packet_untrusted(pack_packet(PLAIN, b"x", sign)).coat == b"x"


def test_pack_refuses_oversized_packet() -> None:
    head_length = len(pack_packet(PLAIN, b""))
    assert len(pack_packet(PLAIN, bytes(1024 - head_length))) == 1024
    with pytest.raises(LocalError):
        pack_packet(PLAIN, bytes(1025 - head_length))
    assert len(pack_packet(PLAIN, bytes(2000), max_size=4096)) == 2000 + head_length


@pytest.mark.parametrize(
    "header",
    [
        Header(source_uid=-1),
        Header(session_id=1 << 32),
        Header(segment_count=1 << 40),
        Header(head_kind=HeadKind.BINARY),
    ],
)
def test_pack_refuses_unencodable_headers(header: Header) -> None:
    with pytest.raises(LocalError):
        pack_packet(header, b"")


def _widest(**fields: Any) -> Header:
    """Every field of a head at its widest value (``fields`` add to them)."""
    return Header(
        source_uid=0xFFFFFFFF,
        destination_uid=0xFFFFFFFF,
        session_id=0xFFFFFFFF,
        transaction_id=0xFFFFFFFF,
        segment_number=0xFFFFFFFF,
        segment_count=0xFFFFFFFF,
        message_length=0xFFFFFFFF,
        packet_kind=PacketKind.UNKNOWN,
        transaction_kind=TransactionKind.UNKNOWN,
        body_kind=BodyKind.MSGPACK,
        coat_kind=CoatKind.NACL,
        foot_kind=FootKind.NACL,
        **fields,
    )


def test_largest_ids_fit_and_round_trip() -> None:
    header = _widest(flags=Flag(0xFF))
    datagram = pack_packet(header, b"", lambda m: SIGNATURE)
    assert b"\nfg ff\n" in datagram and b"\nse ffffffff\n" in datagram
    assert parse_packet_untrusted(datagram).header == header


def test_head_over_255_bytes_is_refused_by_json_packer() -> None:
    # The biggest JSON head: every field at its widest decimal value.
    header = _widest(head_kind=HeadKind.JSON)
    datagram = pack_packet(header, b"", lambda m: SIGNATURE)
    assert len(datagram) - 64 <= 255
    assert parse_packet_untrusted(datagram).header == header


def test_segment_payload_size_ignores_segment_fields() -> None:
    base = sealed_header(source_uid=2, destination_uid=2, session_id=2, transaction_id=3)
    segment = sealed_header(
        source_uid=2,
        destination_uid=2,
        session_id=2,
        transaction_id=3,
        segment_number=5,
        segment_count=77,
        message_length=66000,
        flags=Flag.SF,
    )
    assert segment_payload_size(base) == segment_payload_size(segment) == 863
    # every segment of a message up to 65535 x 1024 bytes still fits its packet
    size = segment_payload_size(segment)
    assert len(pack_packet(segment, bytes(size), lambda m: SIGNATURE)) <= 1024
    # one more hex digit in an id costs one payload byte
    wider = sealed_header(source_uid=0x20, destination_uid=2, session_id=2, transaction_id=3)
    assert segment_payload_size(wider) == 862


def test_segment_payload_size_without_room() -> None:
    with pytest.raises(LocalError):
        segment_payload_size(SIGNED, max_size=100)


# --- parsing: the checks -------------------------------------------------------------


def test_datagram_larger_than_max_size() -> None:
    datagram = pack_packet(PLAIN, bytes(2000), max_size=4096)
    _bad(datagram, "length")
    assert parse_packet_untrusted(datagram, max_size=4096).coat == bytes(2000)


def test_head_length_mismatch() -> None:
    good = pack_packet(PLAIN, b"")
    assert b"\nhl 2c\n" in good
    _bad(good.replace(b"hl 2c", b"hl 2d"), "length")
    _bad(good.replace(b"hl 2c", b"hl 2b"), "length")


def test_packet_length_mismatch() -> None:
    good = pack_packet(PLAIN, b"body")
    _bad(good + b"!", "length")
    _bad(good[:-1], "length")


# Text heads the parser refuses: the lines after ``HEAD`` (``;`` between lines), and why.
BAD_HEAD_TABLE = """
vn 1            | version must be 0
hk 1            | a text head claiming to be a JSON head
zz 1            | an unknown key
bl 1            | a key raet knows but never sends
cf True         | a flag written as a key of its own
pk              | a line without a space
pk 1 2          | a line with two
se 2g           | bad hex
se -1           | a sign
se 0x1          | a prefix
se 1_0          | an underscore
se  1           | two spaces
se 100000000    | too many digits
se 1;se 1       | a repeated field
pk 20           | unknown packet kind
tk 5            | unknown transaction kind
bk 4            | unknown body kind
ck 2            | unknown coat kind
fk 2;fl 100     | unknown foot kind
dt nan          | dt must look like "%f"
"""
BAD_HEAD_LINES = [
    (row.split("|")[0].rstrip().split(";"), row.split("|")[1].strip())
    for row in BAD_HEAD_TABLE.strip("\n").splitlines()
]


@pytest.mark.parametrize(("extra", "why"), BAD_HEAD_LINES, ids=[w for _, w in BAD_HEAD_LINES])
def test_malformed_text_heads(extra: list[str], why: str) -> None:
    _bad(_with_lengths([*HEAD, *extra]), "header")


@pytest.mark.parametrize(
    "lines",
    [
        ["ri RAET", "pl XXXX", "hl XX", "fg 0"],  # flags of one digit
        ["ri RAET", "pl XXXX", "hl XX", "fg 000"],  # and of three
        ["ri RAET", "pl XXXX", "hl XX"],  # required fields missing
        ["ri RAET", "hl XX", "fg 00"],
    ],
)
def test_text_heads_without_their_first_lines_right(lines: list[str]) -> None:
    _bad(_with_lengths(lines), "header")


@pytest.mark.parametrize(
    ("extra", "tail"),
    [(["fk 1"], bytes(64)), (["fk 1", "fl 40"], bytes(63)), (["fl 40"], bytes(64))],
)
def test_a_foot_length_must_fit_the_foot_kind_and_the_datagram(extra: list[str], tail: bytes
                                                               ) -> None:
    _bad(_with_lengths([*HEAD, *extra], tail), "foot")


def test_well_formed_oddities_are_accepted() -> None:
    # Upper-case hex, fields out of raet's order, dt and oi (ignored) all parse.
    datagram = _with_lengths(["ri RAET", "pl XXXX", "hl XX", "fg 0C", "tk 1", "se A", "dt 0.000000",
                              "oi 3", "vn 0"])  # fmt: skip
    header = parse_packet_untrusted(datagram).header
    assert header == Header(transaction_kind=TransactionKind.JOIN, source_uid=10,
                            flags=Flag.SF | Flag.WF)  # fmt: skip


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"ri RAET",
        b"ri RAET\n",
        b"ri RAET\npl 0010\n",  # no terminator
        b"RI RAET\npl 0016\nhl 16\nfg 00\n\n",
        b"ri RAET\npl 0016\nhl 16\nfg\xff00\n\n",  # not ASCII
        b"ri RAET\npl 0016\nhl 16\nfg \xe900\n\n",
        b"ri RAET\n\n",
        b"ri RAET\n" + b"se 1\n" * 60 + b"\n",  # terminator beyond 255 bytes
        b"\x00" * 100,
        b'{"ri":"RAET"}\r\n\r\n',
    ],
)
def test_garbage_is_a_header_drop(data: bytes) -> None:
    _bad(data, "header")


def _json_datagram(head_object: str, tail: bytes = b"") -> bytes:
    """A JSON head from a template with PL/HL placeholders (7 and 2 characters)."""
    head = (head_object + "\r\n\r\n").encode()
    head = head.replace(b'"HL"', b'"%02x"' % len(head))
    total = len(head) + len(tail)
    return head.replace(b'"PLPLPLP"', b'"%07x"' % total) + tail


@pytest.mark.parametrize(
    ("head_object", "trigger"),
    [
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","pk":4,"hk":1,"se":2}', None),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":0}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00"}', "header"),  # hk 1 missing
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"se":-1}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"se":true}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"se":1.5}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"se":4294967296}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"se":"2"}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"xx":2}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"hk":1}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"0","hk":1}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"dt":NaN}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"vn":1}', "header"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"pk":99}', "header"),
        ('{"ri":"RAET","pl":"0000000","hl":"HL","fg":"00","hk":1}', "length"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"00","fg":"00","hk":1}', "length"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1,"fk":1}', "foot"),
        ('{"ri":"RAET","pl":"PLPLPLP","hl":"HL","fg":"00","hk":1', "header"),
        ('{"ri":"RAET",[]}', "header"),
    ],
)
def test_json_heads(head_object: str, trigger: str | None) -> None:
    datagram = _json_datagram(head_object)
    if trigger is None:
        header = parse_packet_untrusted(datagram).header
        assert header == Header(packet_kind=PacketKind.REQUEST, source_uid=2,
                                head_kind=HeadKind.JSON)  # fmt: skip
    else:
        _bad(datagram, trigger)


def test_parse_accepts_bytearray_and_memoryview() -> None:
    datagram = pack_packet(PLAIN, b"abc")
    assert parse_packet_untrusted(bytearray(datagram)).coat == b"abc"
    assert parse_packet_untrusted(memoryview(datagram)).coat == b"abc"
