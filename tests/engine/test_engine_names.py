"""A join whose name the keep cannot store is a counted drop, never an exception.

The join parser and the keep share one name rule (``raetsalt.keep.records.name_problem``),
so nothing the parser accepts can fail later when the name becomes a file name.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raetsalt.engine.identity import valid_name
from raetsalt.errors import KeepError
from raetsalt.keep.records import name_problem, validate_name
from raetsalt.testing.forge import join_request
from raetsalt.testing.pair import road_pair

ATTACKER = ("10.6.6.6", 6666)
# The report's names: each passed the old join regex and failed in the keep.
BAD_NAMES = [":", ".", "..", "=", "@", "+", "a:b", ".hidden", "-rf", "x" * 201, "a b", "é"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_the_keep_refuses_is_a_counted_drop_with_no_reply(name: str) -> None:
    pair = road_pair()
    road = pair.main.road
    for tid in range(1, 51):
        road.receive_datagram(join_request(name, tid=tid), ATTACKER, pair.net.now)
    assert road.stats["drop_body"] == 50
    assert road.datagrams_to_send(pair.net.now) == []
    assert name not in road.remotes_by_name
    assert pair.main_keep.list_roles() == []


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=220) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_the_join_accepts_exactly_what_the_keep_can_store(name: str) -> None:
    stored = name_problem(name) is None
    assert valid_name(name) is stored
    if stored:
        assert validate_name(name) == name
    else:
        with pytest.raises(KeepError):
            validate_name(name)


def test_a_long_bad_name_is_not_echoed_in_full() -> None:
    with pytest.raises(KeepError) as caught:
        validate_name(":" * 10_000, "role")
    assert len(str(caught.value)) < 200
