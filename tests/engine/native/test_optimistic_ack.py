"""Optimistic acks (RFC 9000 21.4; native/recovery.py): a receiver that acknowledges
every counter up to the highest it has seen, lost ones included, no longer grows its
sender's window: the sender skips a counter now and then, and an ack that names one
ends the session.  Honest receivers never name one."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from test_congestion import BODY, MiB, Star, star
from test_rekey import _pair

from raetsalt.engine.events import MessageDelivered, SessionEnded
from raetsalt.engine.native.congestion import Controller
from raetsalt.engine.native.receive import Receiver
from raetsalt.engine.native.recovery import SKIP_GAP, Recovery
from raetsalt.errors import BadPacket
from raetsalt.testing.fakenet import Conditions


class OptimisticReceiver(Receiver):
    """Acknowledges everything from its lowest range up to the highest counter it saw,
    as if nothing were ever lost (the cheater of the attack)."""

    __slots__ = ()

    def _add_range(self, first: int, last: int) -> None:
        ranges = self.ack_ranges
        low = min([first, *(r[0] for r in ranges)])
        high = max([last, *(r[1] for r in ranges)])
        self.ack_ranges = [[low, high]]


def _largest_window(cheat: bool, seed: int) -> tuple[int, Star]:
    """8 MiB from the main to minion1 on the report's path (20 Mbit/s, 50 ms round trip,
    a 64-datagram queue shared by the main's sessions), minion1 cheating or not: the
    largest window its session reached, until it ended or for 3 s."""
    path = star(2, seed=seed)
    if cheat:
        channel = path.minions[1].road.remote("main").channel
        assert channel is not None
        channel.receiver.__class__ = OptimisticReceiver
    sender = path.main.road.remote("minion1").channel
    assert sender is not None
    windows = [sender.cc.cwnd]

    def watch() -> bool:
        if path.main.road.remote("minion1").channel is sender:
            windows.append(sender.cc.cwnd)
        return bool(path.main.of(SessionEnded))

    path.main.road.send_messages("minion1", [BODY] * 8, path.net.now)
    path.until(watch, timeout=3.0)
    return max(windows), path


@pytest.mark.parametrize("seed", [0, 1])
def test_an_optimistic_acker_on_a_shared_link_is_cut_off(seed: int) -> None:
    honest, _ = _largest_window(False, seed)
    cheated, path = _largest_window(True, seed)
    (ended,) = path.main.of(SessionEnded)
    assert ended.remote == "minion1" and ended.reason == "optimistic_ack"
    assert path.main.road.stats["native_ended_optimistic_ack"] == 1
    assert path.main.road.stats["drop_optimistic_ack"] == 1
    assert path.main.road.remote("minion1").channel is None  # closed
    # Caught within a round trip of the first skipped counter after the lies began: the
    # window stayed near an honest session's (unchecked it grew to 2.5 times that, and
    # the shared queue dropped more datagrams than it forwarded).
    assert cheated < 1.5 * honest
    delivered = sum(e.count for e in path.main.of(MessageDelivered) if e.remote == "minion1")
    assert delivered <= len(path.minions[1].received())  # nothing it lacks was "delivered"


@pytest.mark.parametrize("seed", [0, 1])
def test_honest_transfers_never_trip_it(seed: int) -> None:
    # 32 MiB over the shared lossy path (losses, retransmissions, reordering of acks):
    # tens of thousands of counters, dozens of them skipped, no session ended.
    path = star(2, loss=0.01, seed=seed)
    for node in ("minion0", "minion1"):
        path.main.road.send_messages(node, [BODY] * 16, path.net.now)
    assert path.until(
        lambda: all(path.delivered(path.main, n) == 16 for n in ("minion0", "minion1")),
        timeout=300,
    )
    assert not path.main.of(SessionEnded)
    assert path.main.road.stats["drop_optimistic_ack"] == 0
    sent = path.main.road.remote("minion0").channel
    assert sent is not None and sent.recovery.counter > 16 * MiB // 1400
    # The skipped counters were never declared lost or sent again: every retransmission
    # is accounted for by the link's losses.
    assert path.main.road.stats["native_spurious_retransmit"] <= path.down.lost


def test_honest_both_ways_with_jitter_and_duplicates() -> None:
    pair = _pair(Conditions(latency=0.005, loss=0.03, duplicate=0.03, jitter=0.004), seed=7)
    now = pair.net.now
    for n in range(300):
        pair.main.road.send_message("minion", {"n": n, "pad": "x" * (n * 97 % 5000)}, now)
        pair.minion.road.send_message("main", {"n": n, "pad": "y" * (n * 89 % 5000)}, now)
    assert pair.until(
        lambda: len(pair.main.received()) == 300 and len(pair.minion.received()) == 300,
        timeout=120,
    )
    assert not pair.main.of(SessionEnded) and not pair.minion.of(SessionEnded)


class _Sink:
    def __init__(self) -> None:
        self.lost: list[object] = []

    def acked(self, frames: list[object]) -> None:
        pass

    def lose(self, frames: list[object]) -> int:
        self.lost.extend(frames)
        return len(frames)


def _recovery() -> tuple[Recovery, _Sink]:
    sink = _Sink()
    recovery = Recovery(
        Controller(1400, 1 << 21),
        acked=sink.acked,
        lost=sink.lose,  # type: ignore[arg-type]
        stats=Counter(),
        rng=random.Random(4),
    )
    return recovery, sink


def test_a_skipped_counter_is_never_lost_nor_sent_again() -> None:
    recovery, sink = _recovery()
    assert SKIP_GAP[0] <= recovery.skip_at < SKIP_GAP[1]
    for n in range(1, 11):
        recovery.on_sent(0.0, 1000, [n])  # type: ignore[list-item]
    recovery.skip()  # counter 11
    for n in range(12, 31):
        recovery.on_sent(0.0, 1000, [n])  # type: ignore[list-item]
    # Honest acks around the hole, late: everything below is old, so losses are judged.
    recovery.on_ack([(1, 10), (12, 30)], 1.0)
    assert sink.lost == [] and recovery.bytes_in_flight == 0
    assert recovery.stats["native_retransmit"] == 0
    # The probe time-out finds nothing in flight either.
    assert recovery.get_timer() is None and not recovery.on_timeout(10.0)


def test_an_ack_naming_a_skipped_counter_is_refused_before_it_counts() -> None:
    recovery, _ = _recovery()
    for n in range(1, 6):
        recovery.on_sent(0.0, 1000, [n])  # type: ignore[list-item]
    recovery.skip()  # counter 6
    for n in range(7, 10):
        recovery.on_sent(0.0, 1000, [n])  # type: ignore[list-item]
    window = recovery.cc.cwnd
    with pytest.raises(BadPacket, match="never sent"):
        recovery.on_ack([(1, 9)], 0.1)
    assert recovery.bytes_in_flight == 8 * 1000  # nothing freed ...
    assert recovery.cc.cwnd == window  # ... nor counted for the window
