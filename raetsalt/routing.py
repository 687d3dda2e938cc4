"""Message addresses and the routing decision a manor yard makes (Salt's RAET-era manor
routing, kept so the same route shapes work).

Every lane or road message body carries ``route: {src: [estate, yard, share], dst: [...]}``
where ``None`` means "local" (estate, yard) or "don't care" (share).  ``route`` is a pure
function: given where a message wants to go and who we are, it says deliver here, forward
over the road, or drop, and why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket


@dataclass(frozen=True, slots=True)
class YardAddress:
    """Where a message goes on the lane or the road: (estate, yard, share); None means
    unspecified.  (A host address is ``raetsalt.drivers.udp.Address``, a (host, port).)"""

    estate: str | None = None
    yard: str | None = None
    share: str | None = None

    def to_wire(self) -> list[str | None]:
        return [self.estate, self.yard, self.share]

    @classmethod
    def from_wire_untrusted(cls, value: Any) -> YardAddress:
        """Parse ``[estate, yard, share]`` (list or tuple); raises only BadPacket."""
        if type(value) is not list and type(value) is not tuple or len(value) != 3:
            raise BadPacket("address is not [estate, yard, share]", DropReason.ROUTE)
        estate, yard, share = value
        # Plain type checks: this runs for every lane message the manor routes.
        for part in (estate, yard, share):
            if part is not None and type(part) is not str:
                raise BadPacket("address parts must be strings or null", DropReason.ROUTE)
        return cls(estate, yard, share)


@dataclass(frozen=True, slots=True)
class Route:
    """Source and destination of a message."""

    src: YardAddress
    dst: YardAddress

    def to_wire(self) -> dict[str, list[str | None]]:
        return {"src": self.src.to_wire(), "dst": self.dst.to_wire()}

    @classmethod
    def from_body_untrusted(cls, body: Mapping[str, Any]) -> Route:
        """The ``route`` of a message body; raises only BadPacket."""
        route = body.get("route")
        if not isinstance(route, Mapping):
            raise BadPacket("message has no route", DropReason.ROUTE)
        return cls(
            YardAddress.from_wire_untrusted(route.get("src")),
            YardAddress.from_wire_untrusted(route.get("dst")),
        )


@dataclass(frozen=True, slots=True)
class DeliverLocal:
    """Hand the message to ``yard`` on our lane; None means the manor itself (by share)."""

    yard: str | None
    share: str | None


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the message over the road to ``estate``."""

    estate: str


@dataclass(frozen=True, slots=True)
class Drop:
    """Do not deliver; ``reason`` is a stable short string."""

    reason: str


Decision = DeliverLocal | Forward | Drop


def route(
    msg_route: Route,
    local_estate: str | None,
    local_yards: Collection[str],
    *,
    from_road: bool = False,
    manor: str = "manor",
) -> Decision:
    """Decide what the manor yard does with a message.

    :param local_estate: our estate name (None before the road is set up).
    :param local_yards: yard names currently known on our lane.
    :param from_road: the message arrived over the road, so it must be for us: a manor
        never relays road traffic to a third estate.
    """
    dst = msg_route.dst
    if dst.estate is not None and dst.estate != local_estate:
        if from_road:
            return Drop("not_our_estate")
        return Forward(dst.estate)
    if dst.yard is None or dst.yard == manor:
        if dst.share is None:
            return Drop("no_share")
        return DeliverLocal(None, dst.share)
    if dst.yard in local_yards:
        return DeliverLocal(dst.yard, dst.share)
    return Drop("unknown_yard")
