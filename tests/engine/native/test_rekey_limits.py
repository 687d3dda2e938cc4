"""The limits on key rotation (native/rekey.py): a path that drops only the key frames
cannot keep a session on one key past ``native_reject_*`` (the session is ended and
handshaken again), and a peer cannot make us rotate more often than
``native_rekey_min_gap`` allows."""

from __future__ import annotations

from raetsalt.engine.events import Allowed, SessionEnded
from raetsalt.engine.native.channel import FLUSH_BYTES
from raetsalt.engine.native.frames import KEY_FRAME, PREFIX, TAG
from raetsalt.engine.road import Road
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import MAIN_HA, MINION_HA, Pair, road_pair

KEY_DATAGRAM = PREFIX.size + KEY_FRAME.size + TAG
"""The size of a datagram carrying a KEY_OFFER or KEY_ACCEPT alone (67 bytes)."""


class KeyFrameDropper:
    """A road whose datagrams of the key frames' size never leave (what an on-path
    attacker who singles them out does); everything else passes."""

    def __init__(self, road: Road) -> None:
        self.road = road
        self.dropped = 0

    def receive_datagram(self, data: bytes, address: tuple[str, int], now: float) -> None:
        self.road.receive_datagram(data, address, now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes | bytearray, tuple[str, int]]]:
        out = self.road.datagrams_to_send(now)
        kept = [(d, a) for d, a in out if len(d) != KEY_DATAGRAM]
        self.dropped += len(out) - len(kept)
        return kept

    def get_timer(self) -> float | None:
        return self.road.get_timer()

    def handle_timer(self, now: float) -> None:
        self.road.handle_timer(now)


def _connected(seed: int = 0, **config: object) -> Pair:
    settings = {"native": True, **config}
    pair = road_pair(
        Conditions(latency=0.01), seed=seed, main_config=settings, minion_config=settings
    )
    assert pair.connect()
    return pair


def _droppers(pair: Pair) -> tuple[KeyFrameDropper, KeyFrameDropper]:
    main, minion = KeyFrameDropper(pair.main.road), KeyFrameDropper(pair.minion.road)
    pair.net.attach(MAIN_HA, main)
    pair.net.attach(MINION_HA, minion)
    return main, minion


def _pings(pair: Pair, seconds: int) -> int:
    """A message each way every second for ``seconds``; returns how many went each way."""
    for n in range(seconds):
        now = pair.net.now
        pair.minion.road.send_message("main", {"up": n}, now)
        pair.main.road.send_message("minion", {"down": n}, now)
        pair.until(lambda: False, timeout=1.0)
    return seconds


def test_dropping_only_key_frames_cannot_keep_a_session_on_its_first_key() -> None:
    pair = _connected()
    main_drops, minion_drops = _droppers(pair)
    sent = _pings(pair, 200)
    assert pair.until(
        lambda: len(pair.main.received()) == sent and len(pair.minion.received()) == sent,
        timeout=30,
    )
    assert main_drops.dropped > 100 and minion_drops.dropped > 100  # offers kept coming
    # The key reached its maximum age (180 s) with no rotation: the session was ended,
    # reported once per end that tripped, and handshaken again; nothing was lost.
    ended = pair.main.of(SessionEnded) + pair.minion.of(SessionEnded)
    assert ended and {e.reason for e in ended} == {"key_expired"}
    assert len(pair.main.of(SessionEnded)) <= 1 and len(pair.minion.of(SessionEnded)) <= 1
    assert len(pair.main.of(Allowed)) >= 2 and len(pair.minion.of(Allowed)) >= 2
    for side in ("main", "minion"):
        keys = pair.channel(side).keys
        assert pair.net.now - keys.installed_at < 180, side
    assert pair.main.received() == [{"up": n} for n in range(sent)]
    assert pair.minion.received() == [{"down": n} for n in range(sent)]


def test_dropping_only_key_frames_ends_the_session_at_the_message_limit() -> None:
    # Rotation every 100 datagrams: without one, the key is refused after 150.
    pair = _connected(seed=1, native_rekey_packets=100, native_reject_packets=150)
    _droppers(pair)
    count = 600
    now = pair.net.now
    for n in range(count):
        pair.main.road.send_message("minion", {"n": n, "pad": "x" * 3000}, now)
    assert pair.until(lambda: len(pair.minion.received()) == count, timeout=120)
    assert pair.minion.received() == [{"n": n, "pad": "x" * 3000} for n in range(count)]
    ended = pair.main.of(SessionEnded)
    assert ended and {e.reason for e in ended} == {"key_expired"}
    assert pair.main.road.stats["native_ended_key_expired"] == len(ended)
    # (checked once per flush: a flush may seal up to FLUSH_BYTES more)
    assert pair.channel("main").keys.sealed < 150 + FLUSH_BYTES // 1400


def test_the_limits_stay_above_the_rotation_they_back_up() -> None:
    # Configured below the rotation: they are raised, so a rotation always comes first.
    pair = _connected(seed=2, native_rekey_interval=0.5, native_reject_after=0.1)
    _pings(pair, 5)
    assert pair.channel("main").keys.rotations >= 3
    assert not pair.main.of(SessionEnded) and not pair.minion.of(SessionEnded)
    assert len(pair.main.of(Allowed)) == 1


def test_a_peer_cannot_force_rotations_faster_than_the_minimum_gap() -> None:
    pair = _connected(seed=3)
    # A hostile minion offers the next key as soon as the previous rotation is done.
    pair.channel("minion").keys.interval = 0.0
    sent = _pings(pair, 20)
    assert pair.until(lambda: len(pair.main.received()) == sent, timeout=10)
    main = pair.channel("main")
    # Every rotation costs the main a key pair and a Diffie-Hellman: at most one per gap
    # (5 s), where an unlimited main answered hundreds a second.
    assert 1 <= main.keys.rotations <= 20 // 5 + 1
    assert pair.main.road.stats["drop_rekey_rate"] > 0  # the early offers were counted
    assert len(pair.main.of(Allowed)) == 1  # the session itself was not disturbed
    assert pair.minion.received() == [{"down": n} for n in range(sent)]
