"""Unfinished messages: what a peer can make a road hold in unfinished messages is bounded.

The attack, sans-IO: an accepted peer announces many 16 MiB
messages and never finishes them.  Memory held stays under the caps (measured with
tracemalloc, not only by the engine's own bookkeeping), every refusal and discard is
counted, stalled messages end after ``reassembly_timeout``, and the session keeps
delivering the peer's other messages.  Honest senders still get everything through when
the caps are tight (refused frames are sent again, nothing deadlocks).
"""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.engine.message import MessageSender
from raetsalt.engine.native.frames import BULK, DATA_HEAD
from raetsalt.engine.reassembly import Reassembly, ReassemblyBudget, charge
from raetsalt.engine.remote import Outgoing
from raetsalt.errors import BadPacket
from raetsalt.keep.policy import Action
from raetsalt.keep.store import MemoryKeep
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, Peer, make_road, road_pair
from raetsalt.wire.enums import BodyKind

MiB = 1024 * 1024
NATIVE = {"native": True}
RAET = {"native": False}


def _frame(seq: int, total: int, offset: int, data: bytes, stream: int = BULK) -> bytes:
    """A native DATA frame (native/frames.py) of message ``seq`` of ``stream``."""
    return DATA_HEAD.pack(1, BodyKind.MSGPACK, stream, seq, total, offset, len(data)) + data


def _claim_seq(channel: Any, stream: int = BULK) -> int:
    """The next sequence number of ``stream``, taken for a forged message."""
    state = channel.scheduler.streams[stream]
    seq = state.next_seq
    state.next_seq += 1
    state.confirmed += 1  # the forged message needs no confirmation
    return seq  # type: ignore[no-any-return]


def _held(road: Any) -> int:
    return road.reassembly.used  # type: ignore[no-any-return]


def _traced(fn: Any) -> int:
    """Bytes still allocated after ``fn()`` ran (what it made the process hold)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _native_pair(**main: Any) -> Pair:
    pair = road_pair(seed=7, main_config={**NATIVE, **main}, minion_config=NATIVE)
    assert pair.connect()
    return pair


# -- native profile -----------------------------------------------------------------------


def test_native_flood_of_unfinished_messages_is_bounded_and_counted() -> None:
    """200 datagrams of 48 B, each announcing a 16 MiB message (the attack as first found)."""
    pair = _native_pair()
    main, attacker = pair.main.road, pair.minion.road
    channel = attacker.remote("main").channel
    # Out of line: they could only wait for earlier ones.
    ahead = channel.scheduler.streams[BULK].next_seq + 1000
    datagrams = [
        channel.seal_packet(_frame(ahead + i, 16 * MiB, (i % 7) * 1300, b"x"))
        for i in range(200)
    ]
    assert max(len(d) for d in datagrams) <= 48

    def attack() -> None:
        for data in datagrams:
            main.receive_datagram(data, MINION_HA, pair.net.now)

    grown = _traced(attack)
    assert grown < 256 * 1024, f"the attack made the main hold {grown} bytes"
    config = main.config
    assert _held(main) <= config.reassembly_per_remote
    assert main.stats["drop_reassembly_limit"] >= 199
    # The peer's own messages still go through, at once, small and bulk.
    sent = [{"n": 0}, {"n": 1, "bulk": "b" * 100_000}, {"n": 2}]
    for body in sent:
        attacker.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 3, timeout=1.0)
    assert sorted(pair.main.received(), key=repr) == sorted(sent, key=repr)


def test_native_stalled_message_in_line_is_discarded_and_later_ones_delivered() -> None:
    pair = _native_pair(reassembly_timeout=5.0)
    main, attacker = pair.main.road, pair.minion.road
    channel = attacker.remote("main").channel
    stalled = _claim_seq(channel)  # the bulk message in line: the attacker's, never finished
    main.receive_datagram(
        channel.seal_packet(_frame(stalled, 16 * MiB, 0, b"y" * 1000)), MINION_HA, pair.net.now
    )
    assert _held(main) == charge(16 * MiB)
    bulk = [{"n": n, "bulk": "b" * 50_000} for n in range(3)]
    for body in bulk:
        attacker.send_message("main", body, pair.net.now)
    attacker.send_message("main", {"small": "not held up"}, pair.net.now)
    assert pair.until(lambda: bool(pair.main.received()), timeout=1.0)
    assert pair.main.received() == [{"small": "not held up"}]  # another stream: no wait
    assert not pair.until(lambda: len(pair.main.received()) > 1, timeout=3.5)  # in line: wait
    assert pair.until(lambda: len(pair.main.received()) == 4, timeout=2.0)
    assert pair.main.received()[1:] == bulk
    assert main.stats["drop_reassembly_timeout"] == 1
    assert _held(main) == 0
    # A late frame of the discarded message is refused, never acknowledged.
    main.receive_datagram(
        channel.seal_packet(_frame(stalled, 16 * MiB, 1000, b"y" * 10)), MINION_HA, pair.net.now
    )
    assert main.stats["drop_reassembly_timeout"] == 2
    assert _held(main) == 0


def test_native_global_cap_holds_across_remotes() -> None:
    pair = _native_pair(reassembly_total=48 * MiB)
    extra = []
    for n in (3, 4):
        ha = (f"10.0.0.{n}", 4510)
        node = Peer(make_road(MemoryKeep(), ha, f"minion{n}", seed=n, native=True))
        pair.net.attach(ha, node.road)
        node.road.connect(MAIN_HA, pair.net.now, name="main")
        extra.append(node)
    assert pair.until(lambda: all(n.road.remote("main").allowed for n in extra), timeout=30)
    main = pair.main.road
    for road in [pair.minion.road] + [n.road for n in extra]:
        channel = road.remote("main").channel
        frame = _frame(channel.scheduler.streams[BULK].next_seq, 16 * MiB, 0, b"z" * 100)
        main.receive_datagram(channel.seal_packet(frame), road.ha, pair.net.now)
    # Two fit (each reserves its 16 MiB and an eighth), the third does not.
    assert _held(main) == 2 * charge(16 * MiB) <= 48 * MiB
    assert main.stats["drop_reassembly_limit"] == 1
    # The refused remote is still heard: its message in line needs no reservation.
    extra[-1].road.send_message("main", {"still": "heard", "x": "x" * 20_000}, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 1, timeout=1.0)


@pytest.mark.parametrize("seed", range(2))
def test_honest_sender_gets_through_tight_caps_on_a_lossy_net(seed: int) -> None:
    # Room for one message: the next one's pieces are refused while a lost piece of the
    # first is still on its way (a congestion-controlled sender runs ahead that far).
    limits = {"max_message_size": 128 * 1024, "reassembly_per_remote": 150 * 1024}
    conditions = Conditions(loss=0.05, duplicate=0.02, jitter=0.003)
    pair = road_pair(
        conditions,
        seed=seed,
        main_config={**NATIVE, **limits, "reassembly_total": 150 * 1024},
        minion_config={**NATIVE, **limits},
    )
    assert pair.connect()
    bodies = [
        {"n": n, "blob": hashlib.sha256(bytes([seed, n])).hexdigest() * 1700}
        for n in range(5)
    ]
    for body in bodies:
        pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == len(bodies), timeout=120)
    assert pair.main.received() == bodies
    assert pair.main.road.stats["drop_reassembly_limit"] > 0  # the caps were really hit
    assert _held(pair.main.road) == 0


def test_ending_the_session_gives_the_reservations_back() -> None:
    pair = _native_pair()
    main, attacker = pair.main.road, pair.minion.road
    channel = attacker.remote("main").channel
    frame = _frame(channel.scheduler.streams[BULK].next_seq, MiB, 0, b"w" * 500)
    main.receive_datagram(channel.seal_packet(frame), MINION_HA, pair.net.now)
    assert _held(main) > 0
    assert pair.main.decide(Action.DELETE, "minion", pair.net.now)  # the operator's -d
    assert "minion" not in main.remotes_by_name
    assert _held(main) == 0


# -- the in-order reassembly on its own (property test) ------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=6),
    chunk=st.integers(1, 1500),
    seed=st.integers(0, 2**32),
    noise=st.lists(
        st.tuples(st.integers(1, 8), st.integers(0, 9000), st.integers(0, 9000),
                  st.integers(0, 300)),
        max_size=10,
    ),
)
def test_reassembly_delivers_exactly_in_order_within_budget(
    sizes: list[int], chunk: int, seed: int, noise: list[tuple[int, int, int, int]]
) -> None:
    """Frames of several messages in any order, duplicated, plus hostile frames: only
    BadPacket escapes, held bytes stay within the budget, honest messages come out whole
    and in order, and closing gives every reservation back."""
    rng = random.Random(seed)
    budget = ReassemblyBudget(64 * 1024, 64 * 1024, 9000)
    delivered: list[bytes] = []
    drops: list[str] = []
    inbox = Reassembly(budget, 1, max_message=9000, timeout=5.0,
                       deliver=lambda kind, data: delivered.append(bytes(data)),
                       drop=lambda reason, detail: drops.append(reason))
    bodies = [rng.randbytes(size) for size in sizes]
    frames = []
    for seq, body in enumerate(bodies, start=1):
        for offset in range(0, max(len(body), 1), chunk):
            piece = body[offset : offset + chunk]
            frames.append((seq, len(body), offset, piece))
    frames += rng.sample(frames, len(frames) // 3)  # duplicates
    rng.shuffle(frames)
    hostile = [(len(bodies) + 100 + s, total, offset, b"h" * length)  # never in line
               for s, total, offset, length in noise]
    now = 0.0
    pending = frames + hostile
    for _ in range(20):  # refused frames are "sent again" until everything is in
        refused = []
        for seq, total, offset, piece in pending:
            plain = b"pad" + piece + b"pad"
            try:
                if not inbox.take(seq, 3, total, offset, plain, 3, len(piece), now):
                    refused.append((seq, total, offset, piece))
            except BadPacket:
                pass
            assert budget.used <= budget.total
        # A sender sends refused frames again, oldest first; the hostile ones never.
        pending = sorted(f for f in refused if f[0] <= len(bodies))
        if not pending:
            break
        now += 0.1
    assert delivered == bodies
    inbox.close()
    assert budget.used == 0 and not budget.by_owner


@pytest.mark.parametrize("touched", [43.27670679050534, 12.5])
def test_a_stalled_message_ends_at_the_deadline_its_timer_names(touched: float) -> None:
    # 43.27...4 + 30 rounds to a time from which 30 back is below 43.27...4: compared
    # that way, the partial was never due, and its timer fired at that instant forever.
    drops: list[object] = []
    inbox = Reassembly(ReassemblyBudget(MiB, MiB, MiB), 1, max_message=MiB, timeout=30.0,
                       deliver=lambda kind, data: None,
                       drop=lambda reason, detail: drops.append(reason))
    assert inbox.take(1, 3, 1000, 0, b"x" * 10, 0, 10, touched)
    due = inbox.get_timer()
    assert due == touched + 30.0
    inbox.on_timer(due)
    assert not inbox.partials and len(drops) == 1
    assert inbox.get_timer() is None
    # ... and so does a gap: message 3 waits for 2, of which nothing came
    assert inbox.take(3, 3, 10, 0, b"y" * 10, 0, 10, touched)
    due = inbox.get_timer()
    assert due == touched + 30.0
    inbox.on_timer(due)
    assert inbox.next_deliver == 4 and len(drops) == 2


# -- raet profile ---------------------------------------------------------------------------


def _raet_first_segments(pair: Pair, count: int, size: int) -> list[bytes]:
    """First segments of ``count`` messages of ``size`` bytes, as the minion would send
    them; the rest never leaves (the minion is detached from the net)."""
    road = pair.minion.road
    remote = road.remote("main")
    body = road.config.body_kind
    out = []
    for n in range(count):
        encoded = b'{"b":"' + b"a" * size + b'"}'
        txn = MessageSender(road, remote, Outgoing(1000 + n, encoded, 1e9, body), now=pair.net.now)
        txn.start(pair.net.now)
        datagrams = road.datagrams_to_send(pair.net.now)
        out.append(datagrams[0][0])
        txn.finish()
    return out


def test_raet_profile_flood_of_unfinished_messages_is_bounded_and_times_out() -> None:
    pair = road_pair(seed=5, main_config={**RAET, "reassembly_timeout": 5.0}, minion_config=RAET)
    assert pair.connect()
    pair.net.detach(MINION_HA)
    firsts = _raet_first_segments(pair, 20, 8 * MiB)
    main = pair.main.road

    def attack() -> None:
        for data in firsts:
            main.receive_datagram(data, MINION_HA, pair.net.now)

    grown = _traced(attack)
    assert grown < 2 * MiB, f"the attack made the main hold {grown} bytes"
    assert _held(main) <= main.config.reassembly_per_remote
    assert main.stats["drop_reassembly_limit"] >= 17  # only a few 8 MiB messages fit
    pair.until(lambda: False, timeout=6.0)
    assert main.stats["drop_reassembly_timeout"] >= 1
    assert _held(main) == 0
    # The session still works for the peer's honest messages, small and segmented.
    pair.net.attach(MINION_HA, pair.minion.road)
    sent = [{"small": 1}, {"big": "b" * 5000}]
    for body in sent:
        pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) == 2, timeout=30)
    assert pair.main.received() == sent
    assert _held(main) == 0


def test_raet_profile_honest_segmented_message_reserves_and_releases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pair = road_pair(seed=6, main_config=RAET, minion_config=RAET)
    assert pair.connect()
    admitted: list[int] = []
    admit = ReassemblyBudget.admit

    def recording(self: ReassemblyBudget, owner: int, size: int, *, waiting: bool = False) -> bool:
        admitted.append(size)
        return admit(self, owner, size, waiting=waiting)

    monkeypatch.setattr(ReassemblyBudget, "admit", recording)
    body = {"big": "q" * 200_000}
    pair.minion.road.send_message("main", body, pair.net.now)
    assert pair.until(lambda: bool(pair.main.received()), timeout=30)
    assert pair.main.received() == [body]
    [size] = admitted
    assert 200_000 < size <= pair.main.road.config.reassembly_per_remote
    assert _held(pair.main.road) == 0
