"""Bus bookkeeping: Salt's five match types, bounded listener queues, fire_master expansion."""

from __future__ import annotations

import msgpack
import pytest

from raetsalt.bus import EventBus, encode_batch, encode_event, expand_fire_master, tag_matches
from raetsalt.errors import LocalError


@pytest.mark.parametrize(
    ("event_tag", "tag", "match_type", "expected"),
    [
        ("salt/job/1/ret/m1", "salt/job", None, True),
        ("salt/job/1/ret/m1", "", "startswith", True),
        ("salt/job/1/ret/m1", "job", "startswith", False),
        ("salt/job/1/ret/m1", "ret/m1", "endswith", True),
        ("salt/job/1/ret/m1", "/1/", "find", True),
        ("salt/job/1/ret/m1", "salt/job/\\d+/ret", "regex", True),
        ("salt/job/1/ret/m1", "job/\\d+", "regex", False),  # anchored at the start
        ("salt/job/1/ret/m1", "salt/job/*/ret/*", "fnmatch", True),
        ("salt/job/1/ret/m1", "salt/job/*", "fnmatch", True),
        ("salt/job/1/ret/m1", "salt/job", "fnmatch", False),  # whole string
        ("salt/job/1/ret/m1", "", "fnmatch", False),  # empty tag matches nothing
    ],
)
def test_tag_matches(event_tag: str, tag: str, match_type: str | None, expected: bool) -> None:
    assert tag_matches(event_tag, tag, match_type) is expected


def test_unknown_match_type() -> None:
    with pytest.raises(LocalError):
        tag_matches("a", "a", "glob")


def test_listener_queue_is_bounded_and_counts_losses() -> None:
    bus = EventBus(max_events=3)
    bus.subscribe("slow")
    bus.subscribe("fast")
    for n in range(5):
        bus.publish(encode_event("t", {"n": n}))
        if n < 4:
            assert bus.take("fast", 10_000)
    assert bus.queued("slow") == 3 and bus.lost("slow") == 2
    assert [msgpack.unpackb(e)[1]["n"] for e in bus.take("slow", 10_000)] == [2, 3, 4]
    assert bus.lost("fast") == 0 and bus.stats["events_lost"] == 2


def test_take_respects_byte_budget_but_returns_at_least_one() -> None:
    bus = EventBus()
    bus.subscribe("l")
    for n in range(3):
        bus.publish(encode_event("t", {"pad": "x" * 100, "n": n}))
    first = bus.take("l", 10)
    assert len(first) == 1
    assert len(bus.take("l", 10_000)) == 2


def test_batch_body_decodes_as_one_map() -> None:
    events = [encode_event("a", {"n": 1}), encode_event("b", {"n": 2})]
    body = msgpack.unpackb(encode_batch({"src": [None, "manor", None]}, events, 2))
    assert body == {"route": {"src": [None, "manor", None]},
                    "events": [["a", {"n": 1}], ["b", {"n": 2}]]}


def blog_batch(pretag: str | None = None) -> dict:
    events = [{"message": f"a dr{v}p in the bucket", "tag": "mytag"} for v in "aeiou"]
    return {"id": "claimed", "events": events, "tag": None, "pretag": pretag, "data": None}


def test_expand_batch_fires_each_item_under_its_tag() -> None:
    out = expand_fire_master(blog_batch(), "m1")
    assert [e["tag"] for e in out] == ["mytag"] * 5
    assert out[3]["data"] == {"message": "a drop in the bucket", "tag": "mytag"}


def test_expand_batch_with_pretag_puts_the_copy_first() -> None:
    out = expand_fire_master(blog_batch(pretag="syndic1"), "m1")
    assert [e["tag"] for e in out[:2]] == ["syndic1/mytag", "mytag"]
    assert len(out) == 10


def test_expand_single_nests_the_whole_load_and_overrides_id() -> None:
    data = {"id": "claimed", "tag": "mytag", "data": {"x": 1}, "events": None, "pretag": None}
    [event] = expand_fire_master(data, "m1")
    assert event == {"tag": "mytag", "data": {"id": "m1", "cmd": "_minion_event", "tag": "mytag",
                                              "data": {"x": 1}, "pretag": None}}


def test_expand_skips_blacklisted_and_malformed() -> None:
    data = {"events": [{"tag": "salt/job/1/new"}, {"tag": "salt/key"}, "junk", {"no": "tag"},
                       {"tag": "ok", "data": {"d": 1}}]}
    assert expand_fire_master(data, None) == [{"tag": "ok", "data": {"d": 1}}]
    assert expand_fire_master({"tag": "salt/run/5/new", "data": {}}, None) == []


def _ns(bus: EventBus, listener: str) -> list[int]:
    return [msgpack.unpackb(e)[1]["n"] for e in bus.take(listener, 1 << 20)]


def test_a_hold_keeps_events_for_its_claimer_within_bounds() -> None:
    bus = EventBus(max_events=3)
    bus.hold("auto")
    for n in range(5):
        bus.publish(encode_event("t", {"n": n}))
    assert bus.held("auto") == 3 and bus.stats["held_lost"] == 2
    assert bus.pending() == []  # nobody to send them to yet
    bus.subscribe("other")  # no claim: only what comes from now on
    bus.subscribe("child", claim="auto")
    assert bus.held("auto") == 0 and bus.pending() == ["child"]
    assert _ns(bus, "child") == [2, 3, 4] and _ns(bus, "other") == []
    bus.subscribe("late", claim="auto")  # a second claimer takes the hold, no events
    assert _ns(bus, "late") == []
    bus.unsubscribe("child")  # not the holder any more: no new hold
    assert bus.held("auto") == 0
    bus.publish(encode_event("t", {"n": 5}))
    assert bus.held("auto") == 0


def test_a_hold_starts_again_when_its_claimer_goes_and_ends_on_release() -> None:
    bus = EventBus()
    bus.hold("auto")
    bus.subscribe("child", claim="auto")
    bus.unsubscribe("child")  # died (reaped): held for the next one
    bus.publish(encode_event("t", {"n": 1}))
    bus.subscribe("again", claim="auto")
    assert _ns(bus, "again") == [1]
    bus.unsubscribe("again", release=True)
    bus.publish(encode_event("t", {"n": 2}))
    assert bus.held("auto") == 0 and bus.pending() == []
    bus.subscribe("third", claim="auto")  # released: a plain listener
    bus.unsubscribe("third")
    bus.publish(encode_event("t", {"n": 3}))
    assert bus.held("auto") == 0 and bus.stats["holds_claimed"] == 2


def test_a_claim_without_a_hold_is_a_plain_subscription() -> None:
    bus = EventBus()
    bus.subscribe("x", claim="nothing")
    bus.publish(encode_event("t", {"n": 0}))
    bus.unsubscribe("x")
    bus.publish(encode_event("t", {"n": 1}))
    assert bus.held("nothing") == 0 and bus.stats["holds_claimed"] == 0
