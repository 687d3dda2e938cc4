"""Hostile input: random, mutated, forged, unsigned and replayed datagrams.

Nothing escapes the engine, every bad datagram is counted as dropped with a reason, no
reply goes to an unauthenticated packet beyond what the join protocol needs, replays are
not delivered twice, and the established session keeps working afterwards.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.engine.events import MessageReceived, PacketDropped
from raetsalt.engine.native.frames import is_native
from raetsalt.testing.pair import MINION_HA, Pair, road_pair
from raetsalt.wire.enums import FootKind, PacketKind, TransactionKind
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted

ATTACKER = ("10.6.6.6", 6666)
JOIN_REPLIES = {PacketKind.PEND, PacketKind.REJECT, PacketKind.RENEW, PacketKind.RESPONSE}


def _connected_pair_with_capture(native: bool = False) -> tuple[Pair, list[bytes]]:
    settings = {"native": native}
    pair = road_pair(seed=11, main_config=settings, minion_config=settings)
    assert pair.connect()
    captured: list[bytes] = []
    original = pair.minion.road.datagrams_to_send

    def tap(now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out = original(now)
        captured.extend(data for data, _ in out)
        return out

    pair.minion.road.datagrams_to_send = tap  # type: ignore[method-assign]
    pair.minion.road.send_message("main", {"n": "first"}, pair.net.now)
    pair.minion.road.send_message("main", {"n": "big", "x": "y" * 5000}, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 2)
    return pair, captured


def _inject(pair: Pair, datagrams: list[bytes]) -> tuple[int, list[tuple[bytes, tuple[str, int]]]]:
    """Feed datagrams from the attacker's address; return drops and what the main sent back."""
    road = pair.main.road
    pair.net._collect()  # flush anything pending so replies can be attributed
    before = sum(v for k, v in road.stats.items() if k.startswith("drop_"))
    for data in datagrams:
        road.receive_datagram(data, ATTACKER, pair.net.now)
    replies = road.datagrams_to_send(pair.net.now)
    after = sum(v for k, v in road.stats.items() if k.startswith("drop_"))
    return after - before, replies


def _mutations(rng: random.Random, data: bytes) -> list[bytes]:
    out = [data[: rng.randrange(len(data))], data + b"x", b"", data[:8] + b"zz" + data[10:]]
    for _ in range(12):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        out.append(bytes(buf))
    if data.startswith(b"ri RAET"):
        head_end = data.index(b"\n\n")
        out.append(data[:head_end].replace(b"pl ", b"pl f") + data[head_end:])  # wrong length
        out.append(data.replace(b"ri RAET\n", b"ri RAET\nzz 1\n", 1))  # unknown field
        out.append(data.replace(b"\nse ", b"\nse g", 1))  # bad hex
    else:  # native: another counter, another receiver id
        out.append(data[:6] + bytes(8) + data[14:])
        out.append(data[:2] + b"\0\0\0\x07" + data[6:])
    return out


@pytest.mark.parametrize("native", [False, True], ids=["raet", "native"])
def test_mutated_captured_datagrams_are_dropped_and_never_answered(native: bool) -> None:
    pair, captured = _connected_pair_with_capture(native)
    assert all(is_native(d) == native for d in captured)
    rng = random.Random(5)
    bad = [m for data in captured for m in _mutations(rng, data) if m not in captured]
    dropped, replies = _inject(pair, bad)
    # The capture starts after the join, so every datagram is signed: any change to it
    # fails to parse or to verify (the signature covers every byte but itself).
    assert not [e for e in pair.main.drain() if isinstance(e, MessageReceived)]
    assert dropped == len(bad)
    for data, _ in replies:
        kind = parse_packet_untrusted(data).header.packet_kind
        assert kind in JOIN_REPLIES, f"answered an unauthenticated packet with {kind!r}"
    reasons = {e.reason.value for e in pair.main.of(PacketDropped)}
    assert ({"header", "decrypt"} if native else {"header", "length", "signature"}) <= reasons
    _still_works(pair)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=1100))
def test_random_bytes_never_escape(data: bytes) -> None:
    pair = _SHARED
    dropped, replies = _inject(pair, [data, b"ri RAET\n" + data])
    assert dropped == 2
    assert not replies


def test_unsigned_non_join_packets_are_dropped() -> None:
    pair, captured = _connected_pair_with_capture()
    message = next(
        parse_packet_untrusted(d)
        for d in captured
        if parse_packet_untrusted(d).header.transaction_kind == TransactionKind.MESSAGE
    )
    unsigned = pack_packet(replace(message.header, foot_kind=FootKind.NADA), message.coat)
    dropped, replies = _inject(pair, [unsigned])
    assert dropped == 1 and not replies
    assert pair.main.road.stats["drop_unsigned"] == 1


def test_forged_signature_is_dropped() -> None:
    pair, captured = _connected_pair_with_capture()
    from raetsalt.crypto import Signer

    forger = Signer.generate()
    message = next(
        parse_packet_untrusted(d)
        for d in captured
        if parse_packet_untrusted(d).header.transaction_kind == TransactionKind.MESSAGE
    )
    forged = pack_packet(message.header, message.coat, forger.sign)
    dropped, replies = _inject(pair, [forged])
    assert dropped == 1 and not replies
    assert pair.main.road.stats["drop_signature"] == 1


@pytest.mark.parametrize("native", [False, True], ids=["raet", "native"])
def test_replayed_messages_are_never_delivered_twice(native: bool) -> None:
    pair, captured = _connected_pair_with_capture(native)
    messages = [
        d
        for d in captured
        if is_native(d)
        or parse_packet_untrusted(d).header.transaction_kind == TransactionKind.MESSAGE
    ]
    assert messages
    # Any source address, any time later (raet forgot after 600 s).
    pair.until(lambda: False, timeout=700)
    for address in (ATTACKER, MINION_HA):
        for data in messages:
            pair.main.road.receive_datagram(data, address, pair.net.now)
    pair.until(lambda: False, timeout=5)
    assert [b["n"] for b in pair.main.received()] == ["first", "big"]  # type: ignore[index]
    assert pair.main.road.stats["drop_replay" if native else "replayed_message"] >= len(messages)
    _still_works(pair)


def _still_works(pair: Pair) -> None:
    pair.minion.road.send_message("main", {"after": "attack"}, pair.net.now)
    pair.main.road.send_message("minion", {"reply": True}, pair.net.now)
    assert pair.until(
        lambda: (
            {"after": "attack"} in pair.main.received()
            and {"reply": True} in pair.minion.received()
        )
    )


_SHARED, _ = _connected_pair_with_capture()
