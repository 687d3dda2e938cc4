"""A restarted main calls its known remotes back (engine/recall.py): they are all back
within seconds, not after their probe period; at most ``recall_window`` calls at a time,
within the handshake rate; a remote that is gone costs one allow; remotes that are back
already are not called; and no working session is torn down."""

from __future__ import annotations

from helpers.fleet import QUIET, fleet

from raetsalt.engine.events import Allowed, Joined, TransactionFailed
from raetsalt.engine.native.frames import is_native
from raetsalt.engine.recall import WINDOW_MIN, WINDOW_START, Recall
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions, FakeNet
from raetsalt.testing.pair import MAIN_HA, Peer, make_peer
from raetsalt.testing.tap import Tap
from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted


def _allowed(peer: Peer) -> int:
    return len(peer.of(Allowed))


def test_a_restarted_main_calls_its_minions_back_within_its_window_and_rate() -> None:
    pair, minions = fleet(40)
    before = [_allowed(p) for p in minions]
    joins = [len(p.of(Joined)) for p in minions]
    window, rate = 4, 20.0
    pair.restart_main(recall_window=window, handshake_rate=rate, handshake_burst=5.0, **QUIET)
    main = pair.main.road
    restarted = pair.net.now
    most = 0

    def back() -> bool:
        nonlocal most
        calling = sum(
            1 for r in main.remotes.values()
            if (t := r.in_progress(TransactionKind.ALLOW)) is not None and t.initiator
        )
        most = max(most, calling)
        return all(main.remote(p.road.name).allowed for p in minions) and all(
            _allowed(p) > b for p, b in zip(minions, before, strict=True))

    assert pair.until(back, timeout=30.0)
    took = pair.net.now - restarted
    assert took < 10.0  # long before any minion's 30 s probe
    assert main.stats["recall_allow"] == len(minions)  # the main called each, once
    assert 1 <= most <= window
    assert took >= (len(minions) - 5.0) / rate * 0.9  # within the rate (burst 5)
    assert [len(p.of(Joined)) for p in minions] == joins  # allows only, no join
    assert main.stats["handshake_busy"] == 0  # nobody came on their own meanwhile


def test_answered_calls_widen_the_window_and_unanswered_ones_narrow_it() -> None:
    pair, minions = fleet(60)
    pair.restart_main(recall_window=64, **QUIET)
    main = pair.main.road
    recall = main.recall
    assert recall is not None and recall.window == WINDOW_START
    assert pair.until(lambda: all(main.remote(p.road.name).allowed for p in minions),
                      timeout=10.0)
    assert recall.window > WINDOW_START  # one more per answered call
    assert main.stats["recall_window_halved"] == 0
    # Minions too slow to answer within an allow's time-out (4 s): the window halves,
    # at most once a second, down to its least; the calls go on.
    pair, minions = fleet(60)
    pair.net.conditions = Conditions(latency=2.5)
    pair.restart_main(recall_window=64, **QUIET)
    main = pair.main.road
    recall = main.recall
    assert recall is not None
    most = 0

    def watch() -> bool:
        nonlocal most
        most = max(most, len(recall.calling))
        return False

    pair.net.run_until(watch, timeout=12.0)
    assert most <= WINDOW_START
    assert recall.window == WINDOW_MIN and main.stats["recall_window_halved"] >= 2


def test_a_backlog_does_not_stop_the_calls() -> None:
    pair, minions = fleet(6)
    before = [_allowed(p) for p in minions]
    pair.restart_main(recall_window=2, **QUIET)
    main = pair.main.road
    main.admission.loaded = True  # its socket keeps a backlog (the minions' probes)
    assert pair.until(lambda: all(_allowed(p) > b for p, b in zip(minions, before, strict=True)),
                      timeout=10.0)
    assert main.stats["recall_allow"] == len(minions)


def test_a_gone_minion_costs_one_allow_and_no_retry() -> None:
    pair, minions = fleet(3)
    gone = minions[-1]
    pair.net.detach(gone.road.ha)  # switched off
    pair.restart_main(recall_window=8, **QUIET)
    main = pair.main.road
    assert pair.until(lambda: all(main.remote(p.road.name).allowed for p in minions[:-1]),
                      timeout=10.0)
    pair.net.run_until(lambda: False, timeout=20.0)
    assert main.stats["recall_allow"] == len(minions)
    assert not main.remote(gone.road.name).allowed
    assert [(f.kind, f.reason) for f in pair.main.of(TransactionFailed)
            if f.remote == gone.road.name] == [("allow", "timeout")]
    assert main.recall is not None and not main.recall.waiting and not main.recall.calling
    assert main.get_timer() is None or main.get_timer() > pair.net.now  # nothing spins


def test_a_minion_back_already_is_not_called_and_no_session_is_torn_down() -> None:
    pair, minions = fleet(2)
    # The minions found the main on their own before its first timer (window 0 = off, then
    # on): the recall skips them, and the sessions they made stay.
    pair.restart_main(recall_window=0, presence_period=1.0)
    for peer in minions:
        peer.road.alive(peer.road.remote("main").uid, pair.net.now)
    main = pair.main.road
    assert pair.until(lambda: all(main.remote(p.road.name).allowed
                                  and p.road.remote("main").channel for p in minions),
                      timeout=10.0)
    sessions = [p.road.remote("main").channel for p in minions]
    allows = [_allowed(p) for p in minions]
    recall = Recall(main, list(main.remotes))
    main.arm(recall, pair.net.now)
    pair.net.run_until(lambda: False, timeout=10.0)
    assert main.stats["recall_allow"] == 0 and not recall.waiting
    assert [p.road.remote("main").channel for p in minions] == sessions
    assert [_allowed(p) for p in minions] == allows


def test_a_minion_main_or_a_fresh_main_calls_nobody() -> None:
    net = FakeNet(seed=3)
    fresh = make_peer(MemoryKeep(), MAIN_HA, "main", main=True)
    net.attach(MAIN_HA, fresh.road)
    assert fresh.road.recall is None
    pair, _ = fleet(1)
    pair.restart_minion(**QUIET)
    assert pair.minion.road.recall is None  # a minion's main is not its to call back
    pair.restart_main(recall_window=0, **QUIET)
    assert pair.main.road.recall is None


def _kinds(datagrams: list[bytes]) -> list[tuple[int, int]]:
    return [(h.transaction_kind, h.packet_kind) for h in
            (parse_packet_untrusted(d).header for d in datagrams if not is_native(d))]


SLOW_CALLS = {"recall_window": 1, "handshake_rate": 2.0, "handshake_burst": 1.0, **QUIET}
"""One call at a time, two a second: the last of 30 minions would wait about 15 s."""


def test_a_minion_that_asks_first_is_called_next_and_not_told_unallowed() -> None:
    pair, minions = fleet(29)
    pair.restart_main(**SLOW_CALLS)
    main = pair.main.road
    tap = Tap(main)
    pair.net.attach(MAIN_HA, tap)
    last, before_last = minions[-1], minions[-2]
    allows = _allowed(last)
    last.road.alive(last.road.remote("main").uid, pair.net.now)  # its probe, then its alive
    restarted = pair.net.now
    assert pair.until(lambda: main.remote(last.road.name).allowed, timeout=30.0)
    assert pair.net.now - restarted < 5.0  # not after the 28 before it
    assert not main.remote(before_last.road.name).allowed  # nobody else moved
    assert main.stats["recall_hurried"] >= 1
    assert (TransactionKind.ALIVE, PacketKind.UNALLOWED) not in _kinds(tap.sent)
    assert _allowed(last) == allows + 1  # one allow: the main's call, not one of its own
    assert pair.until(lambda: all(main.remote(p.road.name).allowed for p in minions),
                      timeout=30.0)
    assert main.stats["recall_allow"] == len(minions)  # each called once, the last too


def test_a_replayed_alive_from_another_address_moves_nothing_and_costs_what_it_did() -> None:
    pair, minions = fleet(5)
    last = minions[-1]
    tap = Tap(last.road)
    pair.net.attach(last.road.ha, tap)
    pair.net.detach(MAIN_HA)  # (the main is down: the minion's alive goes unanswered)
    last.road.alive(last.road.remote("main").uid, pair.net.now)
    assert pair.net.run_until(
        lambda: (TransactionKind.ALIVE, PacketKind.REQUEST) in _kinds(tap.sent), timeout=30.0)
    [alive] = [d for d in tap.sent if _kinds([d]) == [(TransactionKind.ALIVE,
                                                       PacketKind.REQUEST)]][-1:]
    pair.restart_main(**SLOW_CALLS)
    main = pair.main.road
    now = pair.net.now
    main.handle_timer(now)  # the recall's first call goes out
    main.datagrams_to_send(now)
    recall = main.recall
    assert recall is not None
    order = list(recall.waiting)
    known = main.remote(last.road.name).ha
    forged = alive[:-1] + bytes([alive[-1] ^ 1])
    spoofed = ("10.66.0.1", 4510)
    for data, source in ((alive, spoofed), (forged, known)):
        main.receive_datagram(data, source, now)
        assert main.datagrams_to_send(now) == []
        assert not recall.urgent and list(recall.waiting) == order
        assert main.stats["recall_hurried"] == 0
    # As before: the replay was answered "unallowed" towards the keep's address (held
    # back there by the guard's budget for an address not validated since the restart),
    # nothing to the spoofed one; the forged one was dropped on its signature.
    assert main.stats["tx_stale_unallowed"] == 1
    assert main.stats["drop_signature"] == 1
    # The genuine alive from the keep's address: called next, nothing answered now.
    main.receive_datagram(alive, known, now)
    assert main.datagrams_to_send(now) == []
    assert list(recall.urgent) == [main.remote(last.road.name).uid]
    for _ in range(3):  # its retransmissions change nothing more
        main.receive_datagram(alive, known, now)
    assert len(recall.urgent) == 1 and main.stats["recall_hurried"] == 4
