"""What a road knows about one remote estate: ids, keys, session and status."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raetsalt.crypto import SessionBox, Verifier
from raetsalt.engine.replay import ReplayWindow
from raetsalt.wire.enums import BodyKind

if TYPE_CHECKING:
    from raetsalt.engine.transaction import Transaction

ID_WRAP = 1 << 32
_ID_HALF = 1 << 31


def next_id(value: int) -> int:
    """Next 32-bit session or transaction id: wraps from 0xffffffff to 1, never 0."""
    value = (value + 1) % ID_WRAP
    return value or 1


def sid_valid(new: int, old: int) -> bool:
    """raet's rule for accepting session id ``new`` after ``old`` (protocol.md 4.3)."""
    if new == 0 or old == 0:
        return True
    return (new - old) % ID_WRAP < _ID_HALF


@dataclass(slots=True)
class Outgoing:
    """A message waiting for (or in) its transaction."""

    mid: int
    body: bytes
    """The encoded body, encrypted when its transaction starts."""
    expires: float
    kind: BodyKind = BodyKind.JSON


@dataclass(eq=False)
class Remote:
    """State of one remote estate.

    ``uid`` is our id for it (raet's *nuid*) and ``fuid`` its id for us (0 until a join
    tells us).  ``sid`` is our session id for transactions we start, ``rsid`` the last one
    it used for transactions it started.  Keys: ``verify_key`` (Ed25519) and
    ``long_public`` (Curve25519) from the join; ``session`` is the box of the current allow.
    """

    uid: int
    name: str
    ha: tuple[str, int]
    fuid: int = 0
    role: str = ""
    main: bool = False
    kind: int = 0
    verify_key: bytes = b""
    long_public: bytes = b""
    sid: int = 0
    rsid: int = 0
    tid: int = 0
    joined: bool | None = None
    allowed: bool = False
    alive: bool | None = None
    profile: str = "raet"
    session: SessionBox | None = None
    verifier: Verifier | None = None
    auto_connect: bool = False
    """We keep this remote connected: join, allow and re-join after failures by ourselves."""
    transactions: dict[tuple[bool, int, int], Transaction] = field(default_factory=dict)
    replay: ReplayWindow = field(default_factory=ReplayWindow)
    outbox: deque[Outgoing] = field(default_factory=deque)
    channel: Any = None
    """The native-profile ``Channel`` of the current session, when both ends are ours."""
    sender: Any = None
    """The message transaction currently sending (one at a time keeps delivery in order)."""
    last_rx: float = 0.0
    alive_failures: int = 0
    retry_at: float = 0.0
    retry_delay: float = 0.0
    deadline: float | None = None
    """Housekeeping timer: presence, connect retries and outbox expiry."""

    def next_tid(self) -> int:
        self.tid = next_id(self.tid)
        return self.tid

    def next_sid(self) -> int:
        self.sid = next_id(self.sid)
        return self.sid

    def set_keys(self, verify_key: bytes, long_public: bytes) -> None:
        if verify_key != self.verify_key or self.verifier is None:
            self.verifier = Verifier(verify_key)
        self.verify_key = verify_key
        self.long_public = long_public

    def in_progress(self, kind: int) -> Transaction | None:
        """A live transaction of ``kind`` (a ``TransactionKind``), if there is one."""
        for txn in self.transactions.values():
            if txn.kind == kind:
                return txn
        return None
