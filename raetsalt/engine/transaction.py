"""What every transaction has: ids, header template, timers, a table of packet handlers,
and a way to finish."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from raetsalt.engine.timers import backoff
from raetsalt.wire.enums import BodyKind, CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header

if TYPE_CHECKING:
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.packet import Packet


NO_FLAGS = Flag(0)

Handler = Callable[[Any, "Packet", float], None]


class Transaction:
    """One exchange of packets with the same ``tk``/``si``/``ti`` (docs/raet-wire.md §8).

    The initiator sends with the correspondent flag clear, the correspondent with it set.
    ``source_uid``/``destination_uid`` are fixed when the transaction starts, as raet does
    (a vacuous join keeps ``de = 0`` even in its final ack).  A correspondent answers the
    address its first packet came from (``reply_to``); an initiator sends to wherever the
    remote is now.

    Subclasses set ``kind``, the redo/timeout policy and ``handlers`` (packet kind ->
    method), and implement ``on_redo``.  A packet kind without a handler is ignored.
    """

    kind: ClassVar[TransactionKind]
    redo_min: ClassVar[float] = 0.25
    redo_max: ClassVar[float] = 1.0
    timeout: ClassVar[float] = 0.0  # 0: never
    handlers: ClassVar[Mapping[int, Handler]] = {}

    def __init__(
        self,
        port: RoadPort,
        remote: Remote,
        *,
        initiator: bool,
        sid: int,
        tid: int,
        now: float,
        source_uid: int | None = None,
        destination_uid: int | None = None,
        reply_to: Address | None = None,
    ) -> None:
        self.port = port
        self.remote = remote
        self.initiator = initiator
        self.sid = sid
        self.tid = tid
        self.source_uid = remote.uid if source_uid is None else source_uid
        self.destination_uid = remote.fuid if destination_uid is None else destination_uid
        self.reply_to = reply_to
        self.started = now
        self.timeout_at: float | None = now + self.timeout if self.timeout > 0 else None
        self.redo_duration = 0.0
        self.redo_at: float | None = None
        self.finished = False
        self.deadline: float | None = None

    @property
    def key(self) -> tuple[bool, int, int]:
        return (self.initiator, self.sid, self.tid)

    @property
    def address(self) -> Address:
        """Where this transaction's packets go."""
        return self.remote.ha if self.reply_to is None else self.reply_to

    def header(
        self,
        packet_kind: PacketKind,
        *,
        body_kind: BodyKind = BodyKind.JSON,
        coat_kind: CoatKind = CoatKind.NADA,
        foot_kind: FootKind = FootKind.NADA,
        flags: Flag = NO_FLAGS,
        segment_number: int = 0,
    ) -> Header:
        if not self.initiator:
            flags |= Flag.CF
        return Header(
            packet_kind=packet_kind,
            transaction_kind=self.kind,
            source_uid=self.source_uid,
            destination_uid=self.destination_uid,
            session_id=self.sid,
            transaction_id=self.tid,
            flags=flags,
            body_kind=body_kind,
            coat_kind=coat_kind,
            foot_kind=foot_kind,
            segment_number=segment_number,
        )

    def send(self, kind: PacketKind, coat: bytes = b"", **fields: Any) -> None:
        """Queue one packet of this transaction to ``address``."""
        self.port.transmit(self.header(kind, **fields), coat, self.address)

    # -- timers -------------------------------------------------------------------------

    def restart_redo(self, now: float) -> None:
        """Every transmission restarts the redo timer with the next back-off interval."""
        self.redo_duration = backoff(self.redo_duration, self.redo_min, self.redo_max)
        self.redo_at = now + self.redo_duration
        self.schedule()

    def schedule(self) -> None:
        times = [t for t in (self.redo_at, self.timeout_at) if t is not None]
        self.port.arm(self, min(times) if times and not self.finished else None)

    def on_timer(self, now: float) -> None:
        if self.finished:
            return
        if self.timeout_at is not None and now >= self.timeout_at:
            self.on_timeout(now)
            return
        if self.redo_at is not None and now >= self.redo_at:
            self.redo_at = None
            self.on_redo(now)
        self.schedule()

    def on_redo(self, now: float) -> None:
        """Retransmit whatever the protocol says to retransmit."""

    def on_timeout(self, now: float) -> None:
        self.finish()

    # -- life cycle ---------------------------------------------------------------------

    def receive(self, packet: Packet, now: float) -> None:
        """An authenticated (or, for joins, well-formed) packet of this transaction."""
        handler = self.handlers.get(packet.header.packet_kind)
        if handler is not None:
            handler(self, packet, now)

    def finish(self) -> None:
        self.finished = True
        if self.remote.transactions.get(self.key) is self:
            del self.remote.transactions[self.key]
        self.port.arm(self, None)


def mirrored_header(packet: Packet, kind: PacketKind, *, copy_wait: bool = False) -> Header:
    """The head of a reply to a packet outside any transaction: ids mirrored, the other
    side's correspondent flag, coat and foot kinds copied (raet's Stalent/Staler)."""
    header = packet.header
    flags = Flag(0) if header.flags & Flag.CF else Flag.CF
    if copy_wait:
        flags |= header.flags & Flag.WF
    return Header(
        packet_kind=kind,
        transaction_kind=header.transaction_kind,
        source_uid=header.destination_uid,
        destination_uid=header.source_uid,
        session_id=header.session_id,
        transaction_id=header.transaction_id,
        flags=flags,
        body_kind=BodyKind.JSON,
        coat_kind=header.coat_kind,
        foot_kind=header.foot_kind,
    )
