"""Events the road engine reports to its driver.

Events are frozen dataclasses named in the past tense; callers dispatch on their type.
Do not subclass them.

``KeepEvent`` subclasses are persistence: the engine keeps its records in memory and
reports every change that must reach the keep; the driver writes them (off its event
loop) and does not hand them on.  Each is emitted only when the record really changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raetsalt.drops import DropReason
from raetsalt.keep.records import KeepWrite, LocalRecord, RemoteRecord, RoleRecord

__all__ = [
    "Allowed",
    "DeniedChanged",
    "Departed",
    "DropReason",
    "Event",
    "Joined",
    "JoinPending",
    "JoinRejected",
    "KeepEvent",
    "LocalChanged",
    "MessageDelivered",
    "MessageReceived",
    "PacketDropped",
    "PendingLimitReached",
    "PresenceChanged",
    "RemoteChanged",
    "RemoteRemoved",
    "RoleChanged",
    "RoleRemoved",
    "SessionEnded",
    "TransactionFailed",
]


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
    denied: bool = False
    """``here`` only: the role is known with other keys (Salt's *denied*), rather than
    rejected by an operator."""
    unpinned: bool = False
    """``here`` only: the remote's key is not the pinned one (``master_finger``)."""
    verhex: str = ""
    """``here`` only: the remote's verify key that was refused (hex)."""
    authenticated: bool = True
    """Not ``here``: the remote's ``reject`` was signed with its key.  An unsigned one
    (first contact, or a raet 0.6.8 peer) may be forged by anyone: a daemon must not act
    on it beyond retrying (``raetsalt.engine.join``)."""


@dataclass(frozen=True, slots=True)
class Allowed(Event):
    """The allow handshake with ``remote`` completed: a fresh session is established."""

    remote: str
    profile: str
    """Which wire profile the session uses: ``"raet"`` or ``"native"``."""
    adopted: bool = False
    """Started without a join, between estates of one cluster (``engine.adopt``)."""


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


@dataclass(frozen=True, slots=True)
class SessionEnded(Event):
    """The road ended its native session with ``remote`` for a stable ``reason``:
    ``"key_expired"`` (no key rotation completed within ``native_reject_*``: a new
    handshake follows) or ``"optimistic_ack"`` (the remote acknowledged a packet number
    that was never sent).  Reported once per session ended."""

    remote: str
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PendingLimitReached(Event):
    """``limit`` keys wait for an operator: joins of further new ids are dropped (and
    counted as ``drop_pending_limit``) until some are accepted, rejected or deleted.
    Reported once each time the limit is reached."""

    limit: int


@dataclass(frozen=True, slots=True)
class Departed(Event):
    """An operator deleted or rejected the key of ``remote``: its session is gone, and
    packets it still sends are answered ``unjoined`` so that it joins again."""

    remote: str
    role: str


# -- persistence ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeepEvent(Event):
    """A change the driver must write to the keep."""

    def write(self) -> KeepWrite:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class LocalChanged(KeepEvent):
    """Our own estate record (keys, next uid) changed."""

    record: LocalRecord

    def write(self) -> KeepWrite:
        return KeepWrite.local(self.record)


@dataclass(frozen=True, slots=True)
class RemoteChanged(KeepEvent):
    record: RemoteRecord

    def write(self) -> KeepWrite:
        return KeepWrite.remote(self.record)


@dataclass(frozen=True, slots=True)
class RemoteRemoved(KeepEvent):
    name: str

    def write(self) -> KeepWrite:
        return KeepWrite.remove_remote(self.name)


@dataclass(frozen=True, slots=True)
class RoleChanged(KeepEvent):
    """A role was seen for the first time, or its keys or acceptance changed."""

    record: RoleRecord

    def write(self) -> KeepWrite:
        return KeepWrite.role(self.record)


@dataclass(frozen=True, slots=True)
class RoleRemoved(KeepEvent):
    role: str

    def write(self) -> KeepWrite:
        return KeepWrite.remove_role(self.role)


@dataclass(frozen=True, slots=True)
class DeniedChanged(KeepEvent):
    """The key pairs refused for ``role`` (empty: none left)."""

    role: str
    pairs: tuple[tuple[str, str], ...]

    def write(self) -> KeepWrite:
        return KeepWrite.denied(self.role, self.pairs)
