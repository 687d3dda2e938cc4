"""Native alives: once a native session is up, presence costs no signatures;
a silent remote is still declared dead on raet's schedule, a restarted one is found at
once, and the presence period grows with the number of remotes."""

from __future__ import annotations

import math

import pytest

from raetsalt.engine import Road, RoadConfig
from raetsalt.engine.events import Allowed, Joined, MessageReceived, PresenceChanged
from raetsalt.engine.native import trains
from raetsalt.engine.native.alive import (
    ALIVE_HINT_MAX,
    PRESENCE_GRID,
    announced_period,
    presence_period,
    take_hint_untrusted,
)
from raetsalt.engine.native.frames import (
    ACK_FRAME,
    ACK_HEAD,
    HINT,
    HINT_FRAME,
    RANGE,
    is_native,
    nonce_head,
    parse_prefix_untrusted,
)
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, road_pair
from raetsalt.testing.tap import Tap
from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted


def _raet_kinds(tap: Tap) -> list[tuple[int, int]]:
    """(transaction kind, packet kind) of every raet-format datagram ``tap`` sent."""
    headers = [parse_packet_untrusted(d).header for d in tap.sent if not is_native(d)]
    return [(h.transaction_kind, h.packet_kind) for h in headers]


def _on_grid(when: float) -> float:
    """Presence deadlines are rounded up to the grid."""
    return math.ceil(when / PRESENCE_GRID) * PRESENCE_GRID


def _native_pair(**minion: object) -> tuple[Pair, Tap, Tap]:
    pair = road_pair(minion_config={"presence_period": 3.0, **minion},
                     main_config={"presence_period": 3.0})
    assert pair.connect()
    assert pair.minion.road.remote("main").profile == "native"
    minion_tap, main_tap = Tap(pair.minion.road), Tap(pair.main.road)
    pair.net.attach(MINION_HA, minion_tap)
    pair.net.attach(MAIN_HA, main_tap)
    return pair, minion_tap, main_tap


def test_an_idle_native_session_stays_up_without_a_signed_packet() -> None:
    pair, minion_tap, main_tap = _native_pair()
    pair.net.run_until(lambda: False, timeout=120.0)
    assert _raet_kinds(minion_tap) == [] and _raet_kinds(main_tap) == []
    minion, main = pair.minion.road, pair.main.road
    # A probe per period of silence at most from each side (both have the same period).
    probes = minion.stats["native_alive_tx"] + main.stats["native_alive_tx"]
    assert 120 / 3.0 <= probes <= 2 * 120 / 3.0
    assert minion.stats["native_alive_fallback"] == 0
    for peer in (pair.minion, pair.main):
        assert [e.alive for e in peer.of(PresenceChanged)] == [True]
    assert minion.remote("main").alive and main.remote("minion").alive


def test_a_side_with_a_longer_period_never_probes_a_remote_that_probes_it() -> None:
    """Alives only for remotes that have been silent: a master whose period is longer
    than its minions' (many remotes) is kept informed by their probes alone, at the
    silence it asked for in its HINT frame (0.8 of its own period)."""
    pair = road_pair(minion_config={"presence_period": 3.0},
                     main_config={"presence_period": 3.0, "alive_rate": 0.1})  # 10 s
    assert pair.connect()
    pair.net.run_until(lambda: False, timeout=120.0)
    assert pair.main.road.stats["native_alive_tx"] == 0
    assert pair.minion.road.remote("main").presence_hint == pytest.approx(8.0)
    assert 120 / 8.0 / 1.5 <= pair.minion.road.stats["native_alive_tx"] <= 120 / 8.0 + 1
    assert pair.main.road.remote("minion").alive


def test_a_silent_remote_is_dead_after_the_alive_timeout_via_one_raet_alive() -> None:
    pair, minion_tap, _ = _native_pair(alive_timeout=2.0)
    minion = pair.minion.road
    last_rx = minion.remote("main").last_rx
    pair.net.detach(MAIN_HA)
    probe_at = _on_grid(last_rx + 3.0)
    assert minion.get_timer() == pytest.approx(probe_at)
    minion.handle_timer(probe_at)
    sent = minion.datagrams_to_send(probe_at)
    assert len(sent) == 1 and is_native(bytes(sent[0][0]))  # the probe: a native packet
    assert len(sent[0][0]) < 64
    # Probe again at the redo times, then one signed alive at half the time-out ...
    for redo in (0.25, 0.75):
        assert minion.get_timer() == pytest.approx(probe_at + redo)
        minion.handle_timer(probe_at + redo)
        assert all(is_native(bytes(d)) for d, _ in minion.datagrams_to_send(probe_at + redo))
    assert minion.get_timer() == pytest.approx(probe_at + 1.0)
    minion.handle_timer(probe_at + 1.0)
    sent = minion.datagrams_to_send(probe_at + 1)
    kinds = [parse_packet_untrusted(bytes(d)).header for d, _ in sent]
    assert [(h.transaction_kind, h.packet_kind) for h in kinds] == [
        (TransactionKind.ALIVE, PacketKind.REQUEST)
    ]
    # ... and dead at the alive time-out, as with raet's alive alone.
    now = probe_at + 1.0
    while (when := minion.get_timer()) is not None and when < probe_at + 2.0:
        now = when
        minion.handle_timer(now)
        minion.datagrams_to_send(now)
    assert minion.get_timer() == pytest.approx(probe_at + 2.0)
    minion.handle_timer(probe_at + 2.0)
    assert [e.alive for e in pair.minion.of(PresenceChanged)] == [True, False]
    assert minion.stats["native_alive_fallback"] == 1


def test_a_restarted_main_is_found_by_the_fallback_and_allowed_again_without_a_join() -> None:
    pair, _, _ = _native_pair()
    joins = len(pair.minion.of(Joined))
    allows = len(pair.minion.of(Allowed))
    # From its keep: no session any more, and it does not call back (engine/recall.py;
    # the restart hint is tested in test_engine_recall.py): the minion's fallback finds it.
    pair.restart_main(presence_period=3.0, recall_window=0)
    assert pair.until(lambda: len(pair.minion.of(Allowed)) > allows, timeout=10.0)
    assert len(pair.minion.of(Joined)) == joins  # an allow, not a join
    assert pair.minion.road.stats["native_alive_fallback"] == 1
    assert pair.minion.road.remote("main").profile == "native"
    assert False not in [e.alive for e in pair.minion.of(PresenceChanged)]


def test_a_probe_is_acknowledged_and_moves_the_receivers_presence_clock() -> None:
    pair, _, _ = _native_pair()
    main, minion = pair.main.road, pair.minion.road
    before = main.remote("minion").last_rx
    remote = minion.remote("main")
    assert remote.channel is not None
    minion.alive(remote.uid, pair.net.now)  # start a probe by hand
    assert pair.until(lambda: main.remote("minion").last_rx > before, timeout=1.0)
    pair.net.run_until(lambda: False, timeout=0.5)
    assert minion.remote("main").transactions == {}  # answered and finished


def test_the_presence_period_grows_with_the_number_of_remotes() -> None:
    config = RoadConfig(presence_period=3.0, alive_rate=200.0)
    assert presence_period(config, 1) == 3.0
    assert presence_period(config, 600) == 3.0
    assert presence_period(config, 10_000) == 50.0
    assert presence_period(RoadConfig(presence_period=3.0, alive_rate=0), 10**6) == 3.0
    # In the road: with an alive rate of 0.2 per second, one remote waits 5 s, not 3.
    pair = road_pair(minion_config={"presence_period": 3.0, "alive_rate": 0.2})
    assert pair.connect()
    minion = pair.minion.road
    pair.net.detach(MAIN_HA)
    assert minion.get_timer() == pytest.approx(_on_grid(minion.remote("main").last_rx + 5.0))


def test_a_main_asks_its_remotes_for_a_longer_silence_and_a_remote_bounds_it() -> None:
    config = RoadConfig(presence_period=3.0, alive_rate=200.0)
    assert announced_period(config, 100) == 0.0  # its remotes' own period is fine
    assert announced_period(config, 2000) == pytest.approx(0.8 * 10.0)
    assert announced_period(config, 10_000) == ALIVE_HINT_MAX
    pair = road_pair(minion_config={"presence_period": 3.0})
    assert pair.connect()
    remote = pair.minion.road.remote("main")
    for value, taken in ((8.0, 8.0), ("9", 8.0), (True, 8.0), (float("nan"), 8.0),
                         (float("inf"), 8.0), (-5, 0.0), (1e9, ALIVE_HINT_MAX), (None, 20.0)):
        take_hint_untrusted(remote, value)
        assert remote.presence_hint == taken
    take_hint_untrusted(remote, 8)
    pair.net.detach(MAIN_HA)
    minion = pair.minion.road
    minion.handle_timer(pair.net.now)
    # The next probe comes after 8 s of silence, not 3 (an earlier wake-up finds nothing due).
    while (when := minion.get_timer()) is not None and when < _on_grid(remote.last_rx + 8.0):
        minion.handle_timer(when)
        assert minion.stats["native_alive_tx"] == 0
    assert minion.get_timer() == pytest.approx(_on_grid(remote.last_rx + 8.0))


def _asking_pair() -> Pair:
    """A pair whose main asks for 8 s of silence (its period is 10 s for one remote)."""
    return road_pair(minion_config={"presence_period": 3.0},
                     main_config={"presence_period": 3.0, "alive_rate": 0.1})


def _hints(tap: Tap, pair: Pair, sender: str) -> list[int]:
    """The HINT frames (milliseconds) in the native datagrams ``tap`` saw ``sender`` send,
    opened with the session's key."""
    road = getattr(pair, sender).road
    remote = next(iter(road.remotes.values()))
    channel = remote.channel
    assert channel is not None
    found = []
    for data in tap.sent:
        if not is_native(data):
            continue
        _, counter = parse_prefix_untrusted(data)
        plain = trains.KERNEL.open(channel.box.shared_key, nonce_head(sender == "minion"),
                                   data, counter)
        if plain is None:  # (the other direction's)
            continue
        pos = 0
        while pos < len(plain):
            if plain[pos] == HINT_FRAME:
                found.append(HINT.unpack_from(plain, pos)[1])
                pos += HINT.size
            elif plain[pos] == ACK_FRAME:
                pos += ACK_HEAD.size + plain[pos + 1] * RANGE.size
            else:
                break  # (the frames after it are not this test's)
    return found


def test_the_hint_travels_in_the_sessions_frames_at_the_start_and_in_probe_answers() -> None:
    pair = _asking_pair()
    main_tap = Tap(pair.main.road)
    pair.net.attach(MAIN_HA, main_tap)
    assert pair.connect()
    assert pair.minion.road.remote("main").profile == "native"
    pair.net.run_until(lambda: False, timeout=1.0)
    remote = pair.minion.road.remote("main")
    assert remote.presence_hint == pytest.approx(8.0)  # no message, no daemon: the road
    assert pair.minion.of(MessageReceived) == []
    assert _hints(main_tap, pair, "main") == [8000]
    remote.presence_hint = 0.0  # (as if that datagram was lost)
    pair.minion.road.alive(remote.uid, pair.net.now)  # a probe: the answer carries it
    pair.net.run_until(lambda: False, timeout=1.0)
    assert remote.presence_hint == pytest.approx(8.0)
    assert _hints(main_tap, pair, "main") == [8000, 8000]


def test_a_road_that_asks_for_nothing_sends_no_hint() -> None:
    pair, minion_tap, main_tap = _native_pair()
    minion = pair.minion.road
    minion.alive(minion.remote("main").uid, pair.net.now)
    pair.net.run_until(lambda: False, timeout=10.0)
    assert _hints(main_tap, pair, "main") == [] and _hints(minion_tap, pair, "minion") == []
    assert minion.remote("main").presence_hint == 0.0


def test_a_hint_is_withdrawn_with_zero_when_the_main_no_longer_needs_it() -> None:
    pair = _asking_pair()
    assert pair.connect()
    pair.net.run_until(lambda: False, timeout=1.0)
    remote = pair.minion.road.remote("main")
    assert remote.presence_hint == pytest.approx(8.0)
    channel = pair.main.road.remote("minion").channel
    assert channel is not None
    channel.port = _Asking(pair.main.road, 0.0)  # fewer remotes now: nothing to ask
    pair.minion.road.alive(remote.uid, pair.net.now)
    pair.net.run_until(lambda: False, timeout=1.0)
    assert remote.presence_hint == 0.0


class _Asking:
    """The main's road, asking its remotes for ``period``."""

    def __init__(self, road: Road, period: float) -> None:
        self._road = road
        self._period = period

    def announced_period(self) -> float:
        return self._period

    def __getattr__(self, name: str) -> object:
        return getattr(self._road, name)


def test_a_forged_hint_value_is_bounded() -> None:
    pair = _asking_pair()
    assert pair.connect()
    channel = pair.minion.road.remote("main").channel
    assert channel is not None
    # What a main could put in the frame at most: 2**32 - 1 ms, taken as ALIVE_HINT_MAX.
    plain = bytearray(HINT.pack(HINT_FRAME, 2**32 - 1))
    channel._control_frame_untrusted(HINT_FRAME, plain, 0, pair.net.now)
    assert pair.minion.road.remote("main").presence_hint == ALIVE_HINT_MAX
