"""Cross-check the wire codec with raet 0.6.8's own packer and parser, in process.

raet's packet classes only reach their stack for keys (sign, encrypt, verify,
decrypt), so a stand-in stack backed by raetsalt.crypto is enough: the bytes compared
here are produced by raet's real TxPacket/TxTray/RxPacket code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from helpers.wire import join_header, sealed_header

from raetsalt.crypto import KeyPair, SessionBox, Signer, Verifier
from raetsalt.errors import LocalError
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

pytestmark = pytest.mark.interop

NONCE = bytes(range(100, 124))
SIGNER = Signer(bytes(range(32)))
VERIFIER = Verifier(SIGNER.verify_key)
BOX = SessionBox(KeyPair(bytes(range(1, 33))).secret, KeyPair(bytes(range(2, 34))).public)


def _load_raet() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "raet_shim.py"
    if not path.exists():
        pytest.skip("tests/raet_shim.py is not available")
    spec = importlib.util.spec_from_file_location("raet_shim", path)
    assert spec is not None and spec.loader is not None
    shim = sys.modules.get("raet_shim")
    if shim is None:
        shim = importlib.util.module_from_spec(spec)
        sys.modules["raet_shim"] = shim
        spec.loader.exec_module(shim)
    shim.mute_console(0)
    return shim.load()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def packeting() -> Any:
    pytest.importorskip("libnacl")
    return _load_raet().road.packeting


def _fake_stack(uid: int) -> SimpleNamespace:
    """The few stack attributes raet's packets use, backed by raetsalt.crypto."""
    remote = SimpleNamespace(
        privee=SimpleNamespace(
            encrypt=lambda msg, key: (BOX.encrypt(msg, NONCE), NONCE),
            decrypt=lambda cipher, nonce, key: BOX.decrypt_untrusted(cipher, nonce),
        ),
        publee=SimpleNamespace(key=b""),
        verfer=SimpleNamespace(verify=lambda signature, msg: VERIFIER.verify(msg, signature)),
    )
    return SimpleNamespace(
        local=SimpleNamespace(signer=SimpleNamespace(signature=SIGNER.sign)),
        remotes={uid: remote},
        veritive=True,
    )


def _raet_data(header: Header) -> dict[str, Any]:
    flags = header.flags
    return {
        "pk": int(header.packet_kind), "tk": int(header.transaction_kind),
        "se": header.source_uid, "de": header.destination_uid, "si": header.session_id,
        "ti": header.transaction_id, "sn": header.segment_number,
        "sc": header.segment_count, "ml": header.message_length,
        "bk": int(header.body_kind), "ck": int(header.coat_kind), "fk": int(header.foot_kind),
        "hk": int(header.head_kind),
        "cf": bool(flags & Flag.CF), "bf": bool(flags & Flag.BF), "wf": bool(flags & Flag.WF),
        "sf": bool(flags & Flag.SF), "af": bool(flags & Flag.AF), "nf": bool(flags & Flag.NF),
        "df": bool(flags & Flag.DF), "vf": bool(flags & Flag.VF),
    }  # fmt: skip


def _ours(header: Header, body: Any) -> bytes:
    plain = encode_body(header.body_kind, body)
    coat = BOX.encrypt(plain, NONCE) + NONCE if header.coat_kind and plain else plain
    return pack_packet(header, coat, SIGNER.sign)


HEADERS = [
    # join request / ack (plain, unsigned)
    (join_header(PacketKind.REQUEST, source_uid=2, transaction_id=1),
     {"name": "minion", "mode": 0, "kind": 0, "role": "minion"}),
    (join_header(PacketKind.ACK, source_uid=2, transaction_id=1), {}),
    # allow hello: raw body, signed
    (Header(packet_kind=PacketKind.HELLO, transaction_kind=TransactionKind.ALLOW, source_uid=2,
            destination_uid=2, session_id=1, transaction_id=2, body_kind=BodyKind.RAW,
            foot_kind=FootKind.NACL), b"0" * 64 + bytes(range(136))),
    # message: encrypted and signed, with flags and big ids
    (sealed_header(source_uid=0x1234, destination_uid=0xFFFFFFFF, session_id=0x80000000,
                   transaction_id=0xABCDEF, flags=Flag.WF | Flag.AF),
     {"cmd": "ping", "n": 1, "nested": {"b": [1, 2, None], "a": "\u00e9"}}),
    # done with echoed wf|cf, empty encrypted body
    (sealed_header(packet_kind=PacketKind.DONE, source_uid=2, destination_uid=2, session_id=2,
                   transaction_id=3, flags=Flag.WF | Flag.CF), {}),
    # ack with sn beyond sc (raet's "send more" ack)
    (sealed_header(packet_kind=PacketKind.ACK, source_uid=5, destination_uid=6, session_id=7,
                   transaction_id=8, segment_number=0x41, flags=Flag.CF), {}),
    # JSON head kind
    (join_header(PacketKind.REQUEST, source_uid=2, transaction_id=1, head_kind=HeadKind.JSON),
     {"name": "minion", "role": "minion"}),
    (sealed_header(source_uid=2, destination_uid=3, session_id=4, transaction_id=5, flags=Flag.WF,
                   head_kind=HeadKind.JSON), {"x": 1}),
]  # fmt: skip


@pytest.mark.parametrize(("header", "body"), HEADERS)
def test_raet_packs_the_same_bytes(packeting: Any, header: Header, body: Any) -> None:
    packet = packeting.TxPacket(
        stack=_fake_stack(header.source_uid), data=_raet_data(header), embody=body
    )
    packet.pack()
    assert packet.packed == _ours(header, body)


@pytest.mark.parametrize(("header", "body"), HEADERS)
def test_raet_parses_our_packets(packeting: Any, header: Header, body: Any) -> None:
    datagram = _ours(header, body)
    rx = packeting.RxPacket(stack=_fake_stack(header.destination_uid), packed=datagram)
    rx.parse()
    expected = _raet_data(header)
    assert {key: rx.data[key] for key in expected} == expected
    assert rx.body.data == body
    # and we parse what we wrote the same way
    ours = parse_packet_untrusted(datagram)
    assert ours.header == header
    plain = BOX.open_untrusted(ours.coat) if header.coat_kind else ours.coat
    assert decode_body_untrusted(header.body_kind, plain) == body
    assert VERIFIER.verify(ours.signed_bytes(), ours.foot) or not ours.foot


def _our_segments(header: Header, body: dict[str, Any]) -> list[bytes]:
    stream = BOX.encrypt(encode_body(BodyKind.JSON, body), NONCE) + NONCE
    single = Header(**{**_fields(header), "packet_kind": PacketKind.MESSAGE})
    try:
        return [pack_packet(single, stream, SIGNER.sign)]
    except LocalError:  # too big for one packet: segment it below
        pass
    size = segment_payload_size(single)
    chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
    return [
        pack_packet(
            Header(**{**_fields(single), "segment_number": number, "segment_count": len(chunks),
                      "message_length": len(stream), "flags": single.flags | Flag.SF}),
            chunk,
            SIGNER.sign,
        )
        for number, chunk in enumerate(chunks)
    ]  # fmt: skip


def _fields(header: Header) -> dict[str, Any]:
    return {name: getattr(header, name) for name in Header.__dataclass_fields__}


@pytest.mark.parametrize("head_kind", [HeadKind.RAET, HeadKind.JSON])
@pytest.mark.parametrize("size", [10, 800, 900, 2411, 20000])
def test_raet_segments_the_same_way(packeting: Any, head_kind: HeadKind, size: int) -> None:
    header = sealed_header(source_uid=2, destination_uid=0x123, session_id=2, transaction_id=3,
                           head_kind=head_kind)
    body = {"fill": "".join(chr(0x41 + i % 26) for i in range(size))}
    tray = packeting.TxTray(stack=_fake_stack(2), data=_raet_data(header), body=body)
    tray.pack()
    theirs = [packet.packed for packet in tray.packets]
    assert _our_segments(header, body) == theirs
    assert all(len(datagram) <= 1024 for datagram in theirs)
