"""The sans-IO road engine: RAET transactions between estates.

``Road`` is driven by five calls, exactly like aioquic's connection object:
``receive_datagram(data, address, now)``, ``datagrams_to_send(now)``, ``next_timer()``,
``handle_timer(now)`` and ``next_event()``, plus command methods (``connect``, ``join``,
``allow``, ``send_message`` ...).  Nothing in this package reads a clock or touches a socket.
"""

from raetsalt.engine.events import (
    Allowed,
    DropReason,
    Event,
    Joined,
    JoinPending,
    JoinRejected,
    MessageDelivered,
    MessageReceived,
    PacketDropped,
    PresenceChanged,
    TransactionFailed,
)
from raetsalt.engine.road import Road, RoadConfig

__all__ = [
    "Allowed",
    "DropReason",
    "Event",
    "JoinPending",
    "JoinRejected",
    "Joined",
    "MessageDelivered",
    "MessageReceived",
    "PacketDropped",
    "PresenceChanged",
    "Road",
    "RoadConfig",
    "TransactionFailed",
]
