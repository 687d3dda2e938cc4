"""Address migration of a native session after path validation (native/migration.py):
NAT rebinding and a new IP move the session without a new join or allow; a forged
datagram, or a genuine one re-sent from elsewhere, never moves it."""

from __future__ import annotations

from raetsalt.engine.events import Allowed, Joined
from raetsalt.engine.native.migration import CHALLENGES, response
from raetsalt.testing.fakenet import Conditions, RawHost
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, road_pair

REBOUND = (MINION_HA[0], 40001)
"""The minion's address after its NAT rebinds (same host, another port)."""
ELSEWHERE = ("10.9.9.9", 4510)
"""The minion's address on another network."""
ATTACKER = ("10.6.6.6", 6666)


def _pair() -> Pair:
    pair = road_pair(Conditions(latency=0.01), seed=3)
    assert pair.connect()
    return pair


def _move_minion(pair: Pair, to: tuple[str, int]) -> None:
    """The minion's datagrams now come from ``to`` (it does not know: a NAT did it)."""
    pair.net.detach(MINION_HA)
    pair.net.attach(to, pair.minion.road)


def _exchange(pair: Pair, count: int) -> None:
    """Messages both ways, all received once and in order."""
    before_main, before_minion = len(pair.main.received()), len(pair.minion.received())
    up = [{"up": n, "pad": "u" * 3000} for n in range(count)]
    down = [{"down": n, "pad": "d" * 3000} for n in range(count)]
    for body in up:
        pair.minion.road.send_message("main", body, pair.net.now)
    for body in down:
        pair.main.road.send_message("minion", body, pair.net.now)
    assert pair.until(
        lambda: len(pair.main.received()) == before_main + count
        and len(pair.minion.received()) == before_minion + count,
        timeout=30,
    )
    assert pair.main.received()[before_main:] == up
    assert pair.minion.received()[before_minion:] == down


def test_nat_rebinding_moves_the_session_without_a_new_handshake() -> None:
    pair = _pair()
    handshakes = len(pair.main.of(Allowed)), len(pair.main.of(Joined))
    _exchange(pair, 3)
    channel = pair.channel("main")
    controller = channel.cc
    _move_minion(pair, REBOUND)
    _exchange(pair, 10)  # traffic both ways across the move
    remote = pair.main.road.remote("minion")
    assert remote.ha == REBOUND and remote.trusted
    assert pair.main.road.stats["native_migrated"] == 1
    assert (len(pair.main.of(Allowed)), len(pair.main.of(Joined))) == handshakes
    # The same host: the path's measurements are kept (not the window as it was: what
    # went to the old address is lost, and declared so, which may reduce it).
    assert channel.cc is controller and channel.cc.min_rtt < float("inf")
    saved = {r.name: r for r in pair.main_keep.load_state().remotes}
    assert tuple(saved["minion"].ha) == REBOUND  # persisted


def test_a_new_address_elsewhere_moves_the_session_and_measures_the_new_path() -> None:
    pair = _pair()
    _exchange(pair, 3)
    channel = pair.channel("main")
    _move_minion(pair, ELSEWHERE)
    pair.minion.road.send_message("main", {"hello": "from elsewhere"}, pair.net.now)
    assert pair.until(lambda: pair.main.road.remote("minion").ha == ELSEWHERE, timeout=5)
    assert not channel.cc.min_rtt < float("inf")  # another host: measured afresh
    _exchange(pair, 5)
    assert pair.main.road.stats["native_migrated"] == 1


def test_a_forged_datagram_from_another_address_is_dropped_and_never_answered() -> None:
    pair = _pair()
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    channel = pair.channel("minion")
    # The native prefix the main expects (its uid for the minion, a fresh counter), but
    # a box made without the session key.
    forged = bytes(channel.seal_packet(b"\x05"))
    forged = forged[:14] + bytes(len(forged) - 14)
    attacker.send(forged, MAIN_HA)
    pair.until(lambda: False, timeout=2.0)
    assert pair.main.road.remote("minion").ha == MINION_HA
    assert attacker.received == []
    assert pair.main.road.stats["drop_decrypt"] >= 1
    _exchange(pair, 2)


def test_a_genuine_datagram_resent_from_elsewhere_gets_challenges_but_never_moves() -> None:
    # Someone on the path copies a datagram of the minion and sends it from their own
    # address first: it is authenticated and the newest, so the main challenges that
    # address, but only the minion can answer, and not from there.
    pair = _pair()
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    copied = bytes(pair.channel("minion").seal_packet(b"\x05"))
    attacker.send(copied, MAIN_HA)
    pair.until(lambda: False, timeout=5.0)
    remote = pair.main.road.remote("minion")
    assert remote.ha == MINION_HA and remote.trusted
    assert 1 <= len(attacker.received) <= CHALLENGES
    # Anti-amplification: never more than three times what came from there.
    assert attacker.received_bytes <= 3 * len(copied)
    assert pair.main.road.stats["native_path_failed"] == 1
    assert pair.main.road.stats["native_migrated"] == 0
    _exchange(pair, 3)  # the session goes on at the validated address
    assert pair.main.road.remote("minion").ha == MINION_HA


def test_a_challenge_answered_from_the_old_address_does_not_move_the_session() -> None:
    pair = _pair()
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    channel = pair.channel("main")
    attacker.send(bytes(pair.channel("minion").seal_packet(b"\x05")), MAIN_HA)
    assert pair.until(lambda: bool(attacker.received), timeout=2.0)
    path = channel.path
    assert path is not None and path.address == ATTACKER
    # The minion's own answer (the attacker relayed the challenge to it), coming from
    # its validated address, or from a third one: right token, wrong address.
    minion = pair.channel("minion")
    for source in (MINION_HA, ELSEWHERE):
        answer = bytes(minion.seal_packet(response(path.token)))
        pair.main.road.receive_datagram(answer, source, pair.net.now)
        assert pair.main.road.remote("minion").ha == MINION_HA
    assert pair.main.road.stats["native_migrated"] == 0


def test_an_older_datagram_from_another_address_starts_no_validation() -> None:
    # Only the newest datagram (the highest counter) can start a validation: one delayed
    # or copied from an old path is taken (it is authenticated) but moves nothing.
    pair = _pair()
    attacker = RawHost()
    pair.net.attach(ATTACKER, attacker)
    old = bytes(pair.channel("minion").seal_packet(b"\x05"))
    _exchange(pair, 2)  # newer datagrams of the minion arrive meanwhile
    attacker.send(old, MAIN_HA)
    pair.until(lambda: False, timeout=2.0)
    assert attacker.received == []
    assert pair.channel("main").path is None
