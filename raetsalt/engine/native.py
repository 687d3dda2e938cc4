"""The native profile: the fast message path used when both ends are raetsalt.

Negotiation (inside the authenticated allow handshake, so it cannot be downgraded):
our responder starts its cookie ``oreo`` with ``OREO_MARK``; the oreo travels inside the
cookie box, which only the holder of the responder's long-term key can make.  Our
initiator, seeing the mark, puts ``FQDN_MARK`` in the initiate's fqdn field, inside the
initiate box, which only the holder of the initiator's short-term key can make.  A raet
0.6.8 peer never sends either mark, so it always gets the exact raet format; tampering
with either mark breaks a box and the handshake fails (closed), it does not fall back.

Packet layout (all integers big-endian)::

    magic(2) = b"\\xf5\\x01" | receiver's uid for the sender (4) | counter (8) | box

``box`` is ``crypto_box_easy_afternm`` of the frames under the session key with nonce
``direction byte + 15 zero bytes + counter``; the direction byte differs for the two
senders so nonces never repeat under the shared key.  The box authenticates everything
(uid and counter select the key and nonce), so there is no per-packet signature.
A counter is accepted once (sliding window), so replays are dropped.

Frames inside the box::

    DATA  0x01 | body kind (1) | seq (4) | total length (4) | offset (4) | length (2) | bytes
    ACK   0x02 | range count (1) | count x (first counter (8), last counter (8))
    LEAST 0x03 | counter (8): the sender no longer needs acks below this counter

Messages get a per-session sequence number, are cut into DATA frames once, and many
frames share one datagram (coalescing).  The receiver acknowledges packet counters in
ranges after every batch of datagrams; the sender declares a packet lost when three later
packets are acknowledged or it is older than the round trip allows, and queues its
frames again; when the probe time-out fires it sends the oldest one or two again as
probes, whose acks then reveal the real losses.  A byte window caps what is in flight, so a
fast sender never overruns the receiver's socket buffer.  Messages are delivered in
sequence order; a message counts as delivered when every frame of it is acknowledged.

Reassembly is bounded (``engine/reassembly.py``): a message that does not fit the road's
caps is refused, and a packet with a refused frame is not acknowledged, so the sender
sends it again later; a stalled message is discarded after a time-out.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raetsalt.engine.events import DropReason, MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.reassembly import Reassembly
from raetsalt.errors import BadPacket
from raetsalt.wire.body import decode_body_untrusted
from raetsalt.wire.enums import BodyKind

_BODY_KINDS = {int(k): k for k in BodyKind}

if TYPE_CHECKING:
    from raetsalt.crypto import SessionBox
    from raetsalt.engine.remote import Outgoing, Remote
    from raetsalt.engine.road import Road

OREO_MARK = b"RSnative"  # 8 of the oreo's 24 bytes
FQDN_MARK = b"raetsalt-native/1"
MAGIC = b"\xf5\x01"

_PREFIX = struct.Struct("!2sIQ")  # magic, receiver uid, counter
_DATA = struct.Struct("!BBIIIH")
_ACK_HEAD = struct.Struct("!BB")
_RANGE = struct.Struct("!QQ")
_LEAST = struct.Struct("!BQ")
_ONE_RANGE = struct.Struct("!BBQQ")  # an ACK frame with a single range, the usual case
_NONCE = struct.Struct("!16sQ")
# The usual request/response packet, parsed and built in one go: LEAST, an ACK of one
# range, and the head of one DATA frame (its bytes follow).
_LEAST_ACK_DATA = struct.Struct("!BQBBQQBBIIIH")
_LEAST_ACK = struct.Struct("!BQBBQQ")
_DATA_FRAME = 1
_ACK_FRAME = 2
_LEAST_FRAME = 3
# What the frames of one received packet amounted to.
_NO_DATA = 0
_HELD = 1
_REFUSED = 2  # a data frame was not held (reassembly caps): the packet is not acked
_TAG = 16
MAX_ACK_RANGES = 64
PACKET_THRESHOLD = 3
MAX_REORDER = 1024
INITIAL_RTT = 0.05
MIN_PTO = 0.002
ACK_DELAY = 0.001
"""A lone data packet's ack waits this long for a reply to ride on (two are acked at once)."""
MAX_PTO = 2.0
PROBE_PACKETS = 2
"""Packets sent again when the probe time-out fires (RFC 9002 sends one or two probes):
the rest wait for the probes' acks, which declare real losses below them at once.
Re-sending everything stale made queueing delay (a full window behind a slow hop)
look like a lost window, and the spurious copies added to the queue."""
REPLAY_WINDOW = 65536
"""Counters this far below the highest accepted one are refused as replays."""
_WINDOW_MASK = REPLAY_WINDOW - 1


@dataclass(slots=True)
class _Sent:
    at: float
    size: int
    frames: list[tuple[int, bytes]]  # (message seq, encoded frame)


@dataclass(slots=True)
class _Message:
    mid: int
    frames_left: int
    expires: float
    outgoing: Outgoing


class _ReplayWindow:
    """Which of the last ``REPLAY_WINDOW`` counters up to the highest were accepted.

    One bit per counter in a fixed ring (8 KiB), so memory and the cost per packet are
    constant: no set that grows with traffic and has to be rebuilt (a 131072-entry set
    took milliseconds to prune, a stall every 65536 packets).  Counters at or below
    ``highest - REPLAY_WINDOW`` count as seen.
    """

    __slots__ = ("bits", "highest")

    def __init__(self) -> None:
        self.bits = bytearray(REPLAY_WINDOW // 8)
        self.highest = 0

    def seen(self, counter: int) -> bool:
        if counter > self.highest:
            return False
        if counter + REPLAY_WINDOW <= self.highest:
            return True
        index = counter & _WINDOW_MASK
        return bool(self.bits[index >> 3] >> (index & 7) & 1)

    def mark(self, counter: int) -> None:
        if counter > self.highest:
            if counter - self.highest > 1:
                # The slots of the skipped counters still hold counters that just left
                # the window: clear them so the skipped ones can arrive late.
                self._clear(self.highest + 1, counter)
            self.highest = counter
        index = counter & _WINDOW_MASK
        self.bits[index >> 3] |= 1 << (index & 7)

    def _clear(self, first: int, stop: int) -> None:
        """Forget counters ``first`` up to (not including) ``stop``."""
        if stop - first >= REPLAY_WINDOW:
            self.bits = bytearray(REPLAY_WINDOW // 8)
            return
        bits = self.bits
        counter = first
        while counter < stop and counter & 7:  # up to a byte boundary, bit by bit
            index = counter & _WINDOW_MASK
            bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
            counter += 1
        whole = (stop - counter) >> 3
        if whole > 0:  # whole bytes, possibly wrapping around the ring
            start = (counter & _WINDOW_MASK) >> 3
            head = min(whole, len(bits) - start)
            bits[start : start + head] = bytes(head)
            if whole > head:
                bits[: whole - head] = bytes(whole - head)
            counter += whole << 3
        while counter < stop:
            index = counter & _WINDOW_MASK
            bits[index >> 3] &= ~(1 << (index & 7)) & 0xFF
            counter += 1


def is_native(data: bytes) -> bool:
    return data[:2] == MAGIC


def parse_prefix_untrusted(data: bytes) -> tuple[int, int]:
    """(receiver uid, counter) of a native datagram."""
    if len(data) < _PREFIX.size + _TAG:
        raise BadPacket("native datagram too short", DropReason.MALFORMED.value)
    _, uid, counter = _PREFIX.unpack_from(data)
    return uid, counter


class Channel:
    """The native session with one remote: sending, acknowledging and reassembling."""

    def __init__(
        self,
        road: Road,
        remote: Remote,
        box: SessionBox,
        *,
        initiator: bool,
        datagram_size: int,
        window: int,
    ) -> None:
        self.road = road
        self.remote = remote
        self.box = box
        self._tx_nonce = bytes([1 if initiator else 2]) + bytes(15)
        self._rx_nonce = bytes([2 if initiator else 1]) + bytes(15)
        self.datagram_size = datagram_size
        self._limit = datagram_size - _PREFIX.size - _TAG  # plaintext bytes per datagram
        self.chunk = self._limit - _LEAST.size - _DATA.size
        self.window = window
        self.deadline: float | None = None
        # sending
        self.counter = 0
        self.next_seq = 1
        self.queue: deque[tuple[int, bytes]] = deque()
        self.in_flight: dict[int, _Sent] = {}
        self.bytes_in_flight = 0
        self.largest_acked = 0
        self.messages: dict[int, _Message] = {}
        self.srtt = INITIAL_RTT
        self.rttvar = INITIAL_RTT / 2
        self.rtt_sampled = False
        self.pto_count = 0
        self._pto = self._compute_pto()
        self._probed_at = 0.0  # when the probe time-out last fired (0: not since an ack)
        self.reorder_threshold = PACKET_THRESHOLD
        self.declared_lost: dict[int, None] = {}
        # receiving
        self.rx_window = _ReplayWindow()
        self.ack_ranges: list[list[int]] = []  # [first, last], newest last
        self.ack_pending = 0  # data packets received and not yet acknowledged
        self.ack_due = False  # an ack must go out at the next flush, data or not
        self.ack_deadline: float | None = None
        config = road.config  # frozen
        self._max_message = config.max_message_size
        self.inbox = Reassembly(
            road.reassembly,
            remote.uid,
            max_message=config.max_message_size,
            timeout=config.reassembly_timeout,
            deliver=self._deliver,
            drop=self._drop,
        )

    # -- sending ------------------------------------------------------------------------

    def enqueue(self, outgoing: Outgoing, kind: BodyKind) -> None:
        seq = self.next_seq
        self.next_seq = seq + 1
        body = outgoing.body
        total = len(body)
        chunk = self.chunk
        if total <= chunk:
            self.queue.append((seq, _DATA.pack(_DATA_FRAME, kind, seq, total, 0, total) + body))
            frames = 1
        else:
            frames = 0
            for offset in range(0, total, chunk):
                piece = body[offset : offset + chunk]
                self.queue.append(
                    (seq, _DATA.pack(_DATA_FRAME, kind, seq, total, offset, len(piece)) + piece)
                )
                frames += 1
        self.messages[seq] = _Message(outgoing.mid, frames, outgoing.expires, outgoing)
        self.road.mark_dirty(self)

    def flush(self, now: float, out: list[tuple[bytes, tuple[str, int]]]) -> None:
        """Send what the window allows, coalescing frames; an owed ack rides along, or
        goes alone once it is due."""
        queue = self.queue
        if queue and self.bytes_in_flight < self.window:
            limit = self._limit
            in_flight = self.in_flight
            least_pack = _LEAST.pack
            while queue and self.bytes_in_flight < self.window:
                # Tell the receiver which acks still matter, so its ranges stay few.
                least = next(iter(in_flight)) if in_flight else self.counter + 1
                with_ack = False
                if self.ack_pending:
                    ranges = self.ack_ranges
                    if len(ranges) == 1:  # the usual case: both frames in one pack
                        head = _LEAST_ACK.pack(
                            _LEAST_FRAME, least, _ACK_FRAME, 1, ranges[0][0], ranges[0][1]
                        )
                    else:
                        head = least_pack(_LEAST_FRAME, least) + self._ack_frame()
                    if len(head) + len(queue[0][1]) <= limit:
                        with_ack = True
                    else:  # no room beside data: the ack goes alone
                        self._emit(head[_LEAST.size :], now, out, None, with_ack=True)
                        head = head[: _LEAST.size]
                else:
                    head = least_pack(_LEAST_FRAME, least)
                size = len(head)
                # ``chunk`` leaves room for LEAST and one DATA frame, so the first fits.
                item = queue.popleft()
                frames = [item]
                size += len(item[1])
                if not queue or size + len(queue[0][1]) > limit:
                    plain = head + item[1]
                else:
                    parts = [head, item[1]]
                    while queue and size + len(queue[0][1]) <= limit:
                        item = queue.popleft()
                        frames.append(item)
                        parts.append(item[1])
                        size += len(item[1])
                    plain = b"".join(parts)
                self._emit(plain, now, out, frames, with_ack=with_ack)
        if self.ack_due and self.ack_pending:
            self._emit(self._ack_frame(), now, out, None, with_ack=True)
        self._arm()

    def _emit(
        self,
        plain: bytes,
        now: float,
        out: list[tuple[bytes, tuple[str, int]]],
        frames: list[tuple[int, bytes]] | None,
        *,
        with_ack: bool,
    ) -> None:
        data = self.seal_packet(plain)
        counter = self.counter
        out.append((data, self.remote.ha))
        if frames is not None:
            size = len(data)
            self.in_flight[counter] = _Sent(now, size, frames)
            self.bytes_in_flight += size
        if with_ack:
            self.ack_pending = 0
            self.ack_due = False
            self.ack_deadline = None

    def seal_packet(self, plain: bytes) -> bytes:
        """The datagram carrying ``plain`` (frames) under the next packet counter."""
        counter = self.counter = self.counter + 1
        return _PREFIX.pack(MAGIC, self.remote.fuid, counter) + self.box.encrypt(
            plain, _NONCE.pack(self._tx_nonce, counter)
        )

    def _ack_frame(self) -> bytes:
        ranges = self.ack_ranges
        if len(ranges) == 1:
            return _ONE_RANGE.pack(_ACK_FRAME, 1, ranges[0][0], ranges[0][1])
        ranges = ranges[-MAX_ACK_RANGES:]
        return _ACK_HEAD.pack(_ACK_FRAME, len(ranges)) + b"".join(
            _RANGE.pack(a, b) for a, b in ranges
        )

    def _on_ack(self, ranges: list[tuple[int, int]], now: float) -> None:
        top = self.counter
        for first, last in ranges:
            if last < first or last > top:
                raise BadPacket("ack range names packets never sent", DropReason.BODY.value)
        if self.declared_lost:
            for first, last in ranges:
                self._spurious(first, last)
        in_flight = self.in_flight
        if not in_flight:
            return
        messages = self.messages
        newly_largest = 0
        largest_at = 0.0
        freed = 0
        completed = False
        for first, last in ranges:
            # Walk whichever is shorter: the range or what is in flight.
            acked: range | list[int]
            if last - first < len(in_flight):
                acked = range(first, last + 1)
            else:
                acked = [c for c in in_flight if first <= c <= last]
            for counter in acked:
                sent = in_flight.pop(counter, None)
                if sent is None:
                    continue
                freed += sent.size
                if counter > newly_largest:
                    newly_largest = counter
                    largest_at = sent.at
                for seq, _ in sent.frames:
                    message = messages.get(seq)
                    if message is not None:
                        message.frames_left -= 1
                        if not message.frames_left:
                            completed = True
        if not newly_largest:
            return
        self.bytes_in_flight -= freed
        if completed:
            self._confirm()
        self.pto_count = 0
        self._probed_at = 0.0
        if newly_largest > self.largest_acked:
            self.largest_acked = newly_largest
            sample = now - largest_at
            if not self.rtt_sampled:  # the first sample replaces the guess (RFC 9002)
                self.rtt_sampled = True
                self.srtt, self.rttvar = sample, sample / 2
            else:
                self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
                self.srtt = 0.875 * self.srtt + 0.125 * sample
        self._pto = self._compute_pto()
        # Below the lowest range this ack reports, it says nothing (the receiver keeps
        # only so many ranges): those packets are left to later acks or the probe.
        if in_flight:
            self._detect_lost(now, floor=min(first for first, _ in ranges))
        if self.queue:  # the window opened: send more at the next flush
            self.road.mark_dirty(self)

    def _confirm(self) -> None:
        # The receiver delivers in sequence order, so confirm in that order too: a
        # message counts as delivered once it and every earlier one are fully acked.
        messages = self.messages
        emit = self.road.emit
        name = self.remote.name
        while messages:
            first = next(iter(messages))
            if messages[first].frames_left > 0:
                break
            done = messages.pop(first)
            emit(MessageDelivered(name, done.mid))

    def _spurious(self, first: int, last: int) -> None:
        """Packets we declared lost were acknowledged after all: the path reorders, so
        wait for more later packets before declaring a loss (as RACK does)."""
        late = [c for c in self.declared_lost if first <= c <= last]
        if late:
            for counter in late:
                del self.declared_lost[counter]
            self.reorder_threshold = min(self.reorder_threshold * 2, MAX_REORDER)
            self.road.stats["native_spurious_retransmit"] += len(late)

    def _detect_lost(self, now: float, *, floor: int) -> None:
        horizon = now - 1.125 * max(self.srtt, MIN_PTO)
        threshold = self.largest_acked - self.reorder_threshold
        lost = []
        for counter, sent in self.in_flight.items():
            if counter >= self.largest_acked:
                break  # in flight is in sending order
            if counter >= floor and (counter <= threshold or sent.at <= horizon):
                lost.append(counter)
        if not lost:
            return
        for counter in lost:
            self.declared_lost[counter] = None
        while len(self.declared_lost) > 4096:
            del self.declared_lost[next(iter(self.declared_lost))]
        self._requeue(lost)

    def _requeue(self, counters: list[int]) -> None:
        frames: list[tuple[int, bytes]] = []
        for counter in sorted(counters):
            sent = self.in_flight.pop(counter)
            self.bytes_in_flight -= sent.size
            frames.extend(f for f in sent.frames if f[0] in self.messages)
        if frames:
            self.road.stats["native_retransmit"] += len(frames)
            self.queue.extendleft(reversed(frames))
            self.road.mark_dirty(self)

    def _compute_pto(self) -> float:
        # srtt + max(4 rttvar, MIN_PTO), at least MIN_PTO, doubled per unanswered probe
        # (at most 2**10 times), at most MAX_PTO; spelled without builtins (once per ack).
        variance = 4 * self.rttvar
        base = self.srtt + (variance if variance > MIN_PTO else MIN_PTO)
        if base < MIN_PTO:
            base = MIN_PTO
        if self.pto_count:
            base *= 1 << (self.pto_count if self.pto_count < 10 else 10)
        return base if base < MAX_PTO else MAX_PTO

    def pto(self) -> float:
        """The probe time-out: how long the oldest packet in flight may go unacked."""
        return self._pto

    def _arm(self) -> None:
        # Both dicts are in sending order, so their first entries are the oldest.
        when = None
        if self.in_flight:
            # After a probe the time-out counts from the probe, not the oldest packet.
            oldest = next(iter(self.in_flight.values())).at
            when = (oldest if oldest > self._probed_at else self._probed_at) + self._pto
        if self.messages:
            expires = next(iter(self.messages.values())).expires
            if when is None or expires < when:
                when = expires
        ack_deadline = self.ack_deadline
        if ack_deadline is not None and (when is None or ack_deadline < when):
            when = ack_deadline
        inbox = self.inbox
        if inbox.partials or inbox.ready:
            stall = inbox.get_timer()
            if stall is not None and (when is None or stall < when):
                when = stall
        # A live heap entry stays valid while the deadline is unchanged (lazy
        # invalidation in TimerQueue), so only a moved deadline costs a push.
        if when != self.deadline:
            self.road.timers.arm(self, when)

    def on_timer(self, now: float) -> None:
        self.inbox.on_timer(now)
        if self.ack_deadline is not None and self.ack_deadline <= now:
            self.ack_deadline = None
            self.ack_due = True
        expired = [seq for seq, m in self.messages.items() if m.expires <= now]
        for seq in expired:
            message = self.messages.pop(seq)
            self.road.emit(TransactionFailed(self.remote.name, "message", "timeout", message.mid))
        if expired:
            self._confirm()  # a complete message may now be the oldest
        # The same expression as in _arm, so float rounding cannot leave a due timer idle.
        pto, probed_at = self._pto, self._probed_at
        probes = []
        for counter, sent in self.in_flight.items():  # oldest first
            if (sent.at if sent.at > probed_at else probed_at) + pto > now:
                break
            probes.append(counter)
            if len(probes) == PROBE_PACKETS:
                break
        if probes:
            self.pto_count += 1
            self._pto = self._compute_pto()
            self._probed_at = now
            self._requeue(probes)
        self.road.mark_dirty(self)

    # -- receiving ----------------------------------------------------------------------

    def receive_untrusted(self, data: bytes, counter: int, now: float) -> None:
        window = self.rx_window
        if counter <= window.highest and window.seen(counter):  # new counters: no call
            raise BadPacket("native counter already seen", DropReason.REPLAY.value)
        plain = self.box.decrypt_untrusted(
            data[_PREFIX.size :], _NONCE.pack(self._rx_nonce, counter)
        )
        # Authenticated from here on.  Only packets carrying data are acknowledged (an
        # ack of an ack would never end), but every counter goes into the ranges.
        try:
            carries = self._frames_untrusted(plain, now)
            if carries == _REFUSED:
                # Data we could not hold: leave the packet unacknowledged, so the sender
                # sends its frames again under new counters (this one is marked seen).
                self.rx_window.mark(counter)
            else:
                self._record(counter, carries == _HELD, now)
        finally:
            self._arm()  # once per packet, whatever its frames changed

    def _record(self, counter: int, ack_eliciting: bool, now: float) -> None:
        self.rx_window.mark(counter)
        ranges = self.ack_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            ranges.append([counter, counter])
            ranges.sort()
            merged: list[list[int]] = []
            for first, last in ranges:
                if merged and merged[-1][1] + 1 >= first:
                    merged[-1][1] = max(merged[-1][1], last)
                else:
                    merged.append([first, last])
            self.ack_ranges = merged[-MAX_ACK_RANGES:]
        if ack_eliciting:
            self.ack_pending += 1
            if self.ack_pending >= 2:
                self.ack_due = True
                self.road.mark_dirty(self)
            elif self.ack_deadline is None:
                self.ack_deadline = now + ACK_DELAY

    def _frames_untrusted(self, plain: bytes, now: float) -> int:
        """Handle the frames of one packet: ``_NO_DATA``, ``_HELD`` (data taken) or
        ``_REFUSED`` (a data frame was not held)."""
        end = len(plain)
        if (
            end >= _LEAST_ACK_DATA.size
            and plain[0] == _LEAST_FRAME
            and plain[9] == _ACK_FRAME
            and plain[10] == 1
            and plain[27] == _DATA_FRAME
        ):
            (_, least, _, _, first, last, _, body_kind, seq, total, offset, length) = (
                _LEAST_ACK_DATA.unpack_from(plain)
            )
            inbox = self.inbox
            if (
                length == end - _LEAST_ACK_DATA.size
                and offset == 0
                and length == total
                and seq == inbox.next_deliver
                and total <= self._max_message
            ):
                # One whole message, the next in order, with a one-range ack: the same
                # steps as the loop below takes for these three frames, in that order.
                ranges = self.ack_ranges
                if ranges and ranges[0][0] < least:
                    self._forget_below(least)
                self._on_ack([(first, last)], now)
                self._deliver(body_kind, plain[_LEAST_ACK_DATA.size :])
                if inbox.waiting:
                    inbox.delivered(seq, now)
                else:
                    inbox.next_deliver = seq + 1
                return _HELD
        inbox = self.inbox
        pos = 0
        carries = _NO_DATA
        try:
            while pos < end:
                kind = plain[pos]
                if kind == _DATA_FRAME:
                    _, body_kind, seq, total, offset, length = _DATA.unpack_from(plain, pos)
                    pos += _DATA.size
                    if pos + length > end:
                        raise BadPacket("truncated native data frame", DropReason.BODY.value)
                    if (
                        offset == 0
                        and length == total
                        and seq == inbox.next_deliver
                        and total <= self._max_message
                    ):
                        # A whole message, the next in order: no reassembly, no copy
                        # beyond the slice (the common case for small messages).
                        self._deliver(body_kind, plain[pos : pos + length])
                        if inbox.waiting:
                            inbox.delivered(seq, now)
                        else:
                            inbox.next_deliver = seq + 1
                        if carries == _NO_DATA:
                            carries = _HELD
                    elif inbox.take(seq, body_kind, total, offset, plain, pos, length, now):
                        if carries == _NO_DATA:
                            carries = _HELD
                    else:
                        carries = _REFUSED
                    pos += length
                elif kind == _LEAST_FRAME:
                    _, least = _LEAST.unpack_from(plain, pos)
                    pos += _LEAST.size
                    ranges = self.ack_ranges
                    if ranges and ranges[0][0] < least:
                        self._forget_below(least)
                elif kind == _ACK_FRAME:
                    count = plain[pos + 1]
                    if count == 1:
                        _, _, first, last = _ONE_RANGE.unpack_from(plain, pos)
                        pos += _ONE_RANGE.size
                        self._on_ack([(first, last)], now)
                    else:
                        pos += _ACK_HEAD.size
                        ranges_in = [
                            _RANGE.unpack_from(plain, pos + i * _RANGE.size) for i in range(count)
                        ]
                        pos += count * _RANGE.size
                        self._on_ack(ranges_in, now)
                else:
                    raise BadPacket("unknown native frame", DropReason.BODY.value)
        except (struct.error, IndexError) as exc:
            raise BadPacket(f"truncated native frame: {exc}", DropReason.BODY.value) from None
        return carries

    def _forget_below(self, least: int) -> None:
        ranges = self.ack_ranges
        while ranges and ranges[0][1] < least:
            ranges.pop(0)
        if ranges and ranges[0][0] < least:
            ranges[0][0] = least

    def _deliver(self, body_kind: int, data: bytes | bytearray) -> None:
        kind = _BODY_KINDS.get(body_kind)
        try:
            if kind is None:
                raise BadPacket("unknown body kind", DropReason.BODY.value)
            value = decode_body_untrusted(kind, data)
        except BadPacket:
            self.road.stats["drop_body"] += 1
            return
        self.road.emit(MessageReceived(self.remote.name, value))

    def _drop(self, reason: str, detail: str) -> None:
        self.road.drop(reason, self.remote.ha, detail)

    # -- end of the session -------------------------------------------------------------

    def unfinished(self) -> list[Outgoing]:
        """Messages not yet fully acknowledged, in order (to send again in a new session).

        Ends the channel: its reassembly reservations go back to the road's budget."""
        self.road.timers.arm(self, None)
        self.inbox.close()
        return [m.outgoing for _, m in sorted(self.messages.items())]
