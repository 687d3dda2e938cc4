"""The masters' messages to each other and the cluster_peers allow-list (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.keep.policy import KeyPolicy
from raetsalt.keep.records import Acceptance, AutoMode
from raetsalt.services import clusterwire as wire

JID = "20261126190000123456"


def test_messages_round_trip() -> None:
    held = list(wire.held({f"m{i}": {"os": "Linux"} for i in range(120)}))
    assert len(held) == 3  # chunked
    parsed = [wire.parse_untrusted(body) for body in held]
    assert all(isinstance(m, wire.Held) for m in parsed)
    assert sum(len(m.minions) for m in parsed if isinstance(m, wire.Held)) == 120
    [pub] = list(wire.pub(JID, ["m1", "m2"], {"jid": JID, "fun": "test.ping"}))
    assert wire.parse_untrusted(pub) == wire.Pub(JID, ["m1", "m2"],
                                                 {"jid": JID, "fun": "test.ping"})
    assert wire.parse_untrusted(wire.ret("m1", {"jid": JID})) == wire.Ret("m1", {"jid": JID})
    [gone] = list(wire.gone(["m1"]))
    assert wire.parse_untrusted(gone) == wire.Gone(["m1"])


@pytest.mark.parametrize("body", [
    None, [], {"cluster": "nope"}, {"cluster": "held", "minions": ["m1"]},
    {"cluster": "held", "minions": {"../x": None}},
    {"cluster": "gone", "minions": ["m"] * (wire.MAX_MINIONS + 1)},
    {"cluster": "pub", "jid": "x", "minions": ["m1"], "body": {"jid": "x"}},
    {"cluster": "pub", "jid": JID, "minions": ["m1"], "body": {"jid": "20261126190000999999"}},
    {"cluster": "ret", "minion": 5, "body": {"jid": JID}},
    {"cluster": "ret", "minion": "m1", "body": {"jid": 5}},
])
def test_malformed_messages_are_none(body: Any) -> None:
    assert wire.parse_untrusted(body) is None


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4)
                    | st.dictionaries(st.text(max_size=8), c, max_size=4), max_leaves=20))
def test_parse_never_raises(body: Any) -> None:
    wire.parse_untrusted(body)
    wire.parse_untrusted({"cluster": "pub", "jid": JID, "minions": body, "body": body})


def test_peers_allow_list_and_who_starts() -> None:
    peers = wire.Peers.parse(["127.0.0.1:5000", "10.0.0.2", "[::1]:6000"], 4520)
    assert peers.admits(("127.0.0.1", 5000))
    assert not peers.admits(("127.0.0.1", 5001))
    assert peers.admits(("10.0.0.2", 4520))
    assert peers.admits(("::1", 6000))
    # the peers after our address; the others start the session with us
    assert peers.to_connect(("127.0.0.1", 5500)) == [("::1", 6000)]
    assert peers.to_connect(("127.0.0.1", 4000)) == [("127.0.0.1", 5000), ("::1", 6000)]
    assert peers.to_connect(("::1", 6000)) == []
    for bad in ("", "h:x", "h:0", ":5", 5):
        with pytest.raises(wire.PeerConfigError):
            wire.Peers.parse([bad], 4520)


def test_only_the_cluster_keys_join_and_nothing_is_recorded() -> None:
    policy = KeyPolicy(AutoMode.ALWAYS, only=lambda v, p: (v, p) == ("a" * 64, "b" * 64))
    ok = policy.decide("mb", "a" * 64, "b" * 64, None)
    assert ok.acceptance is Acceptance.ACCEPTED
    # the cluster's verify key with another public key: refused, nothing recorded
    forged = policy.decide("mb", "a" * 64, "c" * 64, None)
    assert forged.acceptance is Acceptance.REJECTED and forged.record is None
    assert forged.denied is None and forged.unpinned


def test_pillar_messages_are_chunked_and_checked() -> None:
    bodies = list(wire.pillars({f"m{i}": {"team": "blue"} for i in range(25)}))
    assert len(bodies) == 3
    parsed = [wire.parse_untrusted(body) for body in bodies]
    assert sum(len(m.minions) for m in parsed if isinstance(m, wire.Pillars)) == 25
    bad_ones: list[Any] = [{"m1": None}, {"bad id!": {}}, {f"m{i}": {} for i in range(11)}, []]
    for bad in bad_ones:
        assert wire.parse_untrusted({"cluster": "pillar", "minions": bad}) is None
