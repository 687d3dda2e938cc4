"""The native frame parser under authenticated garbage: a peer that holds the session key
can put anything inside the box.  Whatever it sends, only counted drops come of it (no
exception escapes the road), and the session keeps working."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.engine.native.frames import BATCH_HEAD, DATA_HEAD
from raetsalt.testing.pair import MINION_HA, Pair, road_pair

_PAIR: dict[str, Pair] = {}


def _new_pair() -> Pair:
    settings = {"native": True}
    pair = road_pair(seed=9, main_config=settings, minion_config=settings)
    assert pair.connect()
    return pair


def _fuzzed_pair() -> Pair:
    """One pair for all the examples (a connect per example would dominate)."""
    if "native" not in _PAIR:
        _PAIR["native"] = _new_pair()
    return _PAIR["native"]


def _inject(pair: Pair, plain: bytes) -> None:
    channel: Any = pair.minion.road.remote("main").channel
    # Raises nothing, whatever the frames say (the road catches only BadPacket).
    pair.main.road.receive_datagram(bytes(channel.seal_packet(plain)), MINION_HA, pair.net.now)


frame = st.one_of(
    st.builds(
        lambda kind, stream, seq, total, offset, data: DATA_HEAD.pack(
            1, kind, stream, seq, total, offset, len(data)
        )
        + data,
        st.integers(0, 255),
        st.integers(0, 3),
        st.integers(0, 70_000),
        st.integers(0, 1 << 25),
        st.integers(0, 1 << 25),
        st.binary(max_size=64),
    ),
    st.builds(
        lambda kind, stream, first, lengths, tail: BATCH_HEAD.pack(
            4, kind, stream, first, len(lengths)
        )
        + struct.pack(f"!{len(lengths)}H", *lengths)
        + tail,
        st.integers(0, 255),
        st.integers(0, 3),
        st.integers(0, 70_000),
        st.lists(st.integers(0, 40), max_size=8),
        st.binary(max_size=200),
    ),
    st.builds(lambda n: struct.pack("!BQ", 3, n), st.integers(0, 2**64 - 1)),
    st.just(b"\x05"),
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(frame, max_size=5))
def test_authenticated_garbage_is_dropped_not_raised(frames: list[bytes]) -> None:
    _inject(_fuzzed_pair(), b"".join(frames))


def test_the_session_still_works_after_the_garbage() -> None:
    pair = _new_pair()
    for junk in (b"\x01" * 30, b"\x04\x03\x00\x00\x00\x00\x01\xff\xff", b"\x07"):
        _inject(pair, junk)
    assert pair.main.road.stats["drop_body"] == 3
    before = len(pair.main.received())
    pair.minion.road.send_message("main", {"still": "works"}, pair.net.now)
    assert pair.until(lambda: len(pair.main.received()) > before, timeout=30)
    assert pair.main.received()[-1] == {"still": "works"}
