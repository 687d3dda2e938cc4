"""Exact timers with literal clocks: the engine asks to be woken exactly when the protocol
says (raet's redo back-off, time-outs, presence), and does nothing in between."""

from __future__ import annotations

import math
import random

import pytest

from raetsalt.engine import Road, RoadConfig
from raetsalt.engine.events import PresenceChanged, TransactionFailed
from raetsalt.engine.native.alive import PRESENCE_GRID
from raetsalt.engine.remote import SID_BLOCK
from raetsalt.keep.records import AutoMode, KeepState
from raetsalt.testing.pair import MAIN_HA, road_pair
from raetsalt.wire.enums import PacketKind
from raetsalt.wire.packet import parse_packet_untrusted


def _lonely_minion(**config: object) -> Road:
    """A minion whose main never answers."""
    return Road(
        state=KeepState(),
        ha=("10.0.0.2", 4510),
        name="minion",
        config=RoadConfig(auto=AutoMode.ONCE, **config),  # type: ignore[arg-type]
        rng=random.Random(1),
    )


def _kinds(road: Road, now: float) -> list[PacketKind]:
    return [parse_packet_untrusted(d).header.packet_kind for d, _ in road.datagrams_to_send(now)]


def _failures(road: Road) -> list[TransactionFailed]:
    out = []
    while (event := road.next_event()) is not None:
        if isinstance(event, TransactionFailed):
            out.append(event)
    return out


def test_join_redo_doubles_from_one_second_and_times_out_at_five() -> None:
    road = _lonely_minion()
    road.connect(MAIN_HA, 0.0)
    assert _kinds(road, 0.0) == [PacketKind.REQUEST]
    # raet's joiner: redo 1.0 -> 2.0 -> 4.0 seconds, whole join 5.0 seconds.
    for due, sent in ((1.0, 1), (3.0, 1)):
        assert road.get_timer() == due
        road.handle_timer(due - 0.001)  # not yet: nothing happens
        assert _kinds(road, due - 0.001) == []
        road.handle_timer(due)
        assert _kinds(road, due) == [PacketKind.REQUEST] * sent
    assert road.get_timer() == 5.0
    road.handle_timer(5.0)
    assert [(f.kind, f.reason) for f in _failures(road)] == [("join", "timeout")]
    # Then the reconnect back-off: 0.5 s, jittered into [0.25, 0.5].
    retry = road.get_timer()
    assert retry is not None and 5.25 <= retry <= 5.5


def test_reconnect_back_off_doubles_up_to_its_maximum() -> None:
    road = _lonely_minion(join_timeout=1.0, retry_min=0.5, retry_max=4.0)
    road.connect(MAIN_HA, 0.0)
    now, gaps = 0.0, []
    for _ in range(6):
        while True:  # run the join to its time-out
            when = road.get_timer()
            assert when is not None
            now = when
            road.handle_timer(now)
            road.datagrams_to_send(now)
            if _failures(road):
                break
        failed_at = now
        when = road.get_timer()
        assert when is not None
        gaps.append(when - failed_at)
        now = when
        road.handle_timer(now)  # the next attempt starts
    # 0.5, 1, 2, 4, 4, 4 seconds, each jittered into [half, full].
    for gap, full in zip(gaps, (0.5, 1.0, 2.0, 4.0, 4.0, 4.0), strict=True):
        assert full / 2 <= gap <= full


@pytest.mark.parametrize("period", [1.0, 3.0])
def test_presence_probe_after_a_silent_period_and_dead_after_the_alive_timeout(
    period: float,
) -> None:
    # raet's alive: a raet-profile session (native sessions: native/test_native_alive.py)
    pair = road_pair(
        main_config={"native": False},
        minion_config={"presence_period": period, "alive_timeout": 2.0, "native": False},
    )
    assert pair.connect()
    minion, main = pair.minion.road, pair.main.road
    last_rx = minion.remote("main").last_rx
    pair.net.detach(MAIN_HA)  # the main goes silent
    # The next wake-up is the presence probe, one period after the last packet (rounded
    # up to the presence grid, so that many remotes' deadlines share a wake-up).
    probe_at = math.ceil((last_rx + period) / PRESENCE_GRID) * PRESENCE_GRID
    assert last_rx + period <= probe_at < last_rx + period + PRESENCE_GRID
    assert minion.get_timer() == pytest.approx(probe_at)
    minion.handle_timer(probe_at)
    assert _kinds(minion, probe_at) == [PacketKind.REQUEST]
    # raet's aliver: redo 0.25 -> 0.5 -> 1.0 ..., dead 2.0 s after the probe.
    redo = probe_at
    for step in (0.25, 0.5, 1.0):
        redo += step
        assert minion.get_timer() == pytest.approx(redo)
        minion.handle_timer(redo)
        assert _kinds(minion, redo) == [PacketKind.REQUEST]
    assert minion.get_timer() == pytest.approx(probe_at + 2.0)
    minion.handle_timer(probe_at + 2.0)
    presence = []
    while (event := minion.next_event()) is not None:
        if isinstance(event, PresenceChanged):
            presence.append(event.alive)
    assert presence == [False]
    assert main.remote("minion").allowed  # (the main never saw any of it)


def test_session_ids_are_reserved_in_blocks() -> None:
    """The keep stores a reserved sid, not every new one: a re-allow writes nothing
    until the block is used up, and a restart continues after the block."""
    pair = road_pair()
    assert pair.connect()
    remote = pair.minion.road.remote("main")
    assert remote.sid < remote.sid_reserved <= remote.sid + SID_BLOCK
    stored = [r.sid for r in pair.minion_keep.load_remotes()]
    assert stored == [remote.sid_reserved] and stored[0] > remote.sid
    pair.restart_minion()
    assert pair.minion.road.remote("main").sid == stored[0]
