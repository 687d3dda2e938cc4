"""raet-profile segmented messages: the pipelined sender, the segment head fast path, and
lazily verified segments under forgery (a forged segment never delivers forged content,
never gets an answer, and cannot stall the message)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import replace

import pytest
from helpers.wire import sealed_header

from raetsalt.crypto import Signer
from raetsalt.engine.events import MessageDelivered, MessageReceived
from raetsalt.engine.message import (
    MessageReceiver,
    SegmentHeads,
    _segment_header,
    take_lazy_segment,
)
from raetsalt.engine.road import Road
from raetsalt.testing.pair import Pair, road_pair
from raetsalt.wire.enums import Flag, PacketKind, TransactionKind
from raetsalt.wire.packet import Packet, pack_packet, parse_packet_untrusted

ATTACKER = ("10.6.6.6", 6666)
FORGER = Signer.generate()
Tamper = Callable[[Packet, bytes], list[bytes]]


def _body(tag: str, size: int) -> dict[str, object]:
    block = hashlib.sha256(tag.encode()).hexdigest()
    return {"tag": tag, "data": (block * (size // len(block) + 1))[:size]}


def _pair(**config: object) -> Pair:
    settings = {"native": False, **config}
    pair = road_pair(seed=5, main_config=settings, minion_config=settings)
    assert pair.connect()
    return pair


def _tap_minion(pair: Pair, tamper: Tamper) -> list[Packet]:
    """Route every message segment the minion sends through ``tamper`` (which returns the
    datagrams to put on the net instead); returns the list of segments seen."""
    seen: list[Packet] = []
    original = pair.minion.road.datagrams_to_send

    def tap(now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out = []
        for data, address in original(now):
            packet = parse_packet_untrusted(data)
            header = packet.header
            if (
                header.transaction_kind == TransactionKind.MESSAGE
                and header.packet_kind == PacketKind.MESSAGE
            ):
                seen.append(packet)
                out.extend((d, address) for d in tamper(packet, data))
            else:
                out.append((data, address))
        return out

    pair.minion.road.datagrams_to_send = tap  # type: ignore[method-assign]
    return seen


def _forge(packet: Packet, coat: bytes | None = None) -> bytes:
    """The segment with ``wf`` cleared (so it is stored unverified) and another coat."""
    header = replace(packet.header, flags=packet.header.flags & ~Flag.WF)
    return pack_packet(
        header, coat if coat is not None else os.urandom(len(packet.coat)), FORGER.sign
    )


def _deliver(pair: Pair, body: dict[str, object]) -> None:
    pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: bool(pair.main.of(MessageReceived)), timeout=60)
    assert pair.until(lambda: bool(pair.minion.of(MessageDelivered)), timeout=60)
    pair.until(lambda: False, timeout=2.0)
    assert pair.main.received() == [body]


# -- sender ------------------------------------------------------------------------------


def test_pipelined_sender_sends_each_segment_once_on_a_clean_net() -> None:
    pair = _pair()
    seen = _tap_minion(pair, lambda packet, data: [data])
    _deliver(pair, _body("clean", 1 << 20))
    numbers = [p.header.segment_number for p in seen]
    count = seen[0].header.segment_count
    assert sorted(numbers) == list(range(count))  # nothing went twice, nothing was missing
    waits = [p.header.segment_number for p in seen if p.header.flags & Flag.WF]
    every = pair.minion.road.config.ack_every
    assert waits == [n for n in range(count) if (n + 1) % every == 0 or n == count - 1]
    # Every segment but the first and the wf ones was stored without checking its signature.
    assert pair.main.road.stats["lazy_segments"] == count - len(waits) - 1
    assert pair.main.road.stats["drop_signature"] == 0
    assert not pair.main.road.lazy_heads  # the finished receiver is no longer found


def test_sender_recovers_tail_loss_by_probing() -> None:
    pair = _pair()
    lost: set[int] = set()

    def drop_tail(packet: Packet, data: bytes) -> list[bytes]:
        header = packet.header
        number = header.segment_number
        if number >= header.segment_count - 5 and number not in lost:
            lost.add(number)
            return []
        return [data]

    _tap_minion(pair, drop_tail)
    _deliver(pair, _body("tail", 64 * 1024))
    assert len(lost) == 5


def test_segment_heads_equal_encode_header() -> None:
    for ids in ((2, 3, 5, 9), (0x12345678, 0xFFFFFFF0, 1, 0xFFFFFFFF)):
        base = sealed_header(
            source_uid=ids[0],
            destination_uid=ids[1],
            session_id=ids[2],
            transaction_id=ids[3],
        )
        for count in (2, 17, 300):
            segments = [os.urandom(800) for _ in range(count - 1)] + [b"x" * 13]
            length = sum(map(len, segments))
            checks = {0: 800, count - 1: 13}
            heads = SegmentHeads.build(base, count, length, checks, 1024)
            assert heads is not None
            make = heads.make
            for index in range(count):
                for flags in (0x08, 0x0C, 0x18, 0x1C):
                    header = _segment_header(base, index, flags, count, length)
                    expected = pack_packet(header, segments[index], lambda b: b"S" * 64)
                    made = make(index, flags, len(segments[index]))
                    assert made + segments[index] + b"S" * 64 == expected


# -- lazy verification under forgery --------------------------------------------------------


def test_forged_segments_before_the_genuine_ones_are_dropped_and_reasked() -> None:
    pair = _pair()
    forged_numbers = {3, 4, 40}
    done: set[int] = set()

    def forge_first(packet: Packet, data: bytes) -> list[bytes]:
        number = packet.header.segment_number
        if number in forged_numbers and number not in done:
            done.add(number)
            return [_forge(packet), data]  # the forgery takes the slot first
        return [data]

    _tap_minion(pair, forge_first)
    body = _body("genuine", 64 * 1024)
    _deliver(pair, body)
    assert pair.main.road.stats["drop_signature"] == len(forged_numbers)
    assert not pair.main.road.lazy_heads


def test_unverified_forged_segments_get_no_reply() -> None:
    pair = _pair()
    held: list[bytes] = []

    def hold_back(packet: Packet, data: bytes) -> list[bytes]:
        if packet.header.segment_number == 0:
            return [data]  # creates the receiver (verified; no wf, so no reply)
        held.append(data)
        return []

    seen = _tap_minion(pair, hold_back)
    pair.minion.road.send_message("main", _body("held", 64 * 1024), pair.net.now)
    road = pair.main.road
    assert pair.until(lambda: any(isinstance(t, MessageReceiver) for t in _txns(pair)))
    pair.net._collect()
    assert not road.datagrams_to_send(pair.net.now)
    drops_before = sum(v for k, v in road.stats.items() if k.startswith("drop_"))
    for packet in seen[1:20]:
        if not packet.header.flags & Flag.WF:
            road.receive_datagram(_forge(packet), ATTACKER, pair.net.now)
    assert not road.datagrams_to_send(pair.net.now)  # no answer to what is not verified
    assert sum(v for k, v in road.stats.items() if k.startswith("drop_")) == drops_before
    assert not pair.main.of(MessageReceived)


def _txns(pair: Pair) -> list[object]:
    return [t for r in pair.main.road.remotes.values() for t in r.transactions.values()]


def test_forgeries_on_every_transmission_cannot_stall_the_message() -> None:
    pair = _pair()

    def forge_always(packet: Packet, data: bytes) -> list[bytes]:
        return [_forge(packet), data]

    _tap_minion(pair, forge_always)
    _deliver(pair, _body("persistent", 64 * 1024))
    # After the first failed box every segment is verified on arrival.
    assert pair.main.road.stats["drop_signature"] > 0


def test_forged_last_segment_of_wrong_length_does_not_nack_the_message() -> None:
    pair = _pair()

    def forge_last(packet: Packet, data: bytes) -> list[bytes]:
        header = packet.header
        if header.segment_number == header.segment_count - 1 and not header.flags & Flag.AF:
            return [_forge(packet, b"short"), data]
        return [data]

    _tap_minion(pair, forge_last)
    _deliver(pair, _body("last", 20 * 1024))
    assert pair.main.road.stats["drop_signature"] == 1
    assert pair.main.road.stats["tx_stale_nack"] == 0


def test_segments_of_another_message_cannot_be_spliced_in() -> None:
    """A stream of genuine segments of an earlier message, fitted with the next message's
    ids, fills every slot it can before the genuine segments come: the box refuses the
    mix, and the message that arrives is the one that was sent."""
    pair = _pair()
    first, second = _body("first", 30 * 1024), _body("other", 30 * 1024)
    captured: dict[int, Packet] = {}

    def capture(packet: Packet, data: bytes) -> list[bytes]:
        captured.setdefault(packet.header.segment_number, packet)
        return [data]

    tap_state = {"tamper": capture}
    _tap_minion(pair, lambda packet, data: tap_state["tamper"](packet, data))
    _deliver(pair, first)
    old = dict(captured)
    spliced: set[int] = set()

    def splice(packet: Packet, data: bytes) -> list[bytes]:
        header = packet.header
        number = header.segment_number
        if number in old and number not in spliced and header.segment_count == len(old):
            spliced.add(number)
            stolen = old[number]
            # Keep the old, genuine signature: it no longer matches the new ids.
            fake = pack_packet(
                replace(header, flags=header.flags & ~Flag.WF),
                stolen.coat,
                lambda _: stolen.foot,
            )
            return [fake, data]
        return [data]

    tap_state["tamper"] = splice
    pair.minion.road.send_message("main", second, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 2, timeout=60)
    pair.until(lambda: False, timeout=2.0)
    assert pair.main.received() == [first, second]
    assert spliced and pair.main.road.stats["drop_signature"] > 0


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "strict"])
def test_strict_and_lazy_receivers_deliver_the_same(lazy: bool) -> None:
    pair = _pair(lazy_verify=lazy)
    body = _body("same", 100 * 1024)
    _deliver(pair, body)
    assert pair.main.road.stats["drop_signature"] == 0


def test_mutated_heads_of_a_lazy_message_are_never_answered_or_stored() -> None:
    """Heads that are not byte for byte what the receiver expects go to the parser."""
    pair = _pair()
    held: list[bytes] = []

    def hold_back(packet: Packet, data: bytes) -> list[bytes]:
        if packet.header.segment_number == 0:
            return [data]
        held.append(data)
        return []

    seen = _tap_minion(pair, hold_back)
    body = _body("mutated", 64 * 1024)
    pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: bool(pair.main.road.lazy_heads))
    pair.net._collect()
    road = pair.main.road
    plain = next(p for p in seen[1:] if not p.header.flags & Flag.WF)
    data = plain.head + plain.coat + plain.foot
    head_length = len(plain.head)
    mutants = [
        data.replace(b"\nsn ", b"\nsn 0", 1),  # leading zero
        data.replace(b"\nhl ", b"\nhl  ", 1),
        data[:19] + data[19:21].upper() + data[21:],
        data[:25] + b"0c" + data[27:],  # wf: verified first
        data[:25] + b"0a" + data[27:],  # bf
        data[: head_length - 2] + data[head_length:],  # no blank line
        data[:head_length] + data[head_length + 1 :],  # pl no longer matches
        data[:30] + b"\xff" + data[31:],
        data[:100],
    ]
    # The shortcut takes none of them (the parser may still accept some, e.g. upper
    # case hex, and then they are stored unverified like any other plain segment).
    taken = [
        i for i, m in enumerate(mutants) if _take(road, m, pair.net.now)
    ]
    assert not taken
    txn = next(iter(road.lazy_heads.values()))
    assert sorted(txn.segments) == [0]
    for mutant in mutants:
        road.receive_datagram(mutant, ATTACKER, pair.net.now)
    assert not road.datagrams_to_send(pair.net.now)
    assert _take(road, data, pair.net.now)
    for data in held:
        road.receive_datagram(data, ATTACKER, pair.net.now)
    pair.minion.road.datagrams_to_send = lambda now, o=pair.minion.road.datagrams_to_send: o(now)
    assert pair.until(lambda: bool(pair.main.of(MessageReceived)))
    assert pair.main.received() == [body]


def _take(road: Road, data: bytes, now: float) -> bool:
    return take_lazy_segment(data, ATTACKER, now, road.lazy_heads, road.config.max_packet_size)
