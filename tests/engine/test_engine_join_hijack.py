"""An unauthenticated packet never changes an established session.

The attack: an unsigned join carrying a known minion's *public* keys (no capture
needed), sent from another address, moved the minion's address and fuid to the attacker,
who then received its jobs; one 259-byte join drew 3,962 bytes (15x) at a spoofable
address.  Here the attacker is a raw host on the FakeNet; the minion and the main keep
talking the whole time.
"""

from __future__ import annotations

import pytest

from raetsalt.engine.events import Allowed
from raetsalt.testing.fakenet import RawHost
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, make_peer, road_pair
from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted

ATTACKER = ("10.6.6.6", 6666)


def _connected(native: bool = True) -> tuple[Pair, RawHost]:
    settings = {"native": native}
    pair = road_pair(seed=21, main_config=settings, minion_config=settings)
    assert pair.connect()
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    return pair, attacker


def _forged_join(pair: Pair, *, tid: int, vacuous: bool) -> bytes:
    """The minion's join as anyone can write it: its public keys are in the main's keep."""
    keys = pair.main_keep.load_role("minion")
    assert keys is not None
    return join_request(
        "minion",
        verhex=keys.verhex,
        pubhex=keys.pubhex,
        source_uid=4242,
        destination_uid=0 if vacuous else pair.main.road.remote("minion").uid,
        tid=tid,
    )


def _ack(join: bytes) -> bytes:
    """The joiner's final ack for the join ``join`` (unsigned, like every join packet)."""
    header = parse_packet_untrusted(join).header
    ack = Header(
        packet_kind=PacketKind.ACK,
        transaction_kind=TransactionKind.JOIN,
        source_uid=header.source_uid,
        destination_uid=header.destination_uid,
        transaction_id=header.transaction_id,
    )
    return pack_packet(ack, b"")


@pytest.mark.parametrize("vacuous", [True, False], ids=["vacuous", "with-ids"])
@pytest.mark.parametrize("native", [True, False], ids=["native", "raet"])
def test_a_forged_join_from_elsewhere_changes_nothing_and_gets_nothing(
    vacuous: bool, native: bool
) -> None:
    pair, attacker = _connected(native)
    main, minion = pair.main.road, pair.minion.road
    before = main.remote("minion")
    ha, fuid, session = before.ha, before.fuid, before.session
    for round_ in range(1, 11):
        join = _forged_join(pair, tid=round_, vacuous=vacuous)
        attacker.send(join, MAIN_HA)
        attacker.send(_ack(join), MAIN_HA)  # completes the forged join, if anything does
        # Jobs keep flowing to the real minion meanwhile, and returns back.
        main.send_message("minion", {"job": round_}, pair.net.now)
        minion.send_message("main", {"ret": round_}, pair.net.now)
        assert pair.until(lambda r=round_: {"job": r} in pair.minion.received(), timeout=5)
        assert pair.until(lambda r=round_: {"ret": r} in pair.main.received(), timeout=5)
    pair.until(lambda: False, timeout=20)  # every retransmission and time-out runs out
    after = main.remote("minion")
    assert after is before and after.allowed
    assert (after.ha, after.fuid, after.session) == (ha, fuid, session)
    assert after.rsid != 0  # never reset by a join: old packets stay stale
    # The attacker got join replies at most, and at most 3 bytes per byte it sent.
    kinds = {parse_packet_untrusted(data).header.transaction_kind for data, _ in attacker.received}
    assert kinds <= {TransactionKind.JOIN}
    assert attacker.received_bytes <= 3 * attacker.sent_bytes
    assert pair.minion.of(Allowed) == pair.minion.of(Allowed)[:1]  # never had to reconnect


def test_one_spoofed_join_draws_at_most_three_times_its_size() -> None:
    pair, victim = _connected()  # the "attacker" address is the victim of a reflection
    join = _forged_join(pair, tid=77, vacuous=True)
    victim.send(join, MAIN_HA)
    pair.until(lambda: False, timeout=15)  # first found: 22 answers, 3,962 B in 15 s
    assert 0 < victim.received_bytes <= 3 * len(join)


def test_a_flood_of_forged_joins_for_a_known_id_holds_bounded_state() -> None:
    pair, attacker = _connected()
    main = pair.main.road
    for tid in range(1, 2001):
        attacker.send(_forged_join(pair, tid=tid, vacuous=True), MAIN_HA)
    pair.until(lambda: False, timeout=1)
    assert len(main.joins) <= main.config.max_joins_per_remote
    assert main.remote("minion").ha == MINION_HA
    assert attacker.received_bytes <= 3 * attacker.sent_bytes
    main.send_message("minion", {"still": "here"}, pair.net.now)
    assert pair.until(lambda: {"still": "here"} in pair.minion.received(), timeout=5)


def test_a_replayed_hello_from_elsewhere_cannot_move_the_estate() -> None:
    """A signed packet proves who made it, not where it comes from: the cookie it draws
    goes to the replayer, who cannot open it, so the allow never completes there."""
    pair = road_pair(seed=5)
    hellos: list[bytes] = []
    original = pair.minion.road.datagrams_to_send

    def tap(now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out = original(now)
        for data, _ in out:
            if data.startswith(b"ri RAET"):
                header = parse_packet_untrusted(data).header
                if header.packet_kind == PacketKind.HELLO:
                    hellos.append(data)
        return out

    pair.minion.road.datagrams_to_send = tap  # type: ignore[method-assign]
    assert pair.connect() and hellos
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    for hello in hellos * 5:
        attacker.send(hello, MAIN_HA)
    pair.until(lambda: False, timeout=10)
    remote = pair.main.road.remote("minion")
    assert remote.ha == MINION_HA and remote.allowed
    assert attacker.received_bytes <= 3 * attacker.sent_bytes
    pair.main.road.send_message("minion", {"after": "replay"}, pair.net.now)
    assert pair.until(lambda: {"after": "replay"} in pair.minion.received(), timeout=5)


@pytest.mark.parametrize("native", [True, False], ids=["native", "raet"])
def test_a_minion_that_really_moved_is_followed_once_its_allow_completes(native: bool) -> None:
    """The same minion (same keep) comes back from another address: its join proposes
    nothing, its allow from there proves it, and the main moves it there."""
    pair, _ = _connected(native)
    moved = ("10.0.0.7", 4777)
    pair.net.detach(MINION_HA)
    pair.minion.drain()
    pair.minion = make_peer(pair.minion.keep, moved, "minion", seed=77, native=native)
    pair.net.attach(moved, pair.minion.road)
    pair.minion.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: bool(pair.minion.of(Allowed)), timeout=30)
    assert pair.until(lambda: pair.main.road.remote("minion").ha == moved, timeout=5)
    pair.main.road.send_message("minion", {"to": "the new address"}, pair.net.now)
    assert pair.until(lambda: {"to": "the new address"} in pair.minion.received(), timeout=5)
