"""Forged ``BUSY`` answers from an attacker who can inject but not drop (shared LAN,
Wi-Fi): for every handshake packet the minion sends, a ``BUSY`` mirroring it (retry after
10 s) reaches the minion before the main's real answer.  The minion must still connect:
a ``BUSY`` answering a signed packet must be signed, and an unsigned one (first
contact) is honoured in one attempt of two at most."""

from __future__ import annotations

from helpers.wire import forged_busy

from raetsalt.engine.native.frames import is_native
from raetsalt.engine.road import Road
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, road_pair
from raetsalt.wire.enums import FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted

HANDSHAKES = {(TransactionKind.JOIN, PacketKind.REQUEST), (TransactionKind.ALLOW, PacketKind.HELLO)}


class Injector:
    """The minion's road on the FakeNet, with the attacker's forgeries injected."""

    def __init__(self, road: Road) -> None:
        self.road = road
        self.forged = 0

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        self.road.receive_datagram(data, address, now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = self.road.datagrams_to_send(now)
        for data, to in out:
            if to != MAIN_HA or is_native(bytes(data)):
                continue
            header = parse_packet_untrusted(bytes(data)).header
            if (header.transaction_kind, header.packet_kind) not in HANDSHAKES:
                continue
            self.forged += 1
            self.road.receive_datagram(forged_busy(header), MAIN_HA, now)
        return out

    def get_timer(self) -> float | None:
        return self.road.get_timer()

    def handle_timer(self, now: float) -> None:
        self.road.handle_timer(now)


def _attacked(pair: Pair) -> Injector:
    injector = Injector(pair.minion.road)
    pair.net.attach(MINION_HA, injector)
    return injector


def test_a_minion_that_knows_its_main_connects_through_forged_busy_answers() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.restart_minion()  # a new handshake from scratch: a signed join, then an allow
    injector = _attacked(pair)
    minion = pair.minion.road
    minion.connect(MAIN_HA, pair.net.now, name="main")
    assert pair.until(lambda: minion.remote("main").allowed, timeout=30.0)
    assert injector.forged >= 2 and minion.stats["busy_rx"] == 0
    assert minion.stats["drop_signature"] == injector.forged


def test_a_minion_at_first_contact_connects_through_forged_busy_answers() -> None:
    pair = road_pair()
    injector = _attacked(pair)
    minion = pair.minion.road
    minion.connect(MAIN_HA, pair.net.now, name="main")
    assert pair.until(lambda: minion.remote("main").allowed, timeout=60.0)
    assert injector.forged >= 2
    assert minion.stats["busy_rx"] <= 1  # unsigned: one attempt in two at most


def test_a_real_busy_answer_to_a_signed_handshake_is_signed_and_honoured() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.restart_minion()
    pair.main.road.admission.loaded = True
    minion = pair.minion.road
    minion.connect(MAIN_HA, pair.net.now, name="main")
    assert pair.until(lambda: minion.stats["busy_rx"] >= 1, timeout=10.0)
    assert minion.stats["drop_signature"] == 0
    assert pair.main.road.stats["handshake_busy"] >= 1
    pair.main.road.admission.loaded = False
    assert pair.until(lambda: minion.remote("main").allowed, timeout=30.0)


def test_signed_busy_answers_are_bounded_per_second() -> None:
    """A flood of "signed" hellos (their signatures are not checked before the busy
    answer) costs the main at most SIGNED_BUSY_RATE signatures a second."""
    import os

    from raetsalt.engine.busy import SIGNED_BUSY_RATE

    pair = road_pair()
    main = pair.main.road
    main.admission.loaded = True
    hello = Header(packet_kind=PacketKind.HELLO, transaction_kind=TransactionKind.ALLOW,
                   source_uid=5, destination_uid=2, session_id=1, transaction_id=1,
                   foot_kind=FootKind.NACL)
    flood = int(SIGNED_BUSY_RATE) + 500
    for index in range(flood):
        data = pack_packet(hello, b"x" * 40, lambda _: os.urandom(64))
        main.receive_datagram(data, ("10.0.7.7", 1000 + index), 0.0)
    assert main.stats["handshake_busy"] == SIGNED_BUSY_RATE
    assert main.stats["handshake_busy_sign_limit"] == 500
    sent = main.datagrams_to_send(0.0)
    assert len(sent) == SIGNED_BUSY_RATE
    assert {parse_packet_untrusted(bytes(d)).header.foot_kind for d, _ in sent} == {FootKind.NACL}
