"""Message (tk 0): reliable, segmented, encrypted application messages.

Theory of operation (protocol.md 7.4).  The sender encrypts the whole body once (one
box, nonce at the end of the stream) and cuts the stream into segments that fit a
datagram; each segment packet is signed on its own.  It sends a bounded *burst* of
segments, flagging the last with ``wf`` (wait); the receiver answers a ``wf`` packet with
``resend`` (the missing segment numbers, at most 64 per packet) or ``ack`` (``sn`` = the
highest segment held), and answers the complete message with ``done``.  Retransmitted
segments carry ``af`` (again).  The bounded burst keeps a 1 MiB message from overrunning
a 208 KiB socket buffer, which raet (unbounded bursts) repairs by repeated go-back rounds.

Deliberate differences from raet 0.6.8: a sender has a time-out that surfaces as an
event; the road runs one message transaction per remote at a time, so messages are
delivered in the order they were sent; a duplicate of an already delivered message is
answered with ``done`` (raet answers ``nack``, making the sender believe it failed) and is
never delivered twice, however late it comes (quirk Q2).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from raetsalt.engine.events import DropReason, MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket
from raetsalt.wire.body import decode_body_untrusted, encode_body
from raetsalt.wire.enums import BodyKind, CoatKind, Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import segment_payload_size

if TYPE_CHECKING:
    from raetsalt.engine.remote import Outgoing, Remote
    from raetsalt.engine.road import Road
    from raetsalt.wire.packet import Packet

MISSEDS_PER_RESEND = 64
# A segment header adds at most this many bytes to the unsegmented one (protocol.md 3.8).
SEGMENT_HEAD_EXTRA = 27


class MessageSender(Transaction):
    """Sends one message (raet's Messenger)."""

    kind = TransactionKind.MESSAGE
    redo_min = 0.2
    redo_max = 0.5

    def __init__(self, road: Road, remote: Remote, outgoing: Outgoing, *, now: float) -> None:
        super().__init__(
            road, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        assert remote.session is not None
        self.outgoing = outgoing
        self.timeout_at = outgoing.expires
        stream = remote.session.seal(outgoing.body)
        base = self.header(
            PacketKind.MESSAGE,
            body_kind=road.config.body_kind,
            coat_kind=CoatKind.NACL,
            foot_kind=FootKind.NACL,
        )
        size = segment_payload_size(base, max_size=road.config.max_packet_size)
        if len(stream) <= size + SEGMENT_HEAD_EXTRA:
            self.segments = [stream]
            self.headers = [base]
        else:
            self.segments = [stream[i : i + size] for i in range(0, len(stream), size)]
            count = len(self.segments)
            self.headers = [
                replace(
                    base,
                    flags=Flag.SF,
                    segment_number=i,
                    segment_count=count,
                    message_length=len(stream),
                )
                for i in range(count)
            ]
        self.current = 0  # next segment of the first pass
        self.last_sent = 0
        self.misseds: set[int] = set()
        self.acked = False

    def start(self, now: float) -> None:
        self._send_burst(now)

    def _transmit(self, index: int, flags: Flag) -> None:
        header = self.headers[index]
        if header.flags != flags:
            header = self.headers[index] = replace(header, flags=flags)
        self.road.transmit(header, self.segments[index], self.remote.ha)
        self.last_sent = index

    def _send_burst(self, now: float) -> None:
        burst = self.road.config.burst or len(self.segments)
        end = min(self.current + burst, len(self.segments))
        for index in range(self.current, end):
            flags = self.headers[index].flags & ~Flag.WF
            self._transmit(index, flags | Flag.WF if index == end - 1 else flags)
        self.current = end
        self.restart_redo(now)

    def _send_misseds(self, now: float) -> None:
        burst = self.road.config.burst or len(self.misseds)
        chosen = sorted(self.misseds)[:burst]
        for index in chosen:
            flags = (self.headers[index].flags | Flag.AF) & ~Flag.WF
            self._transmit(index, flags | Flag.WF if index == chosen[-1] else flags)
            self.misseds.discard(index)
        self.restart_redo(now)

    def receive(self, packet: Packet, now: float) -> None:
        header = packet.header
        kind = header.packet_kind
        if kind == PacketKind.DONE:
            self.finish()
            self.road.emit(MessageDelivered(self.remote.name, self.outgoing.mid))
            self.road.on_message_finished(self.remote, now)
        elif kind == PacketKind.ACK:
            self.acked = True
            if self.misseds:
                self._send_misseds(now)
                return
            # Go back to just after the highest segment the receiver holds (tail loss).
            self.current = min(self.current, header.segment_number + 1)
            if self.current < len(self.segments):
                self._send_burst(now)
        elif kind == PacketKind.RESEND:
            self.acked = True
            body = self.road.open_body(self.remote, packet)
            misseds = body.get("misseds") if isinstance(body, dict) else None
            if not isinstance(misseds, list) or not all(
                isinstance(m, int) and not isinstance(m, bool) and 0 <= m < len(self.segments)
                for m in misseds
            ):
                raise BadPacket("resend names segments that do not exist", DropReason.BODY.value)
            self.misseds.update(misseds)
            if self.misseds:
                self._send_misseds(now)
        elif kind == PacketKind.UNALLOWED:
            # The receiver lost our session (it restarted): this message goes out again
            # once a new allow completes.
            self.road.on_unallowed(self.remote, now)
        elif kind == PacketKind.NACK:
            self.fail("nacked", now)

    def on_redo(self, now: float) -> None:
        flags = self.headers[self.last_sent].flags
        self._transmit(self.last_sent, flags | Flag.AF if self.acked else flags)
        self.restart_redo(now)

    def on_timeout(self, now: float) -> None:
        self.fail("timeout", now)

    def fail(self, reason: str, now: float) -> None:
        self.finish()
        self.road.emit(TransactionFailed(self.remote.name, "message", reason, self.outgoing.mid))
        self.road.on_message_finished(self.remote, now)


class MessageReceiver(Transaction):
    """Receives one message (raet's Messengent)."""

    kind = TransactionKind.MESSAGE
    redo_min = 0.2
    redo_max = 0.5

    def __init__(self, road: Road, remote: Remote, first: Header, *, now: float) -> None:
        super().__init__(
            road, remote, initiator=False, sid=first.session_id, tid=first.transaction_id, now=now
        )
        config = road.config
        count, length = first.segment_count, first.message_length
        if count < 1 or (count > 1 and not 0 < length <= config.max_message_size):
            raise BadPacket("segment count or message length out of range", DropReason.BODY.value)
        if count > 1 and count > length:
            raise BadPacket("more segments than message bytes", DropReason.BODY.value)
        self.count = count
        self.length = length
        self.body_kind = BodyKind(first.body_kind)
        self.coat_kind = CoatKind(first.coat_kind)
        # raet's receiver copies wf, ck and fk of the first packet into all its replies.
        self.reply_flags = first.flags & Flag.WF
        self.reply_foot = FootKind(first.foot_kind)
        self.segments: dict[int, bytes] = {}
        self.stored = 0
        self.highest = -1
        self.lowest = 0
        self.timeout_at = now + config.message_timeout
        self.redo_duration = self.redo_min
        self.redo_at = now + self.redo_min
        self.schedule()

    def _reply(self, kind: PacketKind, coat: bytes = b"", segment_number: int = 0) -> None:
        header = self.header(
            kind,
            body_kind=BodyKind.JSON,
            coat_kind=self.coat_kind,
            foot_kind=self.reply_foot,
            flags=self.reply_flags,
            segment_number=segment_number,
        )
        self.road.transmit(header, coat, self.remote.ha)

    def receive(self, packet: Packet, now: float) -> None:
        header = packet.header
        if header.packet_kind == PacketKind.NACK:
            self.finish()
            return
        if header.packet_kind != PacketKind.MESSAGE:
            return
        number = header.segment_number
        if header.segment_count != self.count or not 0 <= number < self.count:
            raise BadPacket(
                "segment number or count does not match the message", DropReason.BODY.value
            )
        if number not in self.segments:
            self.stored += len(packet.coat)
            if self.stored > self.length + self.count * self.road.config.max_packet_size:
                raise BadPacket("segments exceed the message length", DropReason.BODY.value)
            self.segments[number] = packet.coat
            self.highest = max(self.highest, number)
        if len(self.segments) == self.count:
            self._complete(now)
        elif header.flags & Flag.WF:
            self._ask(now)

    def _ask(self, now: float) -> None:
        misseds = [i for i in range(self.lowest, self.highest + 1) if i not in self.segments]
        if misseds:
            self.lowest = misseds[0]
            for start in range(0, len(misseds), MISSEDS_PER_RESEND):
                body = encode_body(
                    BodyKind.JSON, {"misseds": misseds[start : start + MISSEDS_PER_RESEND]}
                )
                self._reply(
                    PacketKind.RESEND, self.road.seal_body(self.remote, body, self.coat_kind)
                )
        else:
            self._reply(PacketKind.ACK, segment_number=max(self.highest, 0))
        self.restart_redo(now)

    def _complete(self, now: float) -> None:
        stream = b"".join(self.segments[i] for i in range(self.count))
        self.finish()
        if self.count > 1 and len(stream) != self.length:
            self._reply(PacketKind.NACK)
            raise BadPacket("reassembled message has the wrong length", DropReason.BODY.value)
        try:
            plain = self.road.open_coat(self.remote, stream, self.coat_kind)
            body: Any = decode_body_untrusted(self.body_kind, plain)
        except BadPacket:
            self._reply(PacketKind.NACK)
            raise
        self.remote.replay.record(self.tid)
        self._reply(PacketKind.DONE)
        self.road.emit(MessageReceived(self.remote.name, body))

    def on_redo(self, now: float) -> None:
        self._ask(now)

    def on_timeout(self, now: float) -> None:
        self._reply(PacketKind.NACK)
        self.finish()
