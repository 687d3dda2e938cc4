"""Byte-exact checks against packets captured between two raet 0.6.8 stacks.

The packets (examples A-G) were captured between two raet 0.6.8 stacks whose keys are derived from
sha256("<name>:sig") / sha256("<name>:pri"), which tests/crypto checks separately.
"""

from __future__ import annotations

import pytest
from helpers.wire import SIGNATURE, fake_sign, join_header, sealed_header

from raetsalt.wire import (
    BodyKind,
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
    segment_payload_size,
)

JOIN = TransactionKind.JOIN
MINION_VERHEX = "13a49ae51f2c68aa669ba458b950ae6f4814b1a03a3d17eee20710065a037670"
MINION_PUBHEX = "56729dfd781341a8212f9dfdc7926c7c12eddd62fbd6c895d5b0ddca424e2a17"

# Example A: the join request body, in the order raet sends it.
JOIN_REQUEST_BODY = {
    "name": "minion",
    "mode": 0,
    "kind": 0,
    "verhex": MINION_VERHEX,
    "pubhex": MINION_PUBHEX,
    "role": "minion",
}
JOIN_REQUEST_HEADER = join_header(
    PacketKind.REQUEST,
    source_uid=2,
    transaction_id=1,
)
# Hex dump lines 0x00-0x4f of example A.
JOIN_REQUEST_PREFIX = bytes.fromhex(
    "72692052414554 0a706c2030313031 0a686c2033360a66672030300a706b2034"
    "0a7365203 20a7469203 10a746b2031 0a626b20310a0a7b226e616d65223a226d"
    "696e696f6e222c226d6f6465223a302c".replace(" ", "")
)

# Example C, the complete 54-byte join ack.
JOIN_ACK = bytes.fromhex(
    "72692052414554 0a706c2030303336 0a686c20 33360a66672030300a706b2031"
    "0a73652032 0a7469203 10a746b20310a626b20310a0a".replace(" ", "")
)

def test_join_request_a_is_byte_exact() -> None:
    body = encode_body(BodyKind.JSON, JOIN_REQUEST_BODY)
    assert len(body) == 203
    datagram = pack_packet(JOIN_REQUEST_HEADER, body)
    assert len(datagram) == 257
    assert datagram[: len(JOIN_REQUEST_PREFIX)] == JOIN_REQUEST_PREFIX
    assert len(JOIN_REQUEST_PREFIX) == 0x50
    assert datagram[:0x36] == b"ri RAET\npl 0101\nhl 36\nfg 00\npk 4\nse 2\nti 1\ntk 1\nbk 1\n\n"
    assert datagram[0x36:] == (
        b'{"name":"minion","mode":0,"kind":0,"verhex":"' + MINION_VERHEX.encode()
        + b'","pubhex":"' + MINION_PUBHEX.encode() + b'","role":"minion"}'
    )  # fmt: skip


def test_join_request_a_parses_back() -> None:
    datagram = pack_packet(JOIN_REQUEST_HEADER, encode_body(BodyKind.JSON, JOIN_REQUEST_BODY))
    packet = parse_packet_untrusted(datagram)
    assert packet.header == JOIN_REQUEST_HEADER
    assert packet.foot == b""
    body = decode_body_untrusted(packet.header.body_kind, packet.coat)
    assert body == JOIN_REQUEST_BODY
    assert list(body) == list(JOIN_REQUEST_BODY)  # key order survives


def test_join_ack_c_full_datagram() -> None:
    header = join_header(
        PacketKind.ACK,
        source_uid=2,
        transaction_id=1,
    )
    assert pack_packet(header, encode_body(BodyKind.JSON, {})) == JOIN_ACK
    packet = parse_packet_untrusted(JOIN_ACK)
    assert packet.header == header
    assert packet.head == JOIN_ACK and packet.coat == b"" and packet.foot == b""
    assert decode_body_untrusted(BodyKind.JSON, packet.coat) == {}


def test_join_response_b_head() -> None:
    body = {"name": "main", "mode": 1, "kind": 0, "uid": 2, "verhex": "b9" * 32,
            "pubhex": "5b" * 32, "role": "main"}  # fmt: skip
    header = join_header(
        PacketKind.RESPONSE,
        destination_uid=2,
        transaction_id=1,
        flags=Flag.CF,
    )
    datagram = pack_packet(header, encode_body(BodyKind.JSON, body))
    assert len(datagram) == 261
    assert datagram.startswith(b"ri RAET\npl 0105\nhl 36\nfg 01\npk 5\nde 2\nti 1\ntk 1\nbk 1\n\n")


def test_allow_hello_d_head_and_signed_bytes() -> None:
    header = Header(
        packet_kind=PacketKind.HELLO,
        transaction_kind=TransactionKind.ALLOW,
        source_uid=2,
        destination_uid=2,
        session_id=1,
        transaction_id=2,
        body_kind=BodyKind.RAW,
        foot_kind=FootKind.NACL,
    )
    body = b"0" * 64 + bytes(136)
    signed: list[bytes] = []

    def sign(message: bytes) -> bytes:
        signed.append(message)
        return SIGNATURE

    datagram = pack_packet(header, body, sign)
    assert len(datagram) == 339
    head = (b"ri RAET\npl 0153\nhl 4b\nfg 00\npk 6\nse 2\nde 2\nsi 1\nti 2\ntk 3\nbk 2\nfk 1\n"
            b"fl 40\n\n")
    assert datagram == head + body + SIGNATURE
    assert signed == [head + body + bytes(64)]
    packet = parse_packet_untrusted(datagram)
    assert packet.header == header
    assert packet.signed_bytes() == signed[0]
    assert packet.foot == SIGNATURE


def test_message_e_head_and_layout() -> None:
    # 20-byte body {"cmd":"ping","n":1} -> coat = 16 tag + 20 cipher + 24 nonce.
    assert encode_body(BodyKind.JSON, {"cmd": "ping", "n": 1}) == b'{"cmd":"ping","n":1}'
    header = sealed_header(
        source_uid=2,
        destination_uid=2,
        session_id=2,
        transaction_id=3,
        flags=Flag.WF,
    )
    coat = bytes(range(60))
    datagram = pack_packet(header, coat, fake_sign)
    assert len(datagram) == 194
    head = b"ri RAET\npl 00c2\nhl 46\nfg 04\nse 2\nde 2\nsi 2\nti 3\nbk 1\nck 1\nfk 1\nfl 40\n\n"
    assert datagram[:0x46] == head
    # The captured bytes 0x00-0x4f of example E.
    assert datagram[:0x46] == bytes.fromhex(
        "726920524145540a706c2030306332 0a686c2034360a66672030340a73652032"
        "0a64652032 0a73692032 0a7469203 30a626b20310a636b20310a666b20310a66"
        "6c2034300a0a".replace(" ", "")
    )
    packet = parse_packet_untrusted(datagram)
    assert packet.header == header
    assert packet.coat == coat


def test_done_f_head() -> None:
    header = sealed_header(
        packet_kind=PacketKind.DONE,
        source_uid=2,
        destination_uid=2,
        session_id=2,
        transaction_id=3,
        flags=Flag.WF | Flag.CF,
    )
    datagram = pack_packet(header, b"", fake_sign)
    assert len(datagram) == 139
    assert datagram[:75] == (
        b"ri RAET\npl 008b\nhl 4b\nfg 05\npk f\nse 2\nde 2\nsi 2\nti 3\n"
        b"bk 1\nck 1\nfk 1\nfl 40\n\n"
    )


SEGMENTED = dict(
    source_uid=2,
    destination_uid=2,
    session_id=2,
    transaction_id=3,
    segment_count=3,
    message_length=0x993,
)


@pytest.mark.parametrize(
    ("segment_number", "head"),
    [
        # captured: the first segment of the message
        (0, b"ri RAET\npl 03f1\nhl 52\nfg 08\nse 2\nde 2\nsi 2\nti 3\nsc 3\nml 993\n"
            b"bk 1\nck 1\nfk 1\nfl 40\n\n"),
        # the second one "adds sn 1" (and so is 5 bytes longer)
        (1, b"ri RAET\npl 03f6\nhl 57\nfg 08\nse 2\nde 2\nsi 2\nti 3\nsn 1\nsc 3\n"
            b"ml 993\nbk 1\nck 1\nfk 1\nfl 40\n\n"),
    ],
)  # fmt: skip
def test_segment_heads_g(segment_number: int, head: bytes) -> None:
    # A 2,411-byte body gives a 2,451-byte coat stream (0x993) cut into 3 segments of
    # 1024 - (70-byte unsegmented head + 27 + 64) = 863 bytes.
    header = sealed_header(segment_number=segment_number, flags=Flag.SF, **SEGMENTED)
    payload = segment_payload_size(header)
    assert payload == 863
    datagram = pack_packet(header, bytes(payload), fake_sign)
    assert datagram == head + bytes(payload) + SIGNATURE
    assert parse_packet_untrusted(datagram).header == header


def test_last_segment_g_flags() -> None:
    header = sealed_header(segment_number=2, flags=Flag.SF | Flag.WF, **SEGMENTED)
    datagram = pack_packet(header, bytes(0x993 - 2 * 863), fake_sign)
    assert datagram.startswith(b"ri RAET\npl ")
    assert b"\nfg 0c\n" in datagram and b"\nsn 2\nsc 3\nml 993\n" in datagram


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            join_header(PacketKind.RENEW, source_uid=2, destination_uid=2, transaction_id=2,
                        flags=Flag.CF),
            b"ri RAET\npl 003b\nhl 3b\nfg 01\npk b\nse 2\nde 2\nti 2\ntk 1\nbk 1\n\n",
        ),
        (
            join_header(PacketKind.PEND, destination_uid=2, transaction_id=1, flags=Flag.CF),
            b"ri RAET\npl 0036\nhl 36\nfg 01\npk e\nde 2\nti 1\ntk 1\nbk 1\n\n",
        ),
    ],
)  # fmt: skip
def test_nack_heads_g(header: Header, expected: bytes) -> None:
    assert pack_packet(header, b"") == expected
    assert parse_packet_untrusted(expected).header == header


@pytest.mark.parametrize("packet_kind", [PacketKind.REQUEST, PacketKind.ACK])
def test_alive_heads_g_are_144_bytes(packet_kind: PacketKind) -> None:
    header = sealed_header(
        packet_kind=packet_kind,
        transaction_kind=TransactionKind.ALIVE,
        source_uid=2,
        destination_uid=2,
        session_id=2,
        transaction_id=4,
    )
    assert len(pack_packet(header, b"", fake_sign)) == 144


def test_json_head_join_request() -> None:
    header = join_header(
        PacketKind.REQUEST,
        source_uid=2,
        transaction_id=1,
        head_kind=HeadKind.JSON,
    )
    body = encode_body(BodyKind.JSON, JOIN_REQUEST_BODY)
    datagram = pack_packet(header, body)
    expected_head = (
        b'{"ri":"RAET","pl":"0000129","hl":"5e","fg":"00","pk":4,"hk":1,"se":2,'
        b'"ti":1,"tk":1,"bk":1}\r\n\r\n'
    )
    assert datagram == expected_head + body
    packet = parse_packet_untrusted(datagram)
    assert packet.header == header
    assert packet.head == expected_head
    assert decode_body_untrusted(BodyKind.JSON, packet.coat) == JOIN_REQUEST_BODY


def test_json_head_segment_size_uses_36() -> None:
    header = sealed_header(
        source_uid=2,
        destination_uid=2,
        session_id=2,
        transaction_id=3,
        head_kind=HeadKind.JSON,
    )
    head_length = len(pack_packet(header, b"", fake_sign)) - 64
    assert segment_payload_size(header) == 1024 - (head_length + 36 + 64)
