"""Alive (tk 4): an authenticated keep-alive that tells whether a remote answers.

The initiator sends an empty, encrypted and signed ``request``; the correspondent answers
``ack`` when the remote is joined and allowed, ``unjoined`` or ``unallowed`` otherwise, so
the initiator knows to join or allow again.  The correspondent keeps no state, so it lives
in ``Road`` as a single reply.  No answer within the time-out marks the remote dead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raetsalt.engine.transaction import Transaction
from raetsalt.wire.enums import BodyKind, CoatKind, FootKind, PacketKind, TransactionKind

if TYPE_CHECKING:
    from raetsalt.engine.remote import Remote
    from raetsalt.engine.road import Road
    from raetsalt.wire.packet import Packet


class AliveInitiator(Transaction):
    """Our presence check of a remote (raet's Aliver)."""

    kind = TransactionKind.ALIVE
    redo_min = 0.25
    redo_max = 1.0

    def __init__(self, road: Road, remote: Remote, *, now: float) -> None:
        super().__init__(
            road, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        self.timeout_at = now + road.config.alive_timeout

    def _send(self, now: float) -> None:
        header = self.header(
            PacketKind.REQUEST,
            body_kind=BodyKind.JSON,
            coat_kind=CoatKind.NACL,
            foot_kind=FootKind.NACL,
        )
        self.road.transmit(header, b"", self.remote.ha)
        self.restart_redo(now)

    def start(self, now: float) -> None:
        self._send(now)

    def on_redo(self, now: float) -> None:
        self._send(now)

    def receive(self, packet: Packet, now: float) -> None:
        kind = packet.header.packet_kind
        if kind == PacketKind.ACK:
            self.finish()  # the road already marked the remote alive on receipt
        elif kind == PacketKind.UNJOINED:
            self.finish()
            self.road.on_unjoined(self.remote, now)
        elif kind == PacketKind.UNALLOWED:
            self.finish()
            self.road.on_unallowed(self.remote, now)
        elif kind in (PacketKind.NACK, PacketKind.REFUSE, PacketKind.REJECT):
            self.finish()

    def on_timeout(self, now: float) -> None:
        self.finish()
        self.road.on_alive_timeout(self.remote, now)
