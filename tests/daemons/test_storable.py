"""Every value the lane's, the command socket's and the road's decoders accept can be
stored as JSON (the job cache and the minion data cache): one bytes map key in a return
used to stop the master."""

from __future__ import annotations

import json
import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raetsalt.daemon.datacache import MinionDataCache
from raetsalt.daemon.jobcache import JobCache, encode_entry
from raetsalt.daemon.storable import encode_json, storable
from raetsalt.errors import KeepError

INTS = st.integers(-(2**63), 2**64 - 1)
KEYS = st.one_of(st.text(max_size=8), st.binary(max_size=8), INTS, st.booleans(),
                 st.none(), st.floats(allow_nan=False),
                 st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4)))
SCALARS = st.one_of(st.none(), st.booleans(), INTS, st.floats(), st.text(),
                    st.binary(), st.builds(msgpack.ExtType, st.integers(0, 127),
                                           st.binary(max_size=4)))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=5))
def test_whatever_the_lane_decoder_gives_is_stored(value: dict[Any, Any]) -> None:
    # the lane and the command socket: msgpack with any hashable key
    decoded = msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False,
                              strict_map_key=False)
    text = encode_entry(decoded, "x.json")
    assert isinstance(json.loads(text), dict)


def test_bytes_keys_are_their_repr_beside_str_keys() -> None:
    value = {b"k": 1, "k": 2, "n": {b"\xff": [b"v", (1, b"w")]}, 3: math.inf}
    assert json.loads(encode_json(value, "x")) == {
        "b'k'": 1, "k": 2, "n": {"b'\\xff'": ["b'v'", [1, "b'w'"]]}, "3": math.inf}
    assert storable(msgpack.Timestamp(1)) == repr(msgpack.Timestamp(1))


def test_a_structure_json_has_no_text_for_is_a_keep_error() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(KeepError, match="cannot be stored"):
        encode_json({b"k": loop}, "x")
    deep: Any = {}
    for _ in range(100_000):
        deep = {b"k": deep}
    with pytest.raises(KeepError, match="cannot be stored"):
        encode_json(deep, "x")


def test_the_unqueued_caches_store_bytes_keys_too(tmp_path: Any) -> None:
    cache = JobCache(tmp_path / "jobs")
    cache.save_return("20260101000000000000", "m1", {"return": {b"k": 1}})
    assert cache.get_returns("20260101000000000000")["m1"] == {"return": {"b'k'": 1}}
    grains = MinionDataCache(tmp_path / "minions")
    grains.save("m1", {b"os": "x"})
    assert grains.load_all() == {"m1": {"b'os'": "x"}}
