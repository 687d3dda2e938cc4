"""Blind joins must not make recall an amplifier: with auto-accept, an attacker who
spoofs a victim's address can send join requests and their acks (every id in them is
its own choice) without receiving anything.  The main must not store such a remote as
joined (its address never proved it receives), and at its restarts it must never send
the victim more than three times what came from the victim's address."""

from __future__ import annotations

from raetsalt.engine.events import Allowed
from raetsalt.testing.fakenet import RawHost
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import road_pair
from raetsalt.wire.enums import Flag, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted

CALL_CREDIT = 512  # raetsalt.engine.recall.CALL_CREDIT: one allow hello
VICTIM_HA = ("10.0.9.9", 4510)
GHOSTS = 20


def _blind_join(index: int) -> list[bytes]:
    """A join request for a new id and its blind ack (vacuous: ``de`` 0, as raet's)."""
    uid, tid = 100 + index, 1
    request = join_request(f"ghost{index}", source_uid=uid, tid=tid)
    ack = Header(packet_kind=PacketKind.ACK, transaction_kind=TransactionKind.JOIN,
                 source_uid=uid, destination_uid=0, transaction_id=tid, flags=Flag(0))
    return [request, pack_packet(ack, b"")]


def test_blind_joins_are_not_stored_and_restarts_send_the_victim_little() -> None:
    pair = road_pair(main_config={"handshake_rate": 0.0})
    assert pair.connect()  # a real minion, which recall must still call back
    victim = RawHost()
    pair.net.attach(VICTIM_HA, victim)
    spoofed = 0
    for index in range(GHOSTS):
        for data in _blind_join(index):
            spoofed += len(data)
            pair.main.road.receive_datagram(data, VICTIM_HA, pair.net.now)
        pair.net.run_until(lambda: False, timeout=0.2)
    main = pair.main.road
    ghosts = [r for r in main.remotes.values() if r.name.startswith("ghost")]
    assert ghosts and all(r.joined for r in ghosts)  # the joins completed, blind
    assert {r.name for r in pair.main_keep.load_remotes()} == {"minion"}  # none stored
    for _ in range(3):
        before = len(pair.minion.of(Allowed))
        pair.restart_main()
        assert pair.until(lambda b=before: len(pair.minion.of(Allowed)) > b, timeout=30.0)
        pair.net.run_until(lambda: False, timeout=10.0)
    assert victim.received_bytes <= 3 * spoofed


def test_a_recall_to_an_address_that_stays_silent_costs_one_hello() -> None:
    pair = road_pair(main_config={"handshake_rate": 0.0})
    assert pair.connect()
    pair.net.detach(("10.0.0.2", 4510))  # the minion is gone; a stranger has its address
    pair.net.run_until(lambda: False, timeout=0.5)  # what it sent last has arrived
    stranger = RawHost()
    pair.net.attach(("10.0.0.2", 4510), stranger)
    pair.restart_main()
    pair.net.run_until(lambda: False, timeout=30.0)
    hellos = [d for d, _ in stranger.received
              if parse_packet_untrusted(d).header.packet_kind == PacketKind.HELLO]
    assert len(hellos) == 1 and len(hellos[0]) <= CALL_CREDIT
    assert stranger.received_bytes <= CALL_CREDIT
    assert pair.main.road.stats["tx_unvalidated_limit"] >= 1  # its retransmissions
