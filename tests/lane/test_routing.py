"""The manor's routing decision."""

from __future__ import annotations

import pytest

from raetsalt.errors import BadPacket
from raetsalt.routing import DeliverLocal, Drop, Forward, Route, YardAddress, route

YARDS = {"ev1", "jobber2"}


def r(dst: YardAddress) -> Route:
    return Route(YardAddress(None, "ev1", None), dst)


@pytest.mark.parametrize(
    ("dst", "from_road", "expected"),
    [
        (YardAddress(None, None, "event_fire"), False, DeliverLocal(None, "event_fire")),
        (YardAddress("me", "manor", "event_req"), False, DeliverLocal(None, "event_req")),
        (YardAddress(None, "jobber2", "fun"), False, DeliverLocal("jobber2", "fun")),
        (YardAddress("master_master", None, "remote_cmd"), False, Forward("master_master")),
        (YardAddress("other", None, "remote_cmd"), True, Drop("not_our_estate")),
        (YardAddress(None, "ghost", "fun"), False, Drop("unknown_yard")),
        (YardAddress(None, None, None), False, Drop("no_share")),
    ],
)
def test_route(dst: YardAddress, from_road: bool, expected: object) -> None:
    assert route(r(dst), "me", YARDS, from_road=from_road) == expected


def test_route_round_trips_through_wire_form() -> None:
    original = Route(YardAddress("e", "y", None), YardAddress(None, "manor", "event_fire"))
    assert Route.from_body_untrusted({"route": original.to_wire()}) == original


@pytest.mark.parametrize(
    "body",
    [{}, {"route": 1}, {"route": {"src": [None, None], "dst": [None, None, None]}},
     {"route": {"src": [None, 1, None], "dst": [None, None, None]}}],
)
def test_bad_routes_raise_badpacket(body: dict) -> None:
    with pytest.raises(BadPacket):
        Route.from_body_untrusted(body)
