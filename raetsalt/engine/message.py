"""Message (tk 0): reliable, segmented, encrypted application messages.

Theory of operation (docs/raet-wire.md §8.4).  The sender encrypts the whole body once (one
box, nonce at the end of the stream) and cuts the stream into segments that fit a
datagram; each segment packet is signed on its own.  A receiver answers every packet
flagged ``wf`` (wait) with ``resend`` (the missing segment numbers, at most 64 per
packet) or ``ack`` (``sn`` = the highest segment held, all below it held too), and the
complete message with ``done``.  Retransmitted segments carry ``af`` (again).

Sending is pipelined: up to ``RoadConfig.window`` segments are in flight beyond the last
ack, every ``RoadConfig.ack_every``-th one (and the last one) flagged ``wf``, so acks
stream back while the sender keeps sending instead of stopping after every burst.  raet
answers every ``wf`` packet the same way, so this is an ordinary raet sender with a
small burst size, only it does not wait for one burst's ack before the next.  Under
loss a receiver answers with resends rather than acks, so the window counts from the
highest segment either names.  A redo time-out (a few round trips without a reply)
re-sends the highest segment sent, flagged ``wf``, which makes the receiver name every
hole; a second one without progress and without any reply for raet's redo time goes
back to the first unacknowledged segment.

Receiving verifies lazily: a segment without ``wf`` of a message whose receiver exists
is stored without checking its signature (see ``Road._dispatch``).  The box of the
reassembled stream authenticates the whole message under the session key, and the
stream always holds at least one verified segment of this transaction (the one that
created the receiver), so neither a forged segment nor a replayed one from another
message can pass it.  Only if the box does not open are the unverified segments
verified one by one; the forged ones are dropped, the receiver verifies everything up
front from then on, and asks for the missing segments again.  ``Road`` finds such
segments without the head parser when their head is byte for byte the one
``SegmentHeads`` rebuilds from the receiver's first packet.

Memory (docs/security.md, Unfinished messages): a segmented message is received only if its
announced length (plus ``SEGMENT_OVERHEAD`` per segment) can be reserved from the road's
``ReassemblyBudget`` (``engine/reassembly.py``), else its first packet is dropped unanswered
and the sender retries; the segments held never add up to more than that length; and a
receiver without a new segment for ``RoadConfig.reassembly_timeout`` ends (nack), giving the
reservation back.

Deliberate differences from raet 0.6.8: a sender has a time-out that surfaces as an
event; the road runs one message transaction per remote at a time, so messages are
delivered in the order they were sent; a duplicate of an already delivered message is
answered with ``done`` (raet answers ``nack``, making the sender believe it failed) and is
never delivered twice, however late it comes (quirk Q2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from raetsalt.drops import DropReason
from raetsalt.engine.events import MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.reassembly import CHARGE_FLOOR
from raetsalt.engine.timers import backoff
from raetsalt.engine.transaction import Transaction
from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire.body import decode_body_untrusted, encode_body
from raetsalt.wire.enums import (
    BodyKind,
    CoatKind,
    Flag,
    FootKind,
    HeadKind,
    PacketKind,
    TransactionKind,
)
from raetsalt.wire.header import Header, encode_header
from raetsalt.wire.packet import segment_payload_size

if TYPE_CHECKING:
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Address, Outgoing, Remote
    from raetsalt.wire.packet import Packet

MISSEDS_PER_RESEND = 64
# A segment header adds at most this many bytes to the unsegmented one (docs/raet-wire.md §5).
SEGMENT_HEAD_EXTRA = 27
# A segment asked for again within this many smoothed round trips of its last
# retransmission is not sent again: the request predates the retransmission (every
# ``wf`` packet behind a hole asks for it while the retransmission is on its way).
RESEND_HOLD_RTTS = 2.0
RESEND_HOLD_MIN = 0.001
# A sender that has heard nothing for this many smoothed round trips (at least
# REDO_FLOOR, at most the raet redo time) probes: one packet, so an early probe is cheap.
# Going back over the whole window waits for the raet redo time without any reply.
REDO_RTTS = 4.0
REDO_FLOOR = 0.02

SEGMENT_OVERHEAD = 416
"""Bytes a held segment takes beyond its coat: its slot, and head, foot and source while
its signature is unchecked."""

_WF = int(Flag.WF)
_AF = int(Flag.AF)
# A segment with either flag is verified before anything looks at it: ``wf`` asks for a
# reply, ``cf`` marks a packet of a transaction we started; ``bf`` is refused anyway.
LAZY_EXCLUDED = int(Flag.WF | Flag.CF)
_LAZY_FAST_EXCLUDED = int(Flag.WF | Flag.CF | Flag.BF)
_SIGNATURE_SIZE = 64
_BLANK_FOOT = bytes(_SIGNATURE_SIZE)


def segments_charge(length: int, count: int) -> int:
    """What a raet-profile message of ``count`` segments, ``length`` bytes reserves."""
    return length + count * SEGMENT_OVERHEAD + CHARGE_FLOOR


def _segment_header(base: Header, index: int, flags: int, count: int, length: int) -> Header:
    return Header(
        packet_kind=base.packet_kind,
        transaction_kind=base.transaction_kind,
        source_uid=base.source_uid,
        destination_uid=base.destination_uid,
        session_id=base.session_id,
        transaction_id=base.transaction_id,
        flags=Flag(flags),
        segment_number=index,
        segment_count=count,
        message_length=length,
        body_kind=base.body_kind,
        coat_kind=base.coat_kind,
        foot_kind=base.foot_kind,
    )


class SegmentHeads:
    """The signed text heads of one message's segments, made without ``Header`` objects.

    The heads differ only in ``pl``, ``hl``, ``fg`` and ``sn``; the rest is cut once out of
    ``encode_header``'s own output, and ``make`` is compared with ``encode_header`` for a
    few segments under every flag combination before it is used (``build`` returns None
    on any disagreement, and for JSON heads, unsigned or unsegmented messages).
    ``stem`` is the head between ``fg`` and the blank line without the ``sn`` field: it
    names the transaction (``se``, ``de``, ``si``, ``ti``) and the message (``sc``, ``ml``).
    """

    __slots__ = ("pre", "post", "with_sn", "stem")

    def __init__(self, pre: str, post: str) -> None:
        self.pre, self.post = pre, post
        self.with_sn = pre + "\nsn {:x}" + post
        self.stem = (pre + post).encode("ascii")

    def make(self, index: int, flags: int, coat_length: int) -> bytes:
        tail = self.with_sn.format(index) if index else self.pre + self.post
        head_length = 29 + len(tail)  # the fixed start (27) and the blank line
        pl = f"{head_length + coat_length + _SIGNATURE_SIZE:04x}"[-4:]
        return f"ri RAET\npl {pl}\nhl {head_length:02x}\nfg {flags:02x}{tail}\n\n".encode()

    @classmethod
    def build(
        cls, base: Header, count: int, length: int, coat_lengths: dict[int, int], max_size: int
    ) -> SegmentHeads | None:
        """``coat_lengths``: segment number -> coat length of the segments to check."""
        if count < 2 or base.head_kind != HeadKind.RAET or base.foot_kind != FootKind.NACL:
            return None
        sf = int(Flag.SF)
        try:
            probe = encode_header(_segment_header(base, 1, sf, count, length), 0, _SIGNATURE_SIZE)
        except LocalError:
            return None
        text = probe.decode("ascii")
        fixed = "ri RAET\npl "
        if not text.startswith(fixed) or not text.endswith("\n\n"):
            return None
        rest = text[len(fixed) + len("XXXX\nhl XX\nfg XX") : -2]
        cut = rest.find("\nsn 1\n")
        if cut < 0:
            return None
        heads = cls(rest[:cut], rest[cut + len("\nsn 1") :])
        for index, coat in coat_lengths.items():
            for extra in (0, _WF, _AF, _AF | _WF):
                header = _segment_header(base, index, sf | extra, count, length)
                made = heads.make(index, sf | extra, coat)
                try:
                    expected = encode_header(header, coat, _SIGNATURE_SIZE)
                except LocalError:
                    return None
                if made != expected or len(made) + coat + _SIGNATURE_SIZE > max_size:
                    return None
        return heads


class MessageSender(Transaction):
    """Sends one message (raet's Messenger, pipelined)."""

    kind = TransactionKind.MESSAGE
    redo_min = 0.2
    redo_max = 0.5

    def __init__(self, port: RoadPort, remote: Remote, outgoing: Outgoing, *, now: float) -> None:
        super().__init__(
            port, remote, initiator=True, sid=remote.sid, tid=remote.next_tid(), now=now
        )
        assert remote.session is not None
        config = port.config
        self.outgoing = outgoing
        self.timeout_at = outgoing.expires
        stream = remote.session.seal(outgoing.body)
        base = self.header(
            PacketKind.MESSAGE,
            body_kind=config.body_kind,
            coat_kind=CoatKind.NACL,
            foot_kind=FootKind.NACL,
        )
        size = segment_payload_size(base, max_size=config.max_packet_size)
        self.base = base
        if len(stream) <= size + SEGMENT_HEAD_EXTRA:
            self.segments = [stream]
            self.segment_flags = 0
        else:
            self.segments = [stream[i : i + size] for i in range(0, len(stream), size)]
            self.segment_flags = int(Flag.SF)
        self.count = len(self.segments)
        self.stream_length = len(stream)
        last = self.count - 1
        checks = {0: len(self.segments[0]), 1: len(self.segments[1 % self.count])}
        checks[last] = len(self.segments[last])
        heads = SegmentHeads.build(
            base, self.count, self.stream_length, checks, config.max_packet_size
        )
        self.make_head = heads.make if heads is not None else None
        self._sign = port.local.signer.sign
        self.window = max(1, config.window or self.count)
        self.ack_every = max(1, config.ack_every)
        self.current = 0  # next segment of the first pass
        self.acked = -1  # every segment up to this one is held by the receiver
        # The receiver has seen this far: everything up to here is held or named missing
        # (a resend names only holes below the highest segment held).  The window counts
        # from here, so a receiver that keeps reporting fresh holes never stalls it.
        self.reported = -1
        self.highest_sent = -1
        self.replied = False  # the receiver has answered (so it knows the transaction)
        self.progress_at_redo = -1
        self.last_reply = now
        self.resent_at: dict[int, float] = {}
        self.wf_sent: dict[int, float] = {}  # first transmissions of wf segments (RTT)
        self.srtt: float | None = None

    def start(self, now: float) -> None:
        self._fill(now)

    def _transmit(self, index: int, flags: int) -> None:
        port, segment = self.port, self.segments[index]
        make_head = self.make_head
        if make_head is not None:
            # The hot path of a large message: one head, one signature, no Header objects.
            unsigned = make_head(index, flags | self.segment_flags, len(segment)) + segment
            signature = self._sign(unsigned + _BLANK_FOOT)
            port.transmit_datagram(unsigned + signature, self.remote.ha)
            return
        if self.count == 1:
            header = Header(
                packet_kind=self.base.packet_kind,
                transaction_kind=self.base.transaction_kind,
                source_uid=self.base.source_uid,
                destination_uid=self.base.destination_uid,
                session_id=self.base.session_id,
                transaction_id=self.base.transaction_id,
                flags=Flag(flags),
                body_kind=self.base.body_kind,
                coat_kind=self.base.coat_kind,
                foot_kind=self.base.foot_kind,
            )
        else:
            header = _segment_header(
                self.base, index, flags | self.segment_flags, self.count, self.stream_length
            )
        port.transmit(header, segment, self.remote.ha)

    def _fill(self, now: float) -> None:
        """Send new segments while the window allows; ``wf`` on every ``ack_every``-th,
        the last of the message and the last the window allows."""
        count, every = self.count, self.ack_every
        end = min(count, self.reported + 1 + self.window)
        start = self.current
        if start >= end:
            return
        wf_sent = self.wf_sent
        for index in range(start, end):
            if (index + 1) % every == 0 or index == end - 1:
                wf_sent[index] = now
                self._transmit(index, _WF)
            else:
                self._transmit(index, 0)
        self.current = end
        self.highest_sent = max(self.highest_sent, end - 1)
        self.restart_redo(now)

    def _resend(self, indices: list[int], now: float, *, hold: bool) -> None:
        """Retransmit ``indices`` (``af``; ``wf`` on the last one actually sent)."""
        if hold:
            limit = now - max(RESEND_HOLD_MIN, RESEND_HOLD_RTTS * (self.srtt or 0.0))
            resent_at = self.resent_at
            indices = [i for i in indices if resent_at.get(i, -1.0) <= limit]
        if not indices:
            return
        again = _AF if self.replied else 0
        last, every = len(indices) - 1, self.ack_every
        for n, index in enumerate(indices):
            self.resent_at[index] = now
            self.wf_sent.pop(index, None)  # Karn: no RTT samples from retransmissions
            wait = n == last or (n + 1) % every == 0
            self._transmit(index, again | _WF if wait else again)
        self.restart_redo(now)

    def restart_redo(self, now: float) -> None:
        """Redo after a few round trips of silence (doubling while it lasts)."""
        floor = self.redo_min
        if self.srtt is not None:
            floor = min(floor, max(REDO_FLOOR, REDO_RTTS * self.srtt))
        self.redo_duration = backoff(self.redo_duration, floor, self.redo_max)
        self.redo_at = now + self.redo_duration
        self.schedule()

    def _replied(self, now: float) -> None:
        self.replied = True
        self.last_reply = now
        self.redo_duration = 0.0  # the receiver is there: the next redo comes early again

    def _reported(self, top: int, now: float) -> None:
        """A resend named holes up to ``top``: the wf packet that asked for it came later,
        so the earliest such still unanswered gives an RTT sample (if anything, too long)."""
        self.reported = max(self.reported, top)
        later = [i for i in self.wf_sent if i > top]
        if later:
            self._sample(now - self.wf_sent[min(later)])
            for index in [i for i in self.wf_sent if i <= min(later)]:
                del self.wf_sent[index]

    def _sample(self, rtt: float) -> None:
        self.srtt = rtt if self.srtt is None else 0.875 * self.srtt + 0.125 * rtt

    def _acknowledged(self, number: int, now: float) -> None:
        number = min(number, self.count - 1)
        if number <= self.acked:
            return
        self.acked = number
        self.reported = max(self.reported, number)
        self.current = max(self.current, number + 1)
        sample = None
        for index in [i for i in self.wf_sent if i <= number]:
            sample = now - self.wf_sent.pop(index)
        if sample is not None:
            self._sample(sample)

    def _on_done(self, packet: Packet, now: float) -> None:
        self.finish()
        self.port.emit(MessageDelivered(self.remote.name, self.outgoing.mid))
        self.port.on_message_finished(self.remote, now)

    def _on_ack(self, packet: Packet, now: float) -> None:
        self._replied(now)
        self._acknowledged(packet.header.segment_number, now)
        self._fill(now)

    def _on_resend(self, packet: Packet, now: float) -> None:
        self._replied(now)
        body = self.port.open_body(self.remote, packet)
        misseds = body.get("misseds") if isinstance(body, dict) else None
        if not isinstance(misseds, list) or not all(
            isinstance(m, int) and not isinstance(m, bool) and 0 <= m < self.count
            for m in misseds
        ):
            raise BadPacket("resend names segments that do not exist", DropReason.BODY)
        # Segments at or below the last ack may be asked for too: a receiver that
        # found forged segments among those it held drops them and asks again.
        if misseds:
            self._reported(max(misseds), now)
        self._resend(sorted(set(misseds)), now, hold=True)
        self._fill(now)

    def _on_unallowed(self, packet: Packet, now: float) -> None:
        # The receiver lost our session (it restarted): this message goes out again
        # once a new allow completes.
        self.port.on_unallowed(self.remote, now)

    def _on_unjoined(self, packet: Packet, now: float) -> None:
        # The receiver forgot us (an operator deleted our key there): join again; this
        # message goes out again once a new session is up.
        self.port.on_unjoined(self.remote, now)

    def _on_nack(self, packet: Packet, now: float) -> None:
        self.fail("nacked", now)

    handlers = {
        PacketKind.DONE: _on_done,
        PacketKind.ACK: _on_ack,
        PacketKind.RESEND: _on_resend,
        PacketKind.UNALLOWED: _on_unallowed,
        PacketKind.UNJOINED: _on_unjoined,
        PacketKind.NACK: _on_nack,
    }

    def on_redo(self, now: float) -> None:
        if (
            self.acked == self.progress_at_redo
            and self.acked + 1 < self.highest_sent
            and now - self.last_reply >= self.redo_min
        ):
            # Two time-outs without progress: go back to the first segment not acked.
            end = min(self.highest_sent + 1, self.acked + 1 + self.window)
            self._resend(list(range(self.acked + 1, end)), now, hold=False)
        else:
            # Probe with the highest segment sent: the reply names every hole below it.
            self._resend([max(self.highest_sent, 0)], now, hold=False)
        self.progress_at_redo = self.acked

    def on_timeout(self, now: float) -> None:
        self.fail("timeout", now)

    def fail(self, reason: str, now: float) -> None:
        self.finish()
        self.port.emit(TransactionFailed(self.remote.name, "message", reason, self.outgoing.mid))
        self.port.on_message_finished(self.remote, now)


class MessageReceiver(Transaction):
    """Receives one message (raet's Messengent)."""

    kind = TransactionKind.MESSAGE
    redo_min = 0.2
    redo_max = 0.5

    def __init__(self, port: RoadPort, remote: Remote, first: Header, *, now: float) -> None:
        super().__init__(
            port, remote, initiator=False, sid=first.session_id, tid=first.transaction_id, now=now
        )
        config = port.config
        count, length = first.segment_count, first.message_length
        if count < 1 or (count > 1 and not 0 < length <= config.max_message_size):
            raise BadPacket("segment count or message length out of range", DropReason.BODY)
        if count > 1 and count > length:
            raise BadPacket("more segments than message bytes", DropReason.BODY)
        # Reserve what the segments may take before holding any (engine/reassembly.py).
        self.charge = 0
        if count > 1:
            size = segments_charge(length, count)
            if not port.reassembly.admit(remote.uid, size):
                raise BadPacket(
                    f"message of {length} bytes does not fit the reassembly caps",
                    DropReason.REASSEMBLY_LIMIT,
                )
            self.charge = size
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
        # Segments stored without verifying their signature: head, coat, foot, source.
        self.unverified: dict[int, tuple[bytes, bytes, bytes, tuple[str, int]]] = {}
        self.lazy = config.lazy_verify and count > 1 and remote.verifier is not None
        self.heads: SegmentHeads | None = None
        if self.lazy:
            base = Header(
                source_uid=first.source_uid,
                destination_uid=first.destination_uid,
                session_id=first.session_id,
                transaction_id=first.transaction_id,
                body_kind=first.body_kind,
                coat_kind=first.coat_kind,
                foot_kind=first.foot_kind,
                head_kind=first.head_kind,
            )
            size = max(1, min(length, config.max_packet_size))
            self.heads = SegmentHeads.build(
                base, count, length, {0: size, count - 1: size}, 1 << 16
            )
            if self.heads is not None:
                port.register_lazy(self.heads.stem, self)
        # A stall time-out: every new segment pushes it back (see on_timeout).
        self.progress_at = now
        self.timeout_at = now + config.reassembly_timeout
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
        self.port.transmit(header, coat, self.address)

    def _store(self, number: int, coat: bytes, now: float) -> bool:
        """Keep the segment unless its slot is taken; False if it was a duplicate."""
        if not 0 <= number < self.count:
            raise BadPacket("segment number out of range", DropReason.BODY)
        if number in self.segments:
            return False
        if self.count > 1 and self.stored + len(coat) > self.length:
            # Distinct segments of an honest sender add up to exactly the length.
            raise BadPacket("segments exceed the message length", DropReason.BODY)
        self.stored += len(coat)
        self.progress_at = now
        self.segments[number] = coat
        if number > self.highest:
            self.highest = number
        return True

    def _check_count(self, header: Header) -> None:
        if header.segment_count != self.count:
            raise BadPacket("segment count does not match the message", DropReason.BODY)

    def _on_nack(self, packet: Packet, now: float) -> None:
        self.finish()

    def _on_segment(self, packet: Packet, now: float) -> None:
        header = packet.header
        self._check_count(header)
        self._store(header.segment_number, packet.coat, now)
        if len(self.segments) == self.count and self._complete(now):
            return
        if header.flags & Flag.WF:
            self._ask(now)

    handlers = {PacketKind.NACK: _on_nack, PacketKind.MESSAGE: _on_segment}

    def receive_unverified(self, packet: Packet, address: tuple[str, int], now: float) -> None:
        """A segment without ``wf`` whose signature has not been checked (``lazy`` only)."""
        self._check_count(packet.header)
        self.receive_unverified_segment(
            packet.header.segment_number, packet.head, packet.coat, packet.foot, address, now
        )

    def receive_unverified_segment(
        self,
        number: int,
        head: bytes,
        coat: bytes,
        foot: bytes,
        address: tuple[str, int],
        now: float,
    ) -> None:
        """Store a segment whose signature has not been checked (``lazy`` only).

        Never answered: it only fills a slot, and completing the message can at most
        deliver what the box authenticates.
        """
        self.port.stats["lazy_segments"] += 1
        if self._store(number, coat, now):
            self.unverified[number] = (head, coat, foot, address)
            if len(self.segments) == self.count:
                self._complete(now)

    def _ask(self, now: float) -> None:
        segments = self.segments
        lowest = self.lowest
        while lowest in segments:
            lowest += 1
        self.lowest = lowest
        misseds = [i for i in range(lowest, self.highest + 1) if i not in segments]
        if misseds:
            for start in range(0, len(misseds), MISSEDS_PER_RESEND):
                body = encode_body(
                    BodyKind.JSON, {"misseds": misseds[start : start + MISSEDS_PER_RESEND]}
                )
                self._reply(
                    PacketKind.RESEND, self.port.seal_body(self.remote, body, self.coat_kind)
                )
        else:
            self._reply(PacketKind.ACK, segment_number=max(self.highest, 0))
        self.restart_redo(now)

    def _discard_forged(self) -> bool:
        """Verify the segments stored unverified; drop the forged ones.  From now on every
        segment is verified before it is stored.  True if any was forged."""
        self._stop_lazy()
        pending, self.unverified = self.unverified, {}
        verifier = self.remote.verifier
        forged = [
            (number, address)
            for number, (head, coat, foot, address) in pending.items()
            if verifier is None or not verifier.verify(head + coat + _BLANK_FOOT, foot)
        ]
        for number, address in forged:
            self.stored -= len(self.segments.pop(number))
            self.lowest = min(self.lowest, number)
            self.port.drop(DropReason.SIGNATURE, address, "forged message segment")
        if forged:
            self.highest = max(self.segments, default=-1)
        return bool(forged)

    def _stop_lazy(self) -> None:
        self.lazy = False
        if self.heads is not None:
            self.port.forget_lazy(self.heads.stem, self)
        self.heads = None

    def finish(self) -> None:
        super().finish()
        self._stop_lazy()
        self.segments, self.unverified = {}, {}
        if self.charge:
            self.port.reassembly.release(self.remote.uid, self.charge)
            self.charge = 0

    def _complete(self, now: float) -> bool:
        """All slots are filled: deliver, or return False if forged segments were dropped
        (the message is incomplete again).  Raises ``BadPacket`` for a bad message."""
        stream = b"".join([self.segments[i] for i in range(self.count)])
        failure: BadPacket
        if self.count > 1 and len(stream) != self.length:
            failure = BadPacket("reassembled message has the wrong length", DropReason.BODY)
        else:
            try:
                plain = self.port.open_coat(self.remote, stream, self.coat_kind)
            except BadPacket as exc:
                failure = exc
            else:
                self.finish()
                try:
                    body: Any = decode_body_untrusted(self.body_kind, plain)
                except BadPacket:
                    self._reply(PacketKind.NACK)
                    raise
                self.remote.replay.mark(self.tid)
                self._reply(PacketKind.DONE)
                self.port.emit(MessageReceived(self.remote.name, body))
                return True
        if self.unverified and self._discard_forged():
            return False
        self.finish()
        self._reply(PacketKind.NACK)
        raise failure

    def on_redo(self, now: float) -> None:
        self._ask(now)

    def on_timeout(self, now: float) -> None:
        resume = self.progress_at + self.port.config.reassembly_timeout
        if resume > now:  # a segment came since the time-out was set
            self.timeout_at = resume
            self.schedule()
            return
        if self.stored:
            self.port.drop(
                DropReason.REASSEMBLY_TIMEOUT,
                self.remote.ha,
                f"message {self.tid}: {len(self.segments)} of {self.count} segments, "
                f"no progress for {self.port.config.reassembly_timeout:g} s",
            )
        self._reply(PacketKind.NACK)
        self.finish()


def take_lazy_segment(
    data: bytes,
    address: Address,
    now: float,
    receivers: Mapping[bytes, MessageReceiver],
    max_size: int,
) -> bool:
    """Store a plain segment of a lazily verifying receiver without parsing it; False if
    ``data`` is not byte for byte the head such a segment has (the parser decides).

    The stem between ``fg`` and the blank line, without ``sn``, finds the receiver; the
    head is then rebuilt from its fields and must equal ``data``'s exactly, so this
    accepts only what the parser would read as the same header.
    """
    if len(data) > max_size or not data.startswith(b"ri RAET\npl "):
        return False
    try:
        head_length = int(data[19:21], 16)
        flags = int(data[25:27], 16)
    except ValueError:
        return False
    if flags & _LAZY_FAST_EXCLUDED:
        return False
    tail = data[27 : head_length - 2]
    start = tail.find(b"\nsn ")
    if start < 0:
        number, stem = 0, tail
    else:
        end = tail.find(b"\n", start + 4)
        if end < 0:
            return False
        try:
            number = int(tail[start + 4 : end], 16)
        except ValueError:
            return False
        stem = tail[:start] + tail[end:]
    txn = receivers.get(stem)
    if txn is None or txn.heads is None:
        return False
    coat_end = len(data) - _SIGNATURE_SIZE
    head = data[:head_length]
    if coat_end < head_length or head != txn.heads.make(number, flags, coat_end - head_length):
        return False
    txn.receive_unverified_segment(
        number, head, data[head_length:coat_end], data[coat_end:], address, now
    )
    return True
