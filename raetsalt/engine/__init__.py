"""The sans-IO road engine: RAET transactions between estates.

``Road`` is driven by five calls, exactly like aioquic's connection object:
``receive_datagram(data, address, now)``, ``datagrams_to_send(now)``, ``get_timer()``,
``handle_timer(now)`` and ``next_event()``, plus command methods (``connect``, ``join``,
``allow``, ``send_message``, ``change_key`` ...).  Nothing in this package reads a clock,
touches a socket or a file: the keep's records come in once (``Keep.load_state``) and
every change goes out as a ``KeepEvent`` for the driver to write.

Imports run one way: ``road`` -> ``joindesk`` -> transactions (``join``, ``allow``,
``alive``, ``message``) and the native profile's wing (``native/``, whose
``native.channel`` the road drives) -> ``transaction`` -> ``port`` -> ``remote``,
``identity``, ``events``, ``config``; no transaction or native module imports ``road``.
"""

from raetsalt.engine.config import RoadConfig
from raetsalt.engine.events import (
    Allowed,
    Departed,
    DropReason,
    Event,
    Joined,
    JoinPending,
    JoinRejected,
    KeepEvent,
    MessageDelivered,
    MessageReceived,
    PacketDropped,
    PendingLimitReached,
    PresenceChanged,
    SessionEnded,
    TransactionFailed,
)
from raetsalt.engine.road import Road

__all__ = [
    "Allowed",
    "Departed",
    "DropReason",
    "Event",
    "JoinPending",
    "JoinRejected",
    "Joined",
    "KeepEvent",
    "MessageDelivered",
    "MessageReceived",
    "PacketDropped",
    "PendingLimitReached",
    "PresenceChanged",
    "Road",
    "RoadConfig",
    "SessionEnded",
    "TransactionFailed",
]
