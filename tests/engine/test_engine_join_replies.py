"""Join replies that anyone at the main's address can send: a forged ``reject`` must not
end a minion, a forged ``renew`` must not strand it, and another main answering at the
address for a while (fresh keys: a reinstalled host, a rogue) must not either.

Each attack is replayed in a seeded FakeNet with its clock: forged datagrams are handed
to the minion's road as if they came from the main's address (spoofed source)."""

from __future__ import annotations

import pytest

from raetsalt.engine.events import JoinRejected, TransactionFailed
from raetsalt.engine.join import JoinInitiator
from raetsalt.engine.road import Road
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.pair import MAIN_HA, Pair, make_peer, road_pair
from raetsalt.wire.enums import Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet

RAET = {"native": False}
"""Both ends in the raet profile: nothing tells either that the other is raetsalt."""


def _joining(road: Road) -> JoinInitiator | None:
    for remote in road.remotes.values():
        txn = remote.in_progress(TransactionKind.JOIN)
        if isinstance(txn, JoinInitiator):
            return txn
    return None


def _forge(road: Road, kind: PacketKind) -> bytes:
    """An unsigned join reply of ``kind`` mirroring the minion's live join (59 bytes for a
    reject: what the report's attacker sent)."""
    txn = _joining(road)
    assert txn is not None
    header = Header(
        packet_kind=kind, transaction_kind=TransactionKind.JOIN,
        source_uid=txn.destination_uid, destination_uid=txn.source_uid,
        transaction_id=txn.tid, flags=Flag.CF,
    )
    return pack_packet(header, b"")


def _outage(pair: Pair) -> None:
    """The main goes away; the minion notices and starts joining again."""
    pair.net.detach(MAIN_HA)
    assert pair.until(lambda: _joining(pair.minion.road) is not None, timeout=60.0)


def _main_back(pair: Pair) -> None:
    pair.restart_main()
    assert pair.until(lambda: pair.minion.road.remote("main").allowed
                      and pair.main.road.remote("minion").allowed, timeout=120.0)
    mid = pair.minion.road.send_message("main", {"back": True}, pair.net.now)
    assert mid and pair.until(lambda: {"back": True} in pair.main.received(), timeout=30.0)


def test_a_minion_that_knows_its_main_signs_its_joins_and_takes_only_signed_replies() -> None:
    pair = road_pair()
    assert pair.connect()
    assert pair.minion.road.remote("main").signs_joins  # a native session showed it
    assert pair.minion_keep.load_remotes()[0].signs_joins  # and the keep records it
    _outage(pair)
    minion = pair.minion.road
    for kind in (PacketKind.REJECT, PacketKind.RENEW, PacketKind.REFUSE, PacketKind.PEND):
        minion.receive_datagram(_forge(minion, kind), MAIN_HA, pair.net.now)
    assert minion.stats["drop_signature"] == 4
    assert not pair.minion.of(JoinRejected)
    assert _joining(minion) is not None and minion.remote("main").fuid != 0
    _main_back(pair)
    assert not pair.minion.of(JoinRejected)


def test_a_restarted_minion_remembers_that_its_main_signs() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    pair.restart_minion()
    minion = pair.minion.road
    minion.connect(MAIN_HA, pair.net.now)
    txn = _joining(minion)
    assert txn is not None and txn.signed
    minion.receive_datagram(_forge(minion, PacketKind.REJECT), MAIN_HA, pair.net.now)
    assert not pair.minion.of(JoinRejected) and minion.stats["drop_signature"] == 1
    _main_back(pair)


def test_an_unsigned_reject_at_first_contact_ends_the_attempt_but_proves_nothing() -> None:
    pair = road_pair()
    minion = pair.minion.road
    minion.connect(MAIN_HA, pair.net.now)
    forged = _forge(minion, PacketKind.REJECT)
    assert len(forged) < 64  # the whole attack
    minion.receive_datagram(forged, MAIN_HA, pair.net.now)
    rejected = pair.minion.of(JoinRejected)
    assert [(r.here, r.authenticated) for r in rejected] == [(False, False)]
    assert minion.stats["join_reject_unauthenticated"] == 1
    assert pair.until(lambda: any(r.allowed for r in minion.remotes.values()), timeout=60.0)


def test_a_main_signs_its_replies_to_a_signed_request_and_only_then() -> None:
    pair = road_pair()
    assert pair.connect()
    pair.net.detach(MAIN_HA)
    pair.restart_minion()
    pair.net.attach(MAIN_HA, pair.main.road)
    sent: list[bytes] = []
    main = pair.main.road
    real = main.transmit

    def tap(header: Header, coat: bytes, address: tuple[str, int]) -> None:
        if header.transaction_kind == TransactionKind.JOIN:
            sent.append(bytes([header.foot_kind]))
        real(header, coat, address)

    main.transmit = tap  # type: ignore[method-assign]
    assert pair.connect()
    assert sent and set(sent) == {bytes([FootKind.NACL])}
    # A raet-profile pair: nothing signed, as raet 0.6.8 expects.
    plain = road_pair(main_config=RAET, minion_config=RAET)
    assert plain.connect()
    assert not plain.minion.road.remote("main").signs_joins


@pytest.mark.parametrize("config", [RAET, {}], ids=["raet-profile", "native"])
def test_a_forged_renew_during_an_outage_does_not_strand_the_minion(config: dict[str, bool]
                                                                    ) -> None:
    """The report's sequence: the renew arrives during the outage (raet profile: taken,
    unsigned as raet's, the minion drops its id at the main; native: a counted drop); the
    main comes back while the minion waits between two join attempts, so the main's call
    meets "unjoined" and the main joins the minion first.  The minion must not then be
    left joined with no id there (fuid 0: allows with de 0, dropped by the main for
    ever), as it was."""
    pair = road_pair(main_config=config, minion_config=config)
    assert pair.connect()
    _outage(pair)
    minion = pair.minion.road
    minion.receive_datagram(_forge(minion, PacketKind.RENEW), MAIN_HA, pair.net.now)
    pair.net.run_until(lambda: False, timeout=20.0)
    # Between two attempts: no join of the minion's own would mend its ids.
    assert pair.until(lambda: _joining(minion) is None, timeout=60.0)
    _main_back(pair)
    assert pair.main.road.stats["drop_ids"] == 0  # no allow went out with de 0


@pytest.mark.parametrize("config", [RAET, {}], ids=["raet-profile", "native"])
def test_another_main_answering_at_the_address_for_a_while_does_not_strand_the_minion(
    config: dict[str, bool],
) -> None:
    pair = road_pair(main_config=config, minion_config=config)
    assert pair.connect()
    _outage(pair)
    other = make_peer(MemoryKeep(), MAIN_HA, "main", main=True, seed=99, **config)
    pair.net.attach(MAIN_HA, other.road)
    pair.net.run_until(lambda: False, timeout=18.0)
    assert not pair.minion.road.remote("main").allowed
    _main_back(pair)
    # The other main's key was refused, never taken for the main's.
    assert all(r.here for r in pair.minion.of(JoinRejected))
    assert "main" in pair.minion_keep.list_denied()
    failures = {f.reason for f in pair.minion.of(TransactionFailed) if f.kind == "join"}
    assert failures <= {"timeout", "rejected", "busy"}
