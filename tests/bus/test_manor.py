"""The manor yard, sans-IO: subscription, delivery, fire_master hook, slow listeners, routing."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from raetsalt.bus import EventBus
from raetsalt.lane.engine import Lane, YardMessage
from raetsalt.manor import LocalMessage, Manor

LANE = "minion-abc"


def path(yard: str) -> str:
    return f"/s/{LANE}.{yard}.uxd"


class Client:
    """A client yard talking to the manor through the sans-IO surfaces only."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lane = Lane(lane_name=LANE, yard_name=name, accept=False)
        self.lane.add_yard("manor", path("manor"))

    def send(self, manor: Manor, share: str, **fields: Any) -> None:
        body = {"route": {"src": [None, self.name, None], "dst": [None, "manor", share]}, **fields}
        self.lane.send(body, "manor")
        for data, _ in self.lane.datagrams_to_send(0.0):
            manor.receive_datagram(data, path(self.name), 0.0)

    def bodies(self, datagrams: list[tuple[bytes, str]]) -> list[dict]:
        for data, dest in datagrams:
            if dest == path(self.name):
                self.lane.receive_datagram(data, path("manor"), 0.0)
        out = []
        while (event := self.lane.next_event()) is not None:
            if isinstance(event, YardMessage):
                out.append(event.body)
        return out


def make_manor(**kwargs: Any) -> Manor:
    return Manor(lane=Lane(lane_name=LANE, yard_name="manor"), node="minion", node_id="m1",
                 **kwargs)


def events_of(bodies: list[dict]) -> list[list]:
    return [e for b in bodies if b["route"]["dst"][2] == "event" for e in b["events"]]


def test_subscribe_is_acknowledged_and_events_reach_subscribers_only() -> None:
    manor = make_manor()
    listener, emitter = Client("ev1"), Client("ev2")
    listener.send(manor, "event_req")
    [ack] = listener.bodies(manor.datagrams_to_send(0.0))
    assert ack["route"]["dst"] == [None, "ev1", "event_ack"]
    emitter.send(manor, "event_fire", tag="mytag", data={"message": "a drop in the bucket"})
    emitter.send(manor, "event_fire", tag="other", data={"n": 2})
    out = manor.datagrams_to_send(0.0)
    assert events_of(listener.bodies(out)) == [["mytag", {"message": "a drop in the bucket"}],
                                               ["other", {"n": 2}]]
    assert emitter.bodies(out) == []


def test_unsubscribe_stops_delivery() -> None:
    manor = make_manor()
    listener = Client("ev1")
    listener.send(manor, "event_req")
    listener.send(manor, "event_unreq")
    manor.fire_event("t", {"n": 1})
    assert events_of(listener.bodies(manor.datagrams_to_send(0.0))) == []


def test_fire_master_batch_calls_hook_per_event_and_still_reaches_local_bus() -> None:
    forwarded: list[dict] = []
    manor = make_manor(forward_to_master=forwarded.append)
    listener, emitter = Client("ev1"), Client("ev2")
    listener.send(manor, "event_req")
    events = [{"message": f"a dr{v}p in the bucket", "tag": "mytag"} for v in "aeiou"]
    payload = {"id": "m1", "events": events, "tag": None, "pretag": None, "data": None}
    emitter.send(manor, "event_fire", tag="fire_master", data=payload)
    assert [e["tag"] for e in forwarded] == ["mytag"] * 5
    assert [e["data"]["message"] for e in forwarded] == [e["message"] for e in events]
    local = events_of(listener.bodies(manor.datagrams_to_send(0.0)))
    assert [t for t, _ in local] == ["fire_master"]
    assert manor.stats["fire_master_forwarded"] == 5


def test_fire_master_batch_goes_to_the_batch_hook_once() -> None:
    single: list[dict] = []
    batches: list[list[dict]] = []
    manor = make_manor(forward_to_master=single.append,
                       forward_batch_to_master=batches.append)
    events = [{"tag": f"salt/beacon/m1/diskusage/{n}", "data": {"n": n}} for n in range(3)]
    Client("ev2").send(manor, "event_fire", tag="fire_master",
                       data={"events": events, "tag": None, "pretag": None, "data": None})
    assert single == [] and len(batches) == 1
    assert [e["tag"] for e in batches[0]] == [e["tag"] for e in events]
    assert manor.stats["fire_master_forwarded"] == 3
    # A lone event still goes through the single hook.
    Client("ev2").send(manor, "event_fire", tag="fire_master",
                       data={"events": events[:1], "tag": None, "pretag": None, "data": None})
    assert [e["tag"] for e in single] == [events[0]["tag"]] and len(batches) == 1


def test_fire_master_hook_failure_does_not_stop_the_bus() -> None:
    def broken(event: dict) -> None:
        raise RuntimeError("road down")

    manor = make_manor(forward_to_master=broken)
    Client("ev2").send(manor, "event_fire", tag="fire_master",
                       data={"tag": "x", "data": {}, "events": None, "pretag": None})
    assert manor.stats["fire_master_hook_error"] == 1


def test_master_does_not_forward_fire_master() -> None:
    forwarded: list[dict] = []
    manor = Manor(lane=Lane(lane_name="master", yard_name="manor"), node="master",
                  forward_to_master=forwarded.append)
    manor.fire_event("fire_master", {"tag": "x", "data": {}})
    assert forwarded == []


def test_stalled_listener_is_bounded_and_others_keep_receiving() -> None:
    manor = make_manor(bus=EventBus(max_events=100))
    stalled, healthy = Client("ev1"), Client("ev2")
    stalled.send(manor, "event_req")
    healthy.send(manor, "event_req")
    manor.datagrams_to_send(0.0)  # acks
    now = 0.0
    received = 0
    for n in range(2000):
        manor.fire_event("t", {"n": n})
        out = manor.datagrams_to_send(now)
        # The stalled yard's socket is always full; the healthy one takes everything.
        blocked = [d for d, p in out if p == path("ev1")]
        if blocked:
            manor.send_blocked(path("ev1"), blocked, now)
        received += len(events_of(healthy.bodies(out)))
        now += 0.001
        timer = manor.get_timer()
        if timer is not None and timer <= now:
            manor.handle_timer(now)
    assert received == 2000
    assert manor.bus.queued("ev1") <= 100
    assert manor.bus.lost("ev1") >= 2000 - 100 - 8 * 60
    assert manor.lane.backlog("ev1") <= 8


def test_reaped_listener_is_unsubscribed() -> None:
    manor = make_manor()
    Client("ev1").send(manor, "event_req")
    manor.datagrams_to_send(0.0)
    manor.send_failed(path("ev1"), 0.0)
    assert manor.bus.listeners() == []


def test_route_source_is_rewritten_to_the_verified_yard() -> None:
    manor = make_manor()
    body = {"route": {"src": [None, "manor", None], "dst": [None, "manor", "remote_cmd"]}, "x": 1}
    client = Client("ev9")
    client.lane.send(body, "manor")
    for data, _ in client.lane.datagrams_to_send(0.0):
        manor.receive_datagram(data, path("ev9"), 0.0)
    message = manor.next_event()
    assert isinstance(message, LocalMessage)
    assert message.share == "remote_cmd" and message.source == "ev9"
    assert message.body["route"]["src"] == [None, "ev9", None]


def test_foreign_estate_goes_to_the_road_hook_or_is_dropped() -> None:
    sent: list[tuple[str, dict]] = []
    manor = make_manor(forward_over_road=lambda estate, body: sent.append((estate, body)))
    client = Client("ev1")
    body = {"route": {"src": [None, "ev1", None], "dst": ["master_master", None, "remote_cmd"]}}
    client.lane.send(body, "manor")
    for data, _ in client.lane.datagrams_to_send(0.0):
        manor.receive_datagram(data, path("ev1"), 0.0)
    assert [estate for estate, _ in sent] == ["master_master"]
    no_road = make_manor()
    client2 = Client("ev1")
    client2.lane.send(body, "manor")
    for data, _ in client2.lane.datagrams_to_send(0.0):
        no_road.receive_datagram(data, path("ev1"), 0.0)
    assert no_road.stats["no_road"] == 1


def test_unencodable_or_malformed_fire_is_counted() -> None:
    manor = make_manor()
    Client("ev1").send(manor, "event_fire", tag="", data={})
    Client("ev1").send(manor, "event_fire", tag="t", data=[1])
    assert manor.stats["bad_event"] == 2


def test_fast_path_decides_as_the_router_does() -> None:
    """The manor's shortcut for bus traffic must agree with ``routing.route`` everywhere."""
    from raetsalt.errors import BadPacket
    from raetsalt.routing import DeliverLocal, Drop, Forward, Route, route

    srcs: list[Any] = [[None, "ev1", None], ["m1est", "ev1", "x"], [None, "ev2", None],
                       [None, "ev1", 5], [None, "ev1"], [7, "ev1", None]]
    dsts: list[Any] = [[e, y, s] for e in (None, "m1est", "other")
                       for y in (None, "manor", "ev3", "nope") for s in (None, "remote_cmd")]
    dsts += [[None, "manor", 3], ("x",), None]
    for src in srcs:
        for dst in dsts:
            sent: list[str] = []
            manor = make_manor(estate="m1est", forward_over_road=lambda e, b, s=sent: s.append(e))
            manor.lane.add_yard("ev3", path("ev3"))
            manor.datagrams_to_send(0.0)
            client = Client("ev1")
            client.lane.send({"route": {"src": src, "dst": dst}}, "manor")
            for data, _ in client.lane.datagrams_to_send(0.0):
                manor.receive_datagram(data, path("ev1"), 0.0)
            try:
                wanted = route(Route.from_body_untrusted({"route": {"src": src, "dst": dst}}),
                               "m1est", manor.lane.yard_names())
            except BadPacket as exc:
                wanted = Drop(exc.trigger)
            message = manor.next_event()
            case = (src, dst)
            if type(wanted) is DeliverLocal and wanted.yard is None:
                assert isinstance(message, LocalMessage), case
                assert message.share == wanted.share and message.source == "ev1", case
                assert message.body["route"]["src"][1] == "ev1", case
            else:
                assert message is None, case
                if type(wanted) is Forward:
                    assert sent == [wanted.estate], case
                elif type(wanted) is DeliverLocal:
                    out = manor.datagrams_to_send(0.0)
                    assert [p for _, p in out] == [path(wanted.yard)], case
                else:
                    assert manor.stats[wanted.reason] == 1, case


def test_a_claiming_subscriber_gets_the_events_fired_before_it_came() -> None:
    manor = Manor(lane=Lane(lane_name=LANE, yard_name="manor"), node="master")
    manor.bus.hold("automation")
    manor.fire_event("salt/minion/m1/start", {"id": "m1"})
    early, child = Client("ev1"), Client("ev2")
    early.send(manor, "event_req", claim=7)  # not a name: a plain subscription
    child.send(manor, "event_req", claim="automation")
    out = manor.datagrams_to_send(0.0)
    assert events_of(child.bodies(out)) == [["salt/minion/m1/start", {"id": "m1"}]]
    assert events_of(early.bodies(out)) == []
    child.send(manor, "event_unreq", release=True)
    manor.fire_event("t", {})
    assert manor.bus.held("automation") == 0


def test_events_dropped_from_a_hold_are_said_once_when_it_is_claimed(
        caplog: pytest.LogCaptureFixture) -> None:
    manor = Manor(lane=Lane(lane_name=LANE, yard_name="manor"), node="master",
                  bus=EventBus(max_events=2))
    manor.bus.hold("automation", max_events=3, max_bytes=1 << 20)
    for n in range(6):
        manor.fire_event("t", {"n": n})
    with caplog.at_level(logging.WARNING, logger="raetsalt.manor"):
        Client("ev1").send(manor, "event_req", claim="automation")
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("3 events held for automation before it subscribed were dropped")
    assert "a hold keeps 3 events, 1048576 bytes at most" in line  # the hold's own bounds
    assert manor.bus.stats["held_lost"] == 3



def test_a_hold_keeps_its_own_bounds_for_its_claimer_and_not_for_one_it_replaced() -> None:
    bus = EventBus(max_events=3, max_bytes=1 << 20)
    bus.hold("auto", max_events=10)
    for n in range(8):
        bus.publish(b"e%d" % n)
    assert bus.held("auto") == 8 and bus.stats["held_lost"] == 0
    bus.subscribe("first", claim="auto")
    bus.subscribe("plain")
    for n in range(8, 14):
        bus.publish(b"e%d" % n)
    assert bus.queued("first") == 10 and bus.lost("first") == 4  # its hold's bound
    assert bus.queued("plain") == 3 and bus.lost("plain") == 3  # the bus's bound
    bus.subscribe("second", claim="auto")  # a restarted process takes the hold over
    assert bus.queued("first") == 3  # an ordinary listener now
    for n in range(14, 24):
        bus.publish(b"e%d" % n)
    assert bus.queued("second") == 10 and bus.queued("first") == 3


def test_the_manor_says_how_many_events_its_bus_dropped_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    manor = Manor(lane=Lane(lane_name=LANE, yard_name="manor"), node="minion",
                  node_id="abc", bus=EventBus(max_events=2))
    manor.lane.add_yard("ev1", path("ev1"))
    manor.bus.subscribe("ev1")
    for n in range(5):
        manor.bus.publish(b"event %d" % n)
    with caplog.at_level(logging.WARNING, logger="raetsalt.manor"):
        manor.datagrams_to_send(0.0)
        manor.bus.take("ev1", 1 << 20)
        for n in range(5):
            manor.bus.publish(b"event %d" % n)
        manor.datagrams_to_send(1.0)  # within the minute: quiet
        manor.datagrams_to_send(61.0)
    lines = [r.getMessage() for r in caplog.records if "the bus dropped" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].startswith("the bus dropped 3 events")
    assert lines[1].startswith("the bus dropped 3 events")


def test_a_full_listener_gets_full_pages_once_it_has_room() -> None:
    """While a listener's socket is full no page is made for it: once the kernel says
    there is room, the events fired meanwhile go in one page, not one page per pass."""
    manor = make_manor()
    slow = Client("ev1")
    slow.send(manor, "event_req")
    manor.datagrams_to_send(0.0)  # the ack
    manor.fire_event("t", {"n": 0})
    first = manor.datagrams_to_send(0.0)
    assert len(first) == 1
    manor.send_blocked(path("ev1"), [d for d, _p in first], 0.0)
    for n in range(1, 301):  # 300 passes of the daemon's loop, one event each
        manor.fire_event("t", {"n": n})
        assert manor.datagrams_to_send(0.001 * n) == []
    assert manor.lane.backlog("ev1") == 1 and manor.bus.queued("ev1") == 300
    manor.send_unblocked(path("ev1"), 0.5)
    out = manor.datagrams_to_send(0.5)
    assert len(out) == 2  # the page that waited, then one page of the 300 events
    got = events_of(slow.bodies(out))
    assert [e[1]["n"] for e in got] == list(range(301))
