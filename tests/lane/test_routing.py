"""The manor's routing decision."""

from __future__ import annotations

import pytest

from raetsalt.errors import BadPacket
from raetsalt.routing import Address, DeliverLocal, Drop, Forward, Route, route

YARDS = {"ev1", "jobber2"}


def r(dst: Address) -> Route:
    return Route(Address(None, "ev1", None), dst)


@pytest.mark.parametrize(
    ("dst", "from_road", "expected"),
    [
        (Address(None, None, "event_fire"), False, DeliverLocal(None, "event_fire")),
        (Address("me", "manor", "event_req"), False, DeliverLocal(None, "event_req")),
        (Address(None, "jobber2", "fun"), False, DeliverLocal("jobber2", "fun")),
        (Address("master_master", None, "remote_cmd"), False, Forward("master_master")),
        (Address("other", None, "remote_cmd"), True, Drop("not_our_estate")),
        (Address(None, "ghost", "fun"), False, Drop("unknown_yard")),
        (Address(None, None, None), False, Drop("no_share")),
    ],
)
def test_route(dst: Address, from_road: bool, expected: object) -> None:
    assert route(r(dst), "me", YARDS, from_road=from_road) == expected


def test_route_round_trips_through_wire_form() -> None:
    original = Route(Address("e", "y", None), Address(None, "manor", "event_fire"))
    assert Route.from_body_untrusted({"route": original.to_wire()}) == original


@pytest.mark.parametrize(
    "body",
    [{}, {"route": 1}, {"route": {"src": [None, None], "dst": [None, None, None]}},
     {"route": {"src": [None, 1, None], "dst": [None, None, None]}}],
)
def test_bad_routes_raise_badpacket(body: dict) -> None:
    with pytest.raises(BadPacket):
        Route.from_body_untrusted(body)
