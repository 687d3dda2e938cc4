"""Events the road engine reports to its driver.

Events are frozen dataclasses named in the past tense; callers dispatch on their type.
Do not subclass them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class DropReason(StrEnum):
    """Stable trigger strings for a dropped datagram (counted in ``Road.stats``)."""

    MALFORMED = "malformed"  # the wire parser refused it (header, length, foot, body)
    BROADCAST = "broadcast"
    UNSIGNED = "unsigned"  # a non-join packet without an Ed25519 foot
    SIGNATURE = "signature"  # the foot does not verify with the remote's key
    IDS = "ids"  # zero or inconsistent estate / session ids
    UNKNOWN_REMOTE = "unknown_remote"
    WRONG_ADDRESS = "wrong_address"  # a join reply from an address we did not join
    STALE = "stale"  # no transaction for it and it cannot start one
    DECRYPT = "decrypt"  # a box did not open
    BODY = "body"  # a body failed validation after decoding
    NOT_MAIN = "not_main"  # a vacuous join sent to a stack that is not main
    REPLAY = "replay"  # an already delivered message
    OVERLOAD = "overload"  # a limit on concurrent state was reached
    REFUSED = "refused"  # join state of the remote forbids it (rejected, name taken)
    # Bounded reassembly (engine/reassembly.py): a frame or segment not held, or a
    # stalled partial message discarded.
    REASSEMBLY_LIMIT = "reassembly_limit"  # it would exceed a reassembly cap
    REASSEMBLY_TIMEOUT = "reassembly_timeout"  # no progress within the time-out
    STORAGE = "storage"  # the keep could not record what the datagram changed


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every road event."""


@dataclass(frozen=True, slots=True)
class Joined(Event):
    """A join with ``remote`` completed; both sides hold each other's long-term keys."""

    remote: str
    """Name of the remote estate."""
    initiator: bool
    """True when this side started the join."""


@dataclass(frozen=True, slots=True)
class JoinPending(Event):
    """The join is waiting for an operator to accept a key (ours on their side, or theirs)."""

    remote: str
    role: str
    """The role whose key is pending."""
    here: bool
    """True when the pending key is the remote's key in *our* keep."""


@dataclass(frozen=True, slots=True)
class JoinRejected(Event):
    """The join was refused: a key is rejected or denied on one side."""

    remote: str
    role: str
    here: bool
    """True when *we* rejected the remote's key; False when the remote rejected ours."""


@dataclass(frozen=True, slots=True)
class Allowed(Event):
    """The allow handshake with ``remote`` completed: a fresh session is established."""

    remote: str
    profile: str
    """Which wire profile the session uses: ``"raet"`` or ``"native"``."""


@dataclass(frozen=True, slots=True)
class PresenceChanged(Event):
    """``remote`` became alive (answering) or dead (silent past the alive time-out)."""

    remote: str
    alive: bool


@dataclass(frozen=True, slots=True)
class MessageReceived(Event):
    """A complete, authenticated message arrived from ``remote``."""

    remote: str
    body: Any


@dataclass(frozen=True, slots=True)
class MessageDelivered(Event):
    """The remote confirmed receipt of the message that ``send_message`` numbered ``mid``
    (and of the ``count - 1`` after it, for a batch from ``send_messages``)."""

    remote: str
    mid: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class TransactionFailed(Event):
    """A transaction ended without success.

    ``kind`` is ``"join"``, ``"allow"``, ``"alive"`` or ``"message"``; ``mid`` is set for
    messages.  ``reason`` is a short stable string such as ``"timeout"`` or ``"nacked"``.
    """

    remote: str
    kind: str
    reason: str
    mid: int | None = None


@dataclass(frozen=True, slots=True)
class PacketDropped(Event):
    """A received datagram was dropped without effect."""

    reason: DropReason
    address: tuple[str, int]
    detail: str = ""
