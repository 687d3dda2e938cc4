"""What a road knows about one remote estate: ids, keys, link state and session.

The remote's link is one ``Link`` value (unjoined -> joined -> allowed); presence
(``alive``) is separate, because an allowed remote may stop answering.  Transactions and
the native channel are seen here only through the small protocols ``Exchange``,
``Sending`` and ``SessionChannel``, so this module imports no transaction code.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from raetsalt.crypto import SessionBox, Verifier
from raetsalt.engine.replay import TidWindow
from raetsalt.keep.records import RemoteRecord, RoleRecord
from raetsalt.wire.enums import BodyKind, TransactionKind

if TYPE_CHECKING:
    from raetsalt.wire.packet import Packet

ID_WRAP = 1 << 32
_ID_HALF = 1 << 31
SID_BLOCK = 1024
"""Session ids reserved at a time, so that a restart never repeats one a remote may hold.

A remote's keep record holds ``sid``, reserved in our start ``epoch`` (``LocalRecord``),
and each start first raises our epoch (one write of our own record, durable before
anything is sent: ``Road`` emits it with the estate, the driver commits it at open).
Every epoch reserves one more block for every remote: in epoch E a record (R, e) lets
the remote's sids go from R + (E-1-e) blocks up to R + (E-e) blocks, so neither a
re-allow nor a restart rewrites its record; only using up a block in one run does (then
the record becomes (sid + SID_BLOCK, E)).  2**21 starts without such a rewrite would
move a remote's sids past raet's half-window (``sid_valid``): a remote silent that long
would refuse our allow and must start its own."""

Address = tuple[str, int]
Receive = Callable[[bytes, Address, float], None]
"""``Road.receive_datagram``'s signature: one datagram, its source, now."""


def next_id(value: int) -> int:
    """Next 32-bit session or transaction id: wraps from 0xffffffff to 1, never 0."""
    value = (value + 1) % ID_WRAP
    return value or 1


def sid_valid(new: int, old: int) -> bool:
    """raet's rule for accepting session id ``new`` after ``old`` (docs/raet-wire.md §6)."""
    if new == 0 or old == 0:
        return True
    return (new - old) % ID_WRAP < _ID_HALF


def id_after(new: int, old: int) -> bool:
    """``new`` is strictly later than ``old`` in the wrapping id space."""
    return new != old and sid_valid(new, old)


class Link(Enum):
    """How far the handshakes with a remote got."""

    UNJOINED = "unjoined"
    """No join, a failed one, or one we must repeat (the other side may have restarted)."""
    JOINED = "joined"
    """Long-term keys exchanged and accepted on both sides; no session."""
    ALLOWED = "allowed"
    """A session: short-term keys from an allow handshake."""


class Exchange(Protocol):
    """What a remote and the road need of a transaction."""

    @property
    def kind(self) -> TransactionKind: ...

    initiator: bool
    sid: int
    tid: int
    finished: bool
    deadline: float | None

    @property
    def key(self) -> tuple[bool, int, int]: ...

    def receive(self, packet: Packet, now: float) -> None: ...

    def on_timer(self, now: float) -> None: ...

    def finish(self) -> None: ...


class Sending(Protocol):
    """The raet-profile message sender of a remote (one at a time keeps the order)."""

    outgoing: Outgoing
    finished: bool


class SessionChannel(Protocol):
    """The native-profile session with a remote (``raetsalt.engine.native.channel.Channel``)."""

    datagram_size: int
    deadline: float | None

    def enqueue(self, outgoing: Outgoing, kind: BodyKind) -> None: ...

    def enqueue_batch(self, first_mid: int, bodies: list[bytes], expires: float) -> None: ...

    def flush(self, now: float, out: list[tuple[bytes | bytearray, Address]]) -> None: ...

    def receive_untrusted(
        self, data: bytes, counter: int, now: float, source: Address | None = None
    ) -> None: ...

    def receive_train(
        self, data: memoryview, segment: int, address: Address, now: float, alone: Receive
    ) -> bool: ...

    def on_timer(self, now: float) -> None: ...

    def unfinished(self) -> list[Outgoing]: ...

    def seal_packet(self, plain: bytes) -> bytearray: ...

    def answer_expected(self) -> float | None: ...


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
    it used for transactions it started; the keep stores ``sid_reserved`` and the
    ``sid_epoch`` it was reserved in (see ``SID_BLOCK``).  Keys: ``verify_key``
    (Ed25519) and ``long_public`` (Curve25519) from the join; ``session`` is the box of
    the current allow.  ``ha`` changes only when we choose an address (``Road.connect``)
    or an allow from the new address completes.
    """

    uid: int
    name: str
    ha: Address
    fuid: int = 0
    role: str = ""
    main: bool = False
    kind: int = 0
    verify_key: bytes = b""
    long_public: bytes = b""
    sid: int = 0
    sid_reserved: int = 0
    sid_epoch: int = 0
    rsid: int = 0
    tid: int = 0
    link: Link = Link.UNJOINED
    alive: bool | None = None
    """Presence: answering (True), silent past the alive time-out (False), not known yet."""
    session: SessionBox | None = None
    verifier: Verifier | None = None
    auto_connect: bool = False
    """We keep this remote connected: join, allow and re-join after failures by ourselves."""
    signs_joins: bool = False
    """A raetsalt estate (an authenticated allow showed the native marks): our join
    requests to it are signed, and its join replies must be (``raetsalt.engine.join``)."""
    adopt: bool = False
    """Our first allow with this remote may be an adoption hello (it holds the same
    identity as an estate we are joined with: ``raetsalt.engine.adopt``)."""
    adopted: bool = False
    """Not joined here: made by an adoption hello, forgotten if its allow fails."""
    busy_honoured: bool = False
    """Our last join attempt ended on an unsigned ``BUSY`` (``raetsalt.engine.busy``)."""
    trusted: bool = False
    """``ha`` is validated: we chose it, or an allow from it completed (anti-amplification)."""
    transactions: dict[tuple[bool, int, int], Exchange] = field(default_factory=dict)
    replay: TidWindow = field(default_factory=TidWindow)
    """Message tids delivered in the current session."""
    outbox: deque[Outgoing] = field(default_factory=deque)
    channel: SessionChannel | None = None
    """The native-profile session, when both ends are ours."""
    sender: Sending | None = None
    """The message transaction currently sending (one at a time keeps delivery in order)."""
    last_rx: float = 0.0
    presence_hint: float = 0.0
    """The silence this remote (a main) asked us to allow before an alive."""
    alive_failures: int = 0
    retry_at: float = 0.0
    retry_delay: float = 0.0
    acceptance_wait: float = 0.0
    """While this main holds our key as pending: how long we wait before asking it again
    (0: not pending; ``raetsalt.engine.join.next_acceptance_wait``)."""

    @property
    def joined(self) -> bool:
        return self.link is not Link.UNJOINED

    @property
    def allowed(self) -> bool:
        return self.link is Link.ALLOWED

    @property
    def profile(self) -> str:
        """``"native"`` or ``"raet"``: the wire profile of the current session."""
        return "native" if self.channel is not None else "raet"

    @classmethod
    def restore(cls, saved: RemoteRecord, keys: RoleRecord, epoch: int) -> Remote:
        """A remote as the keep recorded it, with its role's keys, in our start ``epoch``
        (later than ``saved.epoch``)."""
        remote = cls(
            uid=saved.uid,
            name=saved.name,
            ha=(saved.ha[0], saved.ha[1]),
            fuid=saved.fuid,
            role=saved.role,
            main=saved.main,
            kind=saved.kind,
            # The keep holds a reserved sid: sessions never repeat across restarts.
            sid=(saved.sid + (epoch - 1 - saved.epoch) * SID_BLOCK) % ID_WRAP,
            sid_reserved=saved.sid,
            sid_epoch=saved.epoch,
            link=Link.JOINED if saved.joined else Link.UNJOINED,
            signs_joins=saved.signs_joins,
        )
        remote.set_keys(bytes.fromhex(keys.verhex), bytes.fromhex(keys.pubhex))
        return remote

    def record(self) -> RemoteRecord:
        """What the keep stores about this remote (its sid: the reserved one)."""
        return RemoteRecord(
            name=self.name,
            role=self.role,
            uid=self.uid,
            fuid=self.fuid,
            ha=self.ha,
            sid=self.sid_reserved,
            main=self.main,
            kind=self.kind,
            joined=self.joined,
            epoch=self.sid_epoch,
            signs_joins=self.signs_joins,
        )

    def sid_ceiling(self, epoch: int) -> int:
        """The first session id not reserved in our start ``epoch`` (``SID_BLOCK``)."""
        return (self.sid_reserved + (epoch - self.sid_epoch) * SID_BLOCK) % ID_WRAP

    def next_sid_reserved(self, epoch: int) -> bool:
        """Take the next session id in our start ``epoch``; True if it needed a new
        reservation (the keep must record it before a restart)."""
        sid = self.next_sid()
        if self.sid_reserved != 0 and id_after(self.sid_ceiling(epoch), sid):
            return False
        self.sid_reserved, self.sid_epoch = (sid + SID_BLOCK - 1) % ID_WRAP + 1, epoch
        return True

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

    def in_progress(self, kind: TransactionKind) -> Exchange | None:
        """A live transaction of ``kind``, if there is one."""
        for txn in self.transactions.values():
            if txn.kind == kind:
                return txn
        return None

