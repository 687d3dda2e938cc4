"""Handshake load protection (docs/raet-wire.md §8.6): a busy main answers new handshakes "busy" at
once, statelessly and never bigger than the request; the joiner backs off with jitter
and comes back; sessions that work are never torn down while the main is loaded; a main
that restarts with many minions takes them back gradually."""

from __future__ import annotations

import pytest

from raetsalt.engine.busy import ALLOW_HELLO, JOIN_REQUEST, MAX_RESERVED, RESERVED_FOR, Admission
from raetsalt.engine.events import Allowed, Joined, PresenceChanged, TransactionFailed
from raetsalt.engine.native.frames import is_native
from raetsalt.engine.road import Road
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions, FakeNet
from raetsalt.testing.pair import MAIN_HA, Peer, make_peer, road_pair
from raetsalt.testing.tap import Tap
from raetsalt.wire.enums import Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted


def test_admission_is_a_token_bucket_and_refuses_everything_while_loaded() -> None:
    gate = Admission(rate=2.0, burst=3.0)
    assert [gate.admit(0.0) for _ in range(4)] == [True, True, True, False]
    assert gate.admit(0.25) is False  # half a token
    assert gate.admit(0.5) is True  # one token after 0.5 s at 2/s
    assert [gate.admit(100.0) for _ in range(4)] == [True, True, True, False]  # burst cap
    gate.loaded = True
    assert gate.admit(1000.0) is False
    assert Admission(rate=0.0, burst=1.0).admit(0.0) is True  # no limit


def test_an_admitted_join_holds_its_allows_place() -> None:
    gate = Admission(rate=1.0, burst=2.0)
    a, b = ("10.0.0.1", 1), ("10.0.0.2", 1)
    assert gate.admit_handshake(JOIN_REQUEST, a, 0.0)  # takes the allow's token too
    assert gate.bucket.tokens == 0.0
    assert not gate.admit_handshake(ALLOW_HELLO, b, 0.0)  # no place held for b
    gate.loaded = True
    assert gate.admit_handshake(ALLOW_HELLO, a, 0.5)  # a's place: even while loaded
    assert not gate.admit_handshake(ALLOW_HELLO, a, 0.5)  # once
    gate.loaded = False
    assert gate.admit_handshake(JOIN_REQUEST, b, 10.0)
    gate.loaded = True
    assert not gate.admit_handshake(ALLOW_HELLO, b, 10.0 + RESERVED_FOR + 0.1)  # expired
    # Bounded: a flood of admitted joins holds at most MAX_RESERVED places, newest kept.
    flood = Admission(rate=0.0, burst=1.0)
    for i in range(MAX_RESERVED + 100):
        assert flood.admit_handshake(JOIN_REQUEST, ("10.1.0.0", i), 0.0)
    assert len(flood.reserved) == MAX_RESERVED
    assert ("10.1.0.0", 0) not in flood.reserved and ("10.1.0.0", 99) not in flood.reserved


def test_a_joiner_admitted_once_is_not_refused_at_its_allow() -> None:
    """One token's burst and almost no rate: the join is admitted and its allow follows
    without a busy answer (before, the allow was refused and the joiner waited)."""
    pair = road_pair(main_config={"handshake_rate": 0.001, "handshake_burst": 1.0})
    assert pair.connect(timeout=10.0)
    assert not pair.minion.of(TransactionFailed)
    assert pair.main.road.stats["handshake_busy"] == 0
    late = _extra_minion(pair.net, 6, busy_retry=2.0, retry_max=10.0)
    late.road.connect(MAIN_HA, pair.net.now)
    pair.net.run_until(lambda: bool(late.of(TransactionFailed)), timeout=5.0)
    assert [(f.kind, f.reason) for f in late.of(TransactionFailed)] == [("join", "busy")]


def test_a_crowd_of_joiners_does_not_push_out_each_others_joins() -> None:
    """A small join desk and a crowd joining at once, over a slow link: the desk takes
    new joins only as its slots turn over, so no join waiting for its ack is pushed out
    (each minion joins once, never told "unjoined"), and all connect."""
    pair = road_pair(main_config={"max_joins": 8})
    assert pair.connect()
    pair.net.conditions = Conditions(latency=0.2)
    crowd = [_extra_minion(pair.net, 40 + i, busy_retry=1.0, retry_max=4.0) for i in range(30)]
    for peer in crowd:
        peer.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: all(p.of(Allowed) for p in crowd), timeout=60.0)
    main = pair.main.road
    assert main.stats["join_evicted"] == 0 and main.stats["tx_stale_unjoined"] == 0
    assert main.stats["handshake_busy"] > 0
    assert all(len(p.of(Joined)) == 1 for p in crowd)


def test_busy_answers_carry_spread_retry_after_hints_within_bounds() -> None:
    pair = road_pair(main_config={"busy_retry": 2.0, "retry_max": 10.0})
    assert pair.connect()
    main_tap = Tap(pair.main.road)
    pair.net.attach(MAIN_HA, main_tap)
    pair.main.road.admission.loaded = True
    late = [_extra_minion(pair.net, 20 + i, busy_retry=2.0, retry_max=10.0) for i in range(30)]
    started = pair.net.now
    for peer in late:
        peer.road.connect(MAIN_HA, started)
    pair.net.run_until(lambda: all(p.of(TransactionFailed) for p in late), timeout=1.0)
    hints = [h.message_length / 1000 for h in _headers(main_tap.sent)
             if h.packet_kind == PacketKind.BUSY]
    assert len(hints) == len(late)
    # Successive places from busy_retry / 2 on, one per 1/pace (20/s while nothing is
    # admitted), never beyond retry_max.
    assert hints == sorted(hints) and hints[0] >= 1.0 - 0.01
    assert all(0.04 <= b - a <= 0.06 for a, b in zip(hints, hints[1:], strict=False))
    assert max(hints) <= 10.0
    # Each joiner comes back at its place (plus at most 10 % jitter), not all at once.
    for peer in late:
        retry = peer.road.get_timer()
        assert retry is not None and started + 1.0 - 0.01 <= retry <= started + 1.1 * 2.6
    assert len({round(p.road.get_timer() or 0.0, 3) for p in late}) == len(late)


def test_a_forged_busy_hint_delays_a_handshake_by_at_most_retry_max() -> None:
    pair = road_pair()
    minion = pair.minion.road
    uid = minion.connect(MAIN_HA, pair.net.now)
    request = parse_packet_untrusted(minion.datagrams_to_send(pair.net.now)[0][0])
    now = pair.net.now
    for hint in (2**32 - 1, 0):  # the largest hint a head holds; none (the back-off)
        forged = Header(
            packet_kind=PacketKind.BUSY, transaction_kind=TransactionKind.JOIN,
            destination_uid=uid, transaction_id=request.header.transaction_id,
            flags=request.header.flags | Flag.CF, message_length=hint,
        )
        minion.receive_datagram(pack_packet(forged, b""), MAIN_HA, now)
        assert not minion.datagrams_to_send(now)  # nothing answered
        if hint == 0:
            break
        retry = minion.get_timer()
        assert retry is not None and now < retry <= now + minion.config.retry_max * 1.1
        minion.handle_timer(retry)  # the join again, with a new transaction
        request = parse_packet_untrusted(minion.datagrams_to_send(retry)[0][0])
        now = retry
    # One unsigned busy is honoured; the attempt after it ignores them (counted).
    assert minion.stats["busy_rx"] == 1 and minion.stats["drop_unsigned"] == 1
    assert minion.remote(uid).in_progress(TransactionKind.JOIN) is not None
    assert pair.until(lambda: minion.remote(uid).allowed, timeout=30.0)


def _headers(datagrams: list[bytes]) -> list[Header]:
    return [parse_packet_untrusted(d).header for d in datagrams if not is_native(d)]


def _extra_minion(net: FakeNet, index: int, **config: object) -> Peer:
    ha = (f"10.0.1.{index}", 4510)
    peer = make_peer(MemoryKeep(), ha, f"minion{index}", seed=index, **config)
    net.attach(ha, peer.road)
    return peer


def test_a_busy_main_answers_busy_statelessly_and_the_joiner_comes_back() -> None:
    pair = road_pair(main_config={"handshake_rate": 0.5, "handshake_burst": 2.0})
    assert pair.connect()  # a join request and an allow hello: the burst is spent
    main_tap = Tap(pair.main.road)
    pair.net.attach(MAIN_HA, main_tap)
    late = _extra_minion(pair.net, 7, busy_retry=2.0, retry_max=10.0)
    started = pair.net.now
    late.road.connect(MAIN_HA, started)
    remotes_before = len(pair.main.road.remotes)
    pair.net.run_until(lambda: bool(late.of(TransactionFailed)), timeout=5.0)
    assert [(f.kind, f.reason) for f in late.of(TransactionFailed)] == [("join", "busy")]
    # The answer: ids mirrored, unsigned, no body, smaller than the request; no state.
    busy = [h for h in _headers(main_tap.sent) if h.packet_kind == PacketKind.BUSY]
    assert len(busy) == 1 and busy[0].foot_kind == FootKind.NADA
    requests = [d for d in main_tap.received if not is_native(d)]
    assert len(main_tap.sent[-1]) <= len(requests[-1])
    assert len(pair.main.road.remotes) == remotes_before
    assert pair.main.road.stats["handshake_busy"] == 1
    # Back-off: the next attempt comes within busy_retry (2 s), not at once.
    retry = late.road.get_timer()
    assert retry is not None and started + 0.1 * 2.0 <= retry <= started + 2.0 + 0.1
    assert pair.until(lambda: bool(late.of(Allowed)), timeout=60.0)
    assert late.road.remote(late.road.remotes_by_name["main"].uid).allowed
    assert pair.main.road.remote("minion").allowed  # the first minion never noticed


def test_a_loaded_main_keeps_working_sessions_and_refuses_new_handshakes() -> None:
    pair = road_pair(minion_config={"presence_period": 1.0},
                     main_config={"presence_period": 1.0})
    assert pair.connect()
    joins, allows = len(pair.minion.of(Joined)), len(pair.minion.of(Allowed))
    late = _extra_minion(pair.net, 8, busy_retry=2.0, retry_max=8.0)
    pair.main.road.admission.loaded = True  # e.g. its socket keeps a backlog
    started = pair.net.now
    late.road.connect(MAIN_HA, started)
    # A minute of a loaded main: the working session stays up, no handshake happens.
    pair.net.run_until(lambda: False, timeout=60.0)
    assert len(pair.minion.of(Joined)) == joins and len(pair.minion.of(Allowed)) == allows
    assert False not in [e.alive for e in pair.minion.of(PresenceChanged)]
    assert pair.minion.road.remote("main").allowed and pair.main.road.remote("minion").allowed
    failures = late.of(TransactionFailed)
    # Every other attempt ignores the (unsigned) busy answers and times out instead.
    assert failures and {(f.kind, f.reason) for f in failures} == {("join", "busy"),
                                                                   ("join", "timeout")}
    # Backed off: a few attempts a minute, not one per join redo.
    assert 60.0 / 8.0 <= len(failures) <= 60.0 / 1.0
    assert not late.of(Allowed)
    pair.main.road.admission.loaded = False
    assert pair.until(lambda: bool(late.of(Allowed)), timeout=8.0 + 5.0)


def test_a_forged_busy_changes_nothing() -> None:
    pair = road_pair()
    assert pair.connect()
    minion = pair.minion.road
    remote = minion.remote("main")
    for kind, sid, tid in ((TransactionKind.ALLOW, remote.sid, remote.tid),
                           (TransactionKind.JOIN, 0, 12345)):
        forged = Header(
            packet_kind=PacketKind.BUSY, transaction_kind=kind, source_uid=remote.fuid,
            destination_uid=remote.uid, session_id=sid, transaction_id=tid,
        )
        minion.receive_datagram(pack_packet(forged, b""), MAIN_HA, pair.net.now)
    assert minion.stats["drop_stale"] == 2 and minion.stats["busy_rx"] == 0
    assert remote.allowed and minion.remote("main") is remote
    assert minion.datagrams_to_send(pair.net.now) == []  # nothing answered


@pytest.mark.parametrize("count", [40])
def test_a_restarted_main_takes_its_minions_back_gradually(count: int) -> None:
    rate = 10.0
    pair = road_pair(main_config={"handshake_rate": 0.0})
    assert pair.connect()
    minions = [_extra_minion(pair.net, 10 + i, busy_retry=1.0, retry_max=5.0,
                             presence_period=1.0) for i in range(count)]
    for peer in minions:
        peer.road.connect(MAIN_HA, pair.net.now)
    assert pair.until(lambda: all(p.of(Allowed) for p in minions), timeout=60.0)
    before = [len(p.of(Allowed)) for p in minions]
    # The minions come on their own (the main's call-back is test_engine_recall.py's).
    pair.restart_main(handshake_rate=rate, handshake_burst=rate / 2, presence_period=1.0,
                      recall_window=0)
    restarted = pair.net.now
    assert pair.until(
        lambda: all(len(p.of(Allowed)) > b for p, b in zip(minions, before, strict=True)),
        timeout=60.0,
    )
    took = pair.net.now - restarted
    main = pair.main.road
    # Every minion back, with an allow each (keys known: no join), and the main never took
    # more handshakes than its rate allows: a gradual return, not a storm.
    assert all(main.remote(p.road.name).allowed for p in minions)
    admitted = count + 1  # hellos answered (and a few retransmissions at most)
    assert took >= (admitted - rate / 2) / rate * 0.8
    assert main.stats["handshake_busy"] > 0


class Stalled:
    """A road whose loop stops for a while (a slow disk, a long GC, a busy CPU): what
    arrives meanwhile waits in its socket, and its timers wait too."""

    def __init__(self, road: Road) -> None:
        self.road = road
        self.until = 0.0
        self.queue: list[tuple[bytes, tuple[str, int]]] = []

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        self.queue.append((bytes(data), address))
        if now >= self.until:
            self._drain(now)

    def _drain(self, now: float) -> None:
        queue, self.queue = self.queue, []
        for data, address in queue:
            self.road.receive_datagram(data, address, now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        if now < self.until:
            return []
        return self.road.datagrams_to_send(now)

    def get_timer(self) -> float | None:
        when = self.road.get_timer()
        if self.queue or (when is not None and when < self.until):
            return max(self.until, when if when is not None else self.until)
        return when

    def handle_timer(self, now: float) -> None:
        if now >= self.until:
            self._drain(now)
            self.road.handle_timer(now)


@pytest.mark.parametrize("stall", [1.5, 6.0])
def test_a_stalled_main_tears_no_session_down(stall: float) -> None:
    """The main's loop stops for a while (up to two presence periods): its minion's
    session survives; no join, no allow, and the main keeps the minion allowed."""
    pair = road_pair(minion_config={"presence_period": 3.0},
                     main_config={"presence_period": 3.0})
    assert pair.connect()
    joins, allows = len(pair.minion.of(Joined)), len(pair.minion.of(Allowed))
    session = pair.minion.road.remote("main").channel
    stalled = Stalled(pair.main.road)
    pair.net.attach(MAIN_HA, stalled)
    for _ in range(5):  # five stalls, a minute apart
        pair.net.run_until(lambda: False, timeout=10.0)
        stalled.until = pair.net.now + stall
        pair.net.run_until(lambda: False, timeout=50.0)
    assert len(pair.minion.of(Joined)) == joins and len(pair.minion.of(Allowed)) == allows
    assert pair.minion.road.remote("main").channel is session  # the same session
    assert pair.main.road.remote("minion").allowed
    assert pair.minion.road.remote("main").alive
    if stall > 3.0:  # long enough for the minion to notice (its probes went unanswered)
        assert pair.minion.road.stats["native_alive_fallback"] >= 5
