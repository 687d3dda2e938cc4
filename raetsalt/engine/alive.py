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
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote
    from raetsalt.wire.packet import Packet


class AliveInitiator(Transaction):
    """Our presence check of a remote (raet's Aliver)."""

    kind = TransactionKind.ALIVE
    redo_min = 0.25
    redo_max = 1.0

    def __init__(self, port: RoadPort, remote: Remote, *, now: float) -> None:
        super().__init__(
            port, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        self.timeout_at = now + port.config.alive_timeout

    def _send(self, now: float) -> None:
        self.send(
            PacketKind.REQUEST,
            body_kind=BodyKind.JSON,
            coat_kind=CoatKind.NACL,
            foot_kind=FootKind.NACL,
        )
        self.restart_redo(now)

    def start(self, now: float) -> None:
        self._send(now)

    def on_redo(self, now: float) -> None:
        self._send(now)

    def _on_ack(self, packet: Packet, now: float) -> None:
        self.finish()  # the road already marked the remote alive on receipt

    def _on_unjoined(self, packet: Packet, now: float) -> None:
        self.finish()
        self.port.on_unjoined(self.remote, now)

    def _on_unallowed(self, packet: Packet, now: float) -> None:
        self.finish()
        self.port.on_unallowed(self.remote, now)

    def _on_nack(self, packet: Packet, now: float) -> None:
        self.finish()

    handlers = {
        PacketKind.ACK: _on_ack,
        PacketKind.UNJOINED: _on_unjoined,
        PacketKind.UNALLOWED: _on_unallowed,
        PacketKind.NACK: _on_nack,
        PacketKind.REFUSE: _on_nack,
        PacketKind.REJECT: _on_nack,
    }

    def on_timeout(self, now: float) -> None:
        self.finish()
        self.port.on_alive_timeout(self.remote, now)
