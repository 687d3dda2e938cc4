"""What every transaction has: ids, header template, timers, and a way to finish."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from raetsalt.engine.timers import backoff
from raetsalt.wire.enums import BodyKind, CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header

if TYPE_CHECKING:
    from raetsalt.engine.remote import Remote
    from raetsalt.engine.road import Road
    from raetsalt.wire.packet import Packet


NO_FLAGS = Flag(0)


class Transaction:
    """One exchange of packets with the same ``tk``/``si``/``ti`` (protocol.md 7).

    The initiator sends with the correspondent flag clear, the correspondent with it set.
    ``source_uid``/``destination_uid`` are fixed when the transaction starts, as raet does
    (a vacuous join keeps ``de = 0`` even in its final ack).
    Subclasses set ``kind`` and the redo/timeout policy, and implement ``receive`` and
    ``on_redo``.
    """

    kind: ClassVar[TransactionKind]
    redo_min: ClassVar[float] = 0.25
    redo_max: ClassVar[float] = 1.0
    timeout: ClassVar[float] = 0.0  # 0: never

    def __init__(
        self,
        road: Road,
        remote: Remote,
        *,
        initiator: bool,
        sid: int,
        tid: int,
        now: float,
        source_uid: int | None = None,
        destination_uid: int | None = None,
    ) -> None:
        self.road = road
        self.remote = remote
        self.initiator = initiator
        self.sid = sid
        self.tid = tid
        self.source_uid = remote.uid if source_uid is None else source_uid
        self.destination_uid = remote.fuid if destination_uid is None else destination_uid
        self.started = now
        self.timeout_at: float | None = now + self.timeout if self.timeout > 0 else None
        self.redo_duration = 0.0
        self.redo_at: float | None = None
        self.finished = False
        self.deadline: float | None = None

    @property
    def key(self) -> tuple[bool, int, int]:
        return (self.initiator, self.sid, self.tid)

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

    # -- timers -------------------------------------------------------------------------

    def restart_redo(self, now: float) -> None:
        """Every transmission restarts the redo timer with the next back-off interval."""
        self.redo_duration = backoff(self.redo_duration, self.redo_min, self.redo_max)
        self.redo_at = now + self.redo_duration
        self.schedule()

    def schedule(self) -> None:
        times = [t for t in (self.redo_at, self.timeout_at) if t is not None]
        self.road.timers.arm(self, min(times) if times and not self.finished else None)

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
        raise NotImplementedError

    def finish(self) -> None:
        self.finished = True
        if self.remote.transactions.get(self.key) is self:
            del self.remote.transactions[self.key]
        self.road.timers.arm(self, None)
