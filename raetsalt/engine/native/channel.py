"""The native profile: the fast message path used when both ends are raetsalt.

Negotiation (inside the authenticated allow handshake, so it cannot be downgraded):
our responder starts its cookie ``oreo`` with ``OREO_MARK``; the oreo travels inside the
cookie box, which only the holder of the responder's long-term key can make.  Our
initiator, seeing the mark, puts ``FQDN_MARK`` in the initiate's fqdn field, inside the
initiate box, which only the holder of the initiator's short-term key can make.  A raet
0.6.8 peer never sends either mark, so it always gets the exact raet format; tampering
with either mark breaks a box and the handshake fails (closed), it does not fall back.
The marks name the frame format's version: ends of different versions use raet's.

Packet layout (all integers big-endian)::

    magic(2) = b"\\xf5\\x01" | receiver's uid for the sender (4) | counter (8) | box

``box`` is ``crypto_box_easy_afternm`` of the frames under the session key with nonce
``direction byte + 15 zero bytes + counter``; the direction byte differs for the two
senders so nonces never repeat under the shared key.  The box authenticates everything
(uid and counter select the key and nonce), so there is no per-packet signature.
A counter is accepted once (sliding window), so replays are dropped.

Frames inside the box (layouts in ``engine/scheduler.py``)::

    DATA  0x01 | body kind (1) | stream (1) | seq (4) | total (4) | offset (4) | length (2) | bytes
    ACK   0x02 | range count (1) | count x (first counter (8), last counter (8))
    LEAST 0x03 | counter (8): the sender no longer needs acks below this counter
    BATCH 0x04 | body kind (1) | stream (1) | first seq (4) | count (2) | count x length (2)
               | the bodies of count whole messages with consecutive seqs
    ACK_NOW 0x05: acknowledge at once (the sender's window is full; no delayed ack)
    PATH_CHALLENGE 0x06, PATH_RESPONSE 0x07: address migration (``engine/migration.py``)
    KEY_OFFER 0x08, KEY_ACCEPT 0x09, KEY_CONFIRM 0x0a: key rotation (``engine/rekey.py``)

Messages travel on streams with their own sequence numbers: small ones on the express
stream, large ones on the bulk stream, so a small message never waits behind bulk bytes;
each stream is delivered in order (``engine/scheduler.py`` says what goes where and
when).  Many frames share one datagram (coalescing).  The receiver acknowledges packet
counters in ranges after every batch of datagrams; the sender declares a packet lost
when three later packets are acknowledged or it is older than the round trip allows,
and queues its frames again; when the probe time-out fires it sends the oldest one or
two again as probes, whose acks then reveal the real losses.  What may be in flight, and
when it may go, is the flow gate's (``engine/flow.py``: the congestion controller and
pacer of ``engine/congestion.py``) to say; a datagram after which it is full asks for
an ack at once (ACK_NOW), so the window never idles for the receiver's ack delay.  One
``flush`` sends at most ``FLUSH_BYTES`` while packets are in flight, so the driver reads
acks and replies between bursts, and the pieces of a bulk transfer with nothing else to
send are framed in a tight loop (``_burst``).  A message counts as delivered when every
frame of it is acknowledged.

Reassembly is bounded (``engine/reassembly.py``): a message that does not fit the road's
caps is refused, and a packet with a refused frame is not acknowledged, so the sender
sends it again later; a stalled message is discarded after a time-out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from raetsalt.drops import DropReason
from raetsalt.engine import migration, native_trains, rekey, trains
from raetsalt.engine.congestion import PERSISTENT_PTOS, Controller, LossResponse, Snapshot
from raetsalt.engine.events import MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.flow import QUIET_PIECE, SendWindow
from raetsalt.engine.native_trains import ACK_DELAY
from raetsalt.engine.reassembly import Reassembly
from raetsalt.engine.remote import Address, Outgoing, Receive
from raetsalt.engine.replay import ReplayWindow
from raetsalt.engine.scheduler import (
    BATCH_FRAME,
    BATCH_HEAD,
    DATA_FRAME,
    DATA_HEAD,
    STREAMS,
    Frame,
    Scheduler,
    lengths_struct,
)
from raetsalt.errors import BadPacket
from raetsalt.wire.body import decode_body_untrusted
from raetsalt.wire.enums import BodyKind

_BODY_KINDS = {int(k): k for k in BodyKind}

if TYPE_CHECKING:
    from raetsalt.crypto import SessionBox
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote

Datagram = bytes | bytearray
"""What a road sends: native packets are built in place (bytearray), raet ones are bytes;
a ``trains.Train`` (a bytearray) is several native datagrams back to back, sent only to a
driver that asked for them (``RoadConfig.native_trains``)."""

OREO_MARK = b"RSnativ3"  # 8 of the oreo's 24 bytes
FQDN_MARK = b"raetsalt-native/3"
MAGIC = b"\xf5\x01"

_PREFIX = struct.Struct("!2sIQ")  # magic, receiver uid, counter
_ACK_HEAD = struct.Struct("!BB")
_RANGE = struct.Struct("!QQ")
_LEAST = struct.Struct("!BQ")
_ONE_RANGE = struct.Struct("!BBQQ")  # an ACK frame with a single range, the usual case
_LEAST_ACK = struct.Struct("!BQBBQQ")  # LEAST and a one-range ACK, built in one go
_LEAST_DATA = struct.Struct("!BQ" + DATA_HEAD.format[1:])  # LEAST and a DATA head, read at once
_NONCE = struct.Struct("!16sQ")
_ACK_FRAME = 2
_LEAST_FRAME = 3
_ACK_NOW_FRAME = 5
_ACK_NOW = b"\x05"
ACK_NOW = _ACK_NOW
"""A packet of this frame alone is a probe: answered by an ack (``engine/alive_native.py``)."""
# What the frames of one received packet amounted to.
_NO_DATA = 0
_HELD = 1
_REFUSED = 2  # a data frame was not held (reassembly caps): the packet is not acked
_TAG = 16
MAX_ACK_RANGES = 64
MAX_CONTROL = 8
"""Path and key frames waiting for the next flush (more are not sent)."""
FLUSH_BYTES = 256 * 1024
"""Bytes of datagrams one ``flush`` makes while packets are in flight: then the driver
reads (acks, replies) before it sends more, so a reply does not wait behind the
encryption of a whole window."""
MAX_CACHED_COUNT = 1024
"""BATCH frames of at most this many messages have their lengths layout cached."""
PACKET_THRESHOLD = 3
MAX_REORDER = 1024
INITIAL_RTT = 0.05
MIN_PTO = 0.002
MAX_PTO = 2.0
PROBE_PACKETS = 2
"""Packets sent again when the probe time-out fires (RFC 9002 sends one or two probes):
the rest wait for the probes' acks, which declare real losses below them at once.
Re-sending everything stale made queueing delay (a full window behind a slow hop)
look like a lost window, and the spurious copies added to the queue."""


@dataclass(slots=True)
class _Sent:
    at: float
    size: int
    frames: list[Frame]
    delivery: Snapshot
    """The delivery count when it was sent (``Controller.snapshot``, for rate samples)."""


def is_native(data: bytes) -> bool:
    return data[:2] == MAGIC


def parse_prefix_untrusted(data: bytes) -> tuple[int, int]:
    """(receiver uid, counter) of a native datagram."""
    if len(data) < _PREFIX.size + _TAG:
        raise BadPacket("native datagram too short", DropReason.MALFORMED)
    _, uid, counter = _PREFIX.unpack_from(data)
    return uid, counter


def _lengths_untrusted(plain: bytearray, pos: int, count: int) -> tuple[int, ...]:
    if count <= MAX_CACHED_COUNT:
        return lengths_struct(count).unpack_from(plain, pos)
    return struct.unpack_from(f"!{count}H", plain, pos)


class Channel:
    """The native session with one remote: sending, acknowledging and reassembling."""

    def __init__(
        self,
        port: RoadPort,
        remote: Remote,
        box: SessionBox,
        *,
        initiator: bool,
        datagram_size: int,
        window: int,
        now: float = 0.0,
        loss_response: LossResponse = LossResponse.BANDWIDTH,
    ) -> None:
        self.port = port
        self.remote = remote
        self.box = box
        """The key datagrams are sealed with (``keys.box``, which rotates)."""
        self.keys = rekey.KeyRing(
            box,
            now,
            interval=port.config.native_rekey_interval,
            packets=port.config.native_rekey_packets,
            initiator=initiator,
        )
        self.path: migration.PathValidation | None = None
        """A new address of the remote being validated (engine/migration.py)."""
        self._path_answer = b""  # the token of a PATH_RESPONSE in the packet being read
        # Frames that go in datagrams of their own at the next flush, to the remote's
        # address (None) or the one being validated.
        self._control: list[tuple[bytes, Address | None]] = []
        self._kernel = trains.KERNEL
        self._key = box.shared_key
        self._tx_nonce = bytes([1 if initiator else 2]) + bytes(15)
        self._rx_nonce = bytes([2 if initiator else 1]) + bytes(15)
        self.datagram_size = datagram_size
        self._limit = datagram_size - _PREFIX.size - _TAG  # plaintext bytes per datagram
        self._flush_most = max(2, FLUSH_BYTES // datagram_size)  # datagrams per flush
        config = port.config  # frozen
        self.deadline: float | None = None
        # sending
        self.counter = 0
        room = self._limit - _LEAST.size - len(_ACK_NOW)  # a datagram with one frame
        self._chunk = room - DATA_HEAD.size  # a bulk piece that fills a datagram
        self._quiet_chunk = min(self._chunk, QUIET_PIECE - (datagram_size - self._chunk))
        self.scheduler = Scheduler(
            chunk=self._chunk,
            whole_max=room - BATCH_HEAD.size - 2,
            express_size=config.native_express_size,
            confirm=self._confirmed,
            fail=self._failed,
        )
        self.cc = Controller(datagram_size, window, loss_response)
        self.flow = SendWindow(self.cc)
        self._pacing_wait = False  # the last flush stopped for the pacer: wake at its time
        # Packets sent, by counter - _sent_base: a _Sent while in flight, else None.
        self._sent: list[_Sent | None] = []
        self._sent_base = 1
        self._head = 0  # index of the oldest packet in flight (or len(_sent))
        self.bytes_in_flight = 0
        self.largest_acked = 0
        self.srtt = INITIAL_RTT
        self.rttvar = INITIAL_RTT / 2
        self.latest_rtt = 0.0
        self.rtt_sampled = False
        self.pto_count = 0
        self._pto = self._compute_pto()
        self._probed_at = 0.0  # when the probe time-out last fired (0: not since an ack)
        self.reorder_threshold = PACKET_THRESHOLD
        self.declared_lost: dict[int, None] = {}
        # receiving
        self.rx_window = ReplayWindow()
        self.ack_ranges: list[list[int]] = []  # [first, last], newest last
        self.ack_pending = 0  # data packets received and not yet acknowledged
        self.ack_due = False  # an ack must go out at the next flush, data or not
        self.ack_deadline: float | None = None
        self._max_message = config.max_message_size
        self.inboxes = [
            Reassembly(
                port.reassembly,
                remote.uid,
                max_message=config.max_message_size,
                timeout=config.reassembly_timeout,
                deliver=self._deliver,
                drop=self._drop,
            )
            for _ in range(STREAMS)
        ]
        self._arm()  # the key rotation's timer runs from the start

    # -- sending ------------------------------------------------------------------------

    def enqueue(self, outgoing: Outgoing, kind: BodyKind) -> None:
        self.scheduler.add_message(outgoing.mid, outgoing.body, kind, outgoing.expires)
        self.port.want_flush(self)

    def enqueue_batch(self, first_mid: int, bodies: list[bytes], expires: float) -> None:
        """Queue msgpack ``bodies`` (mids ``first_mid`` on), confirmed by one
        ``MessageDelivered`` whose ``count`` covers them all."""
        self.scheduler.add_batch(first_mid, bodies, BodyKind.MSGPACK, expires)
        self.port.want_flush(self)

    def flush(self, now: float, out: list[tuple[Datagram, tuple[str, int]]]) -> None:
        """Send what the flow gate allows, coalescing frames; an owed ack rides along, or
        goes alone once it is due."""
        scheduler = self.scheduler
        self._pacing_wait = False
        if self.keys.sealed >= self.keys.packets:
            self._queue_control(self.keys.on_timer(now, self._pto), None)
        if self._control:
            control, self._control = self._control, []
            for frame, address in control:
                if address is None:
                    out.append((self.seal_packet(frame), self.remote.ha))
                else:  # an address being validated: paid from what came from there
                    self.port.transmit_datagram(bytes(self.seal_packet(frame)), address)
        if scheduler.has_data():
            # Smaller bulk pieces while express messages flow (flow.QUIET_PIECE).
            scheduler.chunk = self._quiet_chunk if self.flow.quiet_now(now) else self._chunk
            limit = self._limit
            allowance = self.flow.allowance
            paced = self.cc.paced
            end = len(out)  # what this flush sends is out[end:]
            while scheduler.has_data():
                if self.bytes_in_flight and len(out) - end >= self._flush_most:
                    # Enough for one pass: the driver reads (acks, replies) before more.
                    self.port.want_flush(self)
                    break
                if not self.ack_pending and self._burst(now, out):
                    continue
                express_only = False
                if allowance(self.bytes_in_flight, now) <= 0:
                    # The window is full: only express frames may go, a little beyond it.
                    if not scheduler.express_first() or (
                        allowance(self.bytes_in_flight, now, express=True) <= 0
                    ):
                        break
                    express_only = True
                elif not scheduler.express_first() and paced(now) < self.datagram_size:
                    # Room in the window but not yet in time: wake when the pacer allows.
                    self._pacing_wait = True
                    break
                # Tell the receiver which acks still matter, so its ranges stay few.
                sent = self._sent
                least = self._sent_base + self._head if self._head < len(sent) else self.counter + 1
                with_ack = False
                if self.ack_pending:
                    first = scheduler.first_size()
                    if not first:
                        break
                    ranges = self.ack_ranges
                    if len(ranges) == 1:  # the usual case: both frames in one pack
                        head = _LEAST_ACK.pack(
                            _LEAST_FRAME, least, _ACK_FRAME, 1, ranges[0][0], ranges[0][1]
                        )
                    else:
                        head = _LEAST.pack(_LEAST_FRAME, least) + self._ack_frame()
                    if len(head) + first + len(_ACK_NOW) <= limit:
                        with_ack = True
                    else:  # no room beside the first frame: the ack goes alone
                        self._emit((head[_LEAST.size :],), now, out, None, with_ack=True)
                        head = head[: _LEAST.size]
                else:
                    head = _LEAST.pack(_LEAST_FRAME, least)
                parts: list[bytes | memoryview] = [head]
                frames: list[Frame] = []
                # One byte kept for ACK_NOW: a datagram that fills the window asks for an
                # ack at once, or the sender would idle for the receiver's ack delay.
                room = limit - len(head) - len(_ACK_NOW)
                used, express = scheduler.fill(room, parts, frames, express_only=express_only)
                if not frames:
                    break
                size = len(head) + used + _PREFIX.size + _TAG
                self.flow.on_sent(now, size, express=express)
                if allowance(self.bytes_in_flight + size, now) <= 0:
                    parts.append(_ACK_NOW)
                self._emit(parts, now, out, frames, with_ack=with_ack)
        if self.ack_due and self.ack_pending:
            self._emit((self._ack_frame(),), now, out, None, with_ack=True)
        self._arm()

    def _burst(self, now: float, out: list[tuple[Datagram, tuple[str, int]]]) -> bool:
        """The pieces of a bulk transfer, one per datagram, sealed in one call (a train):
        what ``flush`` does for them one by one, without its per-datagram choices (nothing
        else is waiting and no ack is owed; ``Scheduler.burst`` checks).  False: not now."""
        item, count = self.scheduler.burst(self._flush_most)
        if item is None or count < 2:  # (first: small messages never pay for the rest)
            return False
        size = trains.OVERHEAD + self.scheduler.chunk  # a datagram with one whole piece
        room = self.flow.allowance(self.bytes_in_flight, now)
        most = -(-room // size) if room > 0 else 0
        paced = self.cc.paced(now)
        if paced < most * self.datagram_size:
            most = int(paced // self.datagram_size)
        if most < count:
            count = most
            if count < 2:
                return False
        sent = self._sent
        idle = self._head >= len(sent)  # nothing in flight: the head moves to the burst
        # A slot for every counter up to the last one sealed (seal_packet leaves none),
        # so the burst's records sit at their own counters.
        missing = self.counter - self._sent_base + 1 - len(sent)
        if missing > 0:
            sent.extend([None] * missing)
        chunk = self.scheduler.chunk
        length = trains.OVERHEAD + chunk  # of every datagram (the last may ask for an ack)
        # The window is full after the last one: it asks for an ack at once.
        ack_now = room - (count - 1) * length - size <= 0
        least, seal = self._oldest_counter(), self._kernel.seal_pieces
        key, nonce = self._key, self._tx_nonce
        fuid, kind, stream, seq = self.remote.fuid, item.kind, item.stream, item.first_seq
        counter, offset, ha = self.counter, item.sent, self.remote.ha
        train = trains.Train(length * (count - 1))
        train.segment = length
        seal(key, nonce, fuid, counter, least, kind, stream, seq, item.body, offset, chunk,
             count - 1, False, train)
        last = bytearray(length + ack_now)
        seal(key, nonce, fuid, counter + count - 1, least, kind, stream, seq, item.body,
             offset + (count - 1) * chunk, chunk, 1, ack_now, last)
        if self.port.config.native_trains:
            out.append((train, ha))
        else:
            out.extend((train[i : i + length], ha) for i in range(0, len(train), length))
        out.append((last, ha))
        end = offset + (count - 1) * chunk
        delivery = self.cc.snapshot
        sent.extend(
            [_Sent(now, length, [(item, at, chunk)], delivery) for at in range(offset, end, chunk)]
        )
        sent.append(_Sent(now, len(last), [(item, end, chunk)], delivery))
        if idle:
            self._trim()
        self.counter = counter + count
        self.keys.sealed += count
        flying = length * (count - 1) + len(last)
        self.bytes_in_flight += flying
        self.flow.on_sent(now, flying, express=False)
        self.scheduler.took(item, count)
        return True

    def _oldest_counter(self) -> int:
        return self._sent_base + self._head if self._head < len(self._sent) else self.counter + 1

    def _emit(
        self,
        parts: Sequence[bytes | memoryview],
        now: float,
        out: list[tuple[Datagram, tuple[str, int]]],
        frames: list[Frame] | None,
        *,
        with_ack: bool,
    ) -> None:
        counter = self.counter = self.counter + 1
        data = self._kernel.seal(self._key, self._tx_nonce, self.remote.fuid, counter, parts)
        out.append((data, self.remote.ha))
        sent = self._sent
        before = len(sent)
        index = counter - self._sent_base
        if before < index:  # counters sealed without a record (seal_packet)
            sent.extend([None] * (index - before))
        if frames is None:
            sent.append(None)
        else:
            size = len(data)
            sent.append(_Sent(now, size, frames, self.cc.snapshot))
            self.bytes_in_flight += size
        if self._head >= before:  # nothing was in flight: the head moves to the new end
            self._trim()
        if with_ack:
            self.ack_pending = 0
            self.ack_due = False
            self.ack_deadline = None

    def seal_packet(self, plain: bytes) -> bytearray:
        """The datagram carrying ``plain`` (frames) under the next packet counter."""
        counter = self.counter = self.counter + 1
        self.keys.sealed += 1
        return self._kernel.seal(self._key, self._tx_nonce, self.remote.fuid, counter, (plain,))

    def _ack_frame(self) -> bytes:
        ranges = self.ack_ranges
        if len(ranges) == 1:
            return _ONE_RANGE.pack(_ACK_FRAME, 1, ranges[0][0], ranges[0][1])
        ranges = ranges[-MAX_ACK_RANGES:]
        return _ACK_HEAD.pack(_ACK_FRAME, len(ranges)) + b"".join(
            _RANGE.pack(a, b) for a, b in ranges
        )

    # -- acknowledgements, loss and time-outs ---------------------------------------------

    def _on_ack(self, ranges: list[tuple[int, int]], now: float) -> None:
        top = self.counter
        for first, last in ranges:
            if last < first or last > top:
                raise BadPacket("ack range names packets never sent", DropReason.BODY)
        if self.declared_lost:
            self._spurious(ranges)
        sent = self._sent
        base = self._sent_base
        head = self._head
        if head >= len(sent):
            return
        newly_largest = 0
        newest: _Sent | None = None
        oldest_at = 0.0
        freed = 0
        acked_frames = self.scheduler.acked
        for first, last in ranges:
            start = first - base
            if start < head:
                start = head
            stop = last - base + 1
            if stop > len(sent):
                stop = len(sent)
            for index in range(start, stop):
                record = sent[index]
                if record is None:
                    continue
                sent[index] = None
                freed += record.size
                acked_frames(record.frames)
                counter = base + index
                if counter > newly_largest:
                    newly_largest = counter
                    newest = record
                if not oldest_at:
                    oldest_at = record.at  # ranges come in order: the oldest acked
        if newest is None:
            return
        quiet_since = self.cc.acked_sent_at
        in_flight = self.bytes_in_flight
        self.bytes_in_flight = in_flight - freed
        self._trim()
        self.pto_count = 0
        self._probed_at = 0.0
        sample = None
        if newly_largest > self.largest_acked:
            self.largest_acked = newly_largest
            sample = self.latest_rtt = now - newest.at
            if not self.rtt_sampled:  # the first sample replaces the guess (RFC 9002)
                self.rtt_sampled = True
                self.srtt, self.rttvar = sample, sample / 2
            else:
                self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
                self.srtt = 0.875 * self.srtt + 0.125 * sample
        self.cc.on_acked(freed, in_flight, newest.at, newest.delivery, sample, self.srtt, now)
        self._pto = self._compute_pto()
        # The ranges reach down to the LEAST we sent unless the receiver cut them to
        # MAX_ACK_RANGES: below a cut ack's lowest range, left to later acks or the probe.
        if self._head < len(self._sent):
            floor = min(first for first, _ in ranges) if len(ranges) >= MAX_ACK_RANGES else 0
            self._detect_lost(now, floor=floor, quiet=(quiet_since, oldest_at))
        if self.scheduler.has_data():  # the window opened: send more at the next flush
            self.port.want_flush(self)

    def _trim(self) -> None:
        """Move ``_head`` past packets no longer in flight; drop the records behind it."""
        sent = self._sent
        head = self._head
        end = len(sent)
        while head < end and sent[head] is None:
            head += 1
        if head > 1024 and head * 2 > end:
            del sent[:head]
            self._sent_base += head
            head = 0
        self._head = head

    def _confirmed(self, mid: int, count: int) -> None:
        self.port.emit(MessageDelivered(self.remote.name, mid, count))

    def _failed(self, mid: int) -> None:
        self.port.emit(TransactionFailed(self.remote.name, "message", "timeout", mid))

    def _spurious(self, ranges: list[tuple[int, int]]) -> None:
        """Packets we declared lost were acknowledged after all: the path reorders, so
        wait for more later packets before declaring a loss (as RACK does)."""
        declared = self.declared_lost
        late: list[int] = []
        for first, last in ranges:
            # Walk whichever is shorter: the range or what was declared lost.
            if last - first < len(declared):
                late.extend(c for c in range(first, last + 1) if c in declared)
            else:
                late.extend(c for c in declared if first <= c <= last)
        if late:
            for counter in late:
                declared.pop(counter, None)
            self.reorder_threshold = min(self.reorder_threshold * 2, MAX_REORDER)
            self.port.stats["native_spurious_retransmit"] += len(late)
        # Below our oldest packet in flight the receiver keeps no ranges (LEAST): no ack comes.
        least = self._oldest_counter()
        while declared and next(iter(declared)) < least:
            del declared[next(iter(declared))]

    def _detect_lost(self, now: float, *, floor: int, quiet: tuple[float, float]) -> None:
        """Declare lost what is below ``floor`` and too old or too far below the largest
        acked; ``quiet``: nothing sent between these times was acknowledged."""
        # RFC 9002 6.1.2: 9/8 of the larger of the smoothed and the latest round trip, so
        # a queue that is building (the latest above the average) is not taken for loss.
        rtt = self.srtt if self.srtt > self.latest_rtt else self.latest_rtt
        horizon = now - 1.125 * (rtt if rtt > MIN_PTO else MIN_PTO)
        threshold = self.largest_acked - self.reorder_threshold
        sent, base = self._sent, self._sent_base
        start = max(self._head, floor - base)
        stop = self.largest_acked - base
        lost = []
        oldest = newest = 0.0
        lost_bytes = 0
        for index in range(start, stop):
            record = sent[index]
            if record is not None and (base + index <= threshold or record.at <= horizon):
                lost.append(base + index)
                lost_bytes += record.size
                if not oldest:
                    oldest = record.at
                newest = record.at
        if not lost:
            return
        for counter in lost:
            self.declared_lost[counter] = None
        while len(self.declared_lost) > 4096:
            del self.declared_lost[next(iter(self.declared_lost))]
        self._requeue(lost)
        cc = self.cc
        reduced = cc.on_congestion(newest, now, lost_bytes, self.latest_rtt)
        if reduced is not None:
            self.port.stats["native_congestion" if reduced else "native_random_loss"] += 1
        # Persistent congestion (RFC 9002 7.6): the losses span three probe time-outs
        # and nothing sent between the oldest and the newest of them was acknowledged.
        span = (self.srtt + max(4 * self.rttvar, MIN_PTO) + ACK_DELAY) * PERSISTENT_PTOS
        if self.rtt_sampled and newest - oldest > span and quiet[0] < oldest and newest < quiet[1]:
            cc.on_persistent_congestion()
            self.port.stats["native_persistent_congestion"] += 1

    def _requeue(self, counters: list[int]) -> None:
        sent, base = self._sent, self._sent_base
        again = 0
        for counter in counters:
            record = sent[counter - base]
            if record is None:
                continue
            sent[counter - base] = None
            self.bytes_in_flight -= record.size
            again += self.scheduler.lost(record.frames)
        self._trim()
        if again:
            self.port.stats["native_retransmit"] += again
            self.port.want_flush(self)

    def _compute_pto(self) -> float:
        # srtt + max(4 rttvar, MIN_PTO) + the receiver's ack delay (RFC 9002 6.2.1: ours is
        # ACK_DELAY, but a busy host adds to it, so an eighth of srtt if that is more), at
        # least MIN_PTO, doubled per unanswered probe (at most 2**10), at most MAX_PTO.
        variance = 4 * self.rttvar
        srtt = self.srtt
        delay = srtt / 8
        base = srtt + (variance if variance > MIN_PTO else MIN_PTO)
        base += delay if delay > ACK_DELAY else ACK_DELAY
        if base < MIN_PTO:
            base = MIN_PTO
        if self.pto_count:
            base *= 1 << (self.pto_count if self.pto_count < 10 else 10)
        return base if base < MAX_PTO else MAX_PTO

    def pto(self) -> float:
        """The probe time-out: how long the oldest packet in flight may go unacked."""
        return self._pto

    def _arm(self) -> None:
        when = None
        if self._head < len(self._sent):
            record = self._sent[self._head]
            assert record is not None
            # After a probe the time-out counts from the probe, not the oldest packet.
            oldest = record.at
            when = (oldest if oldest > self._probed_at else self._probed_at) + self._pto
        expires = self.scheduler.next_expiry()
        if expires is not None and (when is None or expires < when):
            when = expires
        ack_deadline = self.ack_deadline
        if ack_deadline is not None and (when is None or ack_deadline < when):
            when = ack_deadline
        for inbox in self.inboxes:
            if inbox.partials or inbox.ready:
                stall = inbox.get_timer()
                if stall is not None and (when is None or stall < when):
                    when = stall
        if self._pacing_wait:
            release = self.cc.release_at(self.datagram_size)
            if when is None or release < when:
                when = release
        path_at = self.path.get_timer() if self.path is not None else None
        for other in (self.keys.get_timer(self._pto), path_at):
            if other is not None and (when is None or other < when):
                when = other
        # A live heap entry stays valid while the deadline is unchanged (lazy
        # invalidation in TimerQueue), so only a moved deadline costs a push.
        if when != self.deadline:
            self.port.arm(self, when)

    def on_timer(self, now: float) -> None:
        for inbox in self.inboxes:
            inbox.on_timer(now)
        if self.ack_deadline is not None and self.ack_deadline <= now:
            self.ack_deadline = None
            self.ack_due = True
        self.scheduler.expire(now)
        # The same expression as in _arm, so float rounding cannot leave a due timer idle.
        pto, probed_at = self._pto, self._probed_at
        probes = []
        timed_out, newest_at = 0, 0.0
        sent, base = self._sent, self._sent_base
        for index in range(self._head, len(sent)):  # oldest first
            record = sent[index]
            if record is None:
                continue
            if (record.at if record.at > probed_at else probed_at) + pto > now:
                break
            probes.append(base + index)
            timed_out, newest_at = timed_out + record.size, record.at
            if len(probes) == PROBE_PACKETS:
                break
        if probes:
            self.pto_count += 1
            self._pto = self._compute_pto()
            self._probed_at = now
            self.cc.on_timeout(timed_out, newest_at)  # (lost, to its loss share)
            self._requeue(probes)
        self._queue_control(self.keys.on_timer(now, self._pto), None)
        path = self.path
        if path is not None:
            if path.expired(now):
                self.path = None
                self.port.stats["native_path_failed"] += 1
            else:
                self._queue_control(path.challenge(now, self._pto), path.address)
        self.port.want_flush(self)

    def _queue_control(self, frame: bytes | None, address: Address | None) -> None:
        """Send ``frame`` in a datagram of its own at the next flush (a few at most)."""
        if frame is not None and len(self._control) < MAX_CONTROL:
            self._control.append((frame, address))
            self.port.want_flush(self)

    # -- receiving ----------------------------------------------------------------------

    def receive_untrusted(
        self, data: bytes, counter: int, now: float, source: Address | None = None
    ) -> None:
        """One native datagram from ``source`` (None: the remote's address)."""
        window = self.rx_window
        highest = window.highest
        if counter <= highest and window.seen(counter):  # new counters: no call
            raise BadPacket("native counter already seen", DropReason.REPLAY)
        keys = self.keys
        plain = self._kernel.open(self._key, self._rx_nonce, data, counter)
        if plain is None:
            other = keys.other()  # during a key rotation: the previous or the next key
            if other is not None:
                plain = self._kernel.open(other.shared_key, self._rx_nonce, data, counter)
            if plain is None:
                raise BadPacket("box does not open", DropReason.DECRYPT)
            keys.opened_with_other(now, self._pto)
            self._use(keys.box)
        elif keys.previous is not None:
            keys.opened_with_current(now, self._pto)
        try:
            self._opened(counter, plain, now)
            if self._path_answer or (source is not None and source != self.remote.ha):
                self._on_new_source(source or self.remote.ha, counter > highest, now)
            self._heard(now)
        finally:
            self._arm()  # once per packet, whatever its frames changed

    def _heard(self, now: float) -> None:
        """An authenticated datagram came from the remote (the road sets it alive)."""
        self.remote.last_rx = now
        self.remote.alive_failures = 0

    def _opened(self, counter: int, plain: bytearray, now: float) -> None:
        """The frames of the authenticated packet ``counter``.  Only packets carrying data
        are acknowledged (an ack of an ack would never end), but every counter goes into
        the ranges."""
        carries = self._frames_untrusted(plain, now)
        if carries == _REFUSED:
            # Data we could not hold: leave the packet unacknowledged, so the sender
            # sends its frames again under new counters (this one is marked seen).
            self.rx_window.mark(counter)
        else:
            self._record(counter, carries == _HELD, now)

    def receive_train(
        self, data: memoryview, segment: int, address: Address, now: float, alone: Receive
    ) -> bool:
        """The datagrams of a received train (``engine/native_trains.py``)."""
        return native_trains.receive_train(self, data, segment, address, now, alone)

    def _record(self, counter: int, ack_eliciting: bool, now: float) -> None:
        self.rx_window.mark(counter)
        ranges = self.ack_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            self._add_range(counter, counter)
        if ack_eliciting:
            self.ack_pending += 1
            if self.ack_pending >= 2:
                self.ack_due = True
                self.port.want_flush(self)
            elif self.ack_deadline is None:
                self.ack_deadline = now + ACK_DELAY

    def _add_range(self, first: int, last: int) -> None:
        ranges = self.ack_ranges
        ranges.append([first, last])
        ranges.sort()
        merged: list[list[int]] = []
        for low, high in ranges:
            if merged and merged[-1][1] + 1 >= low:
                merged[-1][1] = max(merged[-1][1], high)
            else:
                merged.append([low, high])
        self.ack_ranges = merged[-MAX_ACK_RANGES:]

    def _frames_untrusted(self, plain: bytearray, now: float) -> int:
        """Handle the frames of one packet: ``_NO_DATA``, ``_HELD`` (data taken) or
        ``_REFUSED`` (a data frame was not held)."""
        end = len(plain)
        if end > _LEAST_DATA.size and plain[0] == _LEAST_FRAME and plain[9] == DATA_FRAME:
            # One piece of a bulk transfer (maybe with ACK_NOW): the frames at one go.
            _, least, _, body_kind, stream, seq, total, offset, length = (
                _LEAST_DATA.unpack_from(plain)
            )
            rest = end - _LEAST_DATA.size - length
            if stream < STREAMS and (rest == 0 or (rest == 1 and plain[-1] == _ACK_NOW_FRAME)):
                ranges = self.ack_ranges
                if ranges and ranges[0][0] < least:
                    self._forget_below(least)
                if rest:
                    self.ack_due = True
                    self.port.want_flush(self)
                if self.inboxes[stream].take(
                    seq, body_kind, total, offset, plain, _LEAST_DATA.size, length, now
                ):
                    return _HELD
                return _REFUSED
        pos = 0
        carries = _NO_DATA
        try:
            while pos < end:
                kind = plain[pos]
                if kind == BATCH_FRAME:
                    _, body_kind, stream, first, count = BATCH_HEAD.unpack_from(plain, pos)
                    pos += BATCH_HEAD.size
                    if stream >= STREAMS or not count:
                        raise BadPacket("bad native batch frame", DropReason.BODY)
                    lengths = _lengths_untrusted(plain, pos, count)
                    pos += 2 * count
                    stop = pos + sum(lengths)
                    if stop > end:
                        raise BadPacket("truncated native batch frame", DropReason.BODY)
                    if not self._batch(body_kind, stream, first, lengths, plain, pos, now):
                        carries = _REFUSED
                    elif carries == _NO_DATA:
                        carries = _HELD
                    pos = stop
                elif kind == DATA_FRAME:
                    _, body_kind, stream, seq, total, offset, length = DATA_HEAD.unpack_from(
                        plain, pos
                    )
                    pos += DATA_HEAD.size
                    if pos + length > end or stream >= STREAMS:
                        raise BadPacket("bad native data frame", DropReason.BODY)
                    inbox = self.inboxes[stream]
                    if inbox.take(seq, body_kind, total, offset, plain, pos, length, now):
                        if carries == _NO_DATA:
                            carries = _HELD
                    else:
                        carries = _REFUSED
                    pos += length
                elif kind == _ACK_NOW_FRAME:
                    pos += 1
                    self.ack_due = True
                    self.port.want_flush(self)
                    if carries == _NO_DATA:  # a probe: this packet is acknowledged too
                        carries = _HELD
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
                elif migration.PATH_CHALLENGE_FRAME <= kind <= rekey.KEY_CONFIRM_FRAME:
                    pos = self._control_frame_untrusted(kind, plain, pos, now)
                else:
                    raise BadPacket("unknown native frame", DropReason.BODY)
        except (struct.error, IndexError) as exc:
            raise BadPacket(f"truncated native frame: {exc}", DropReason.BODY) from None
        return carries

    def _control_frame_untrusted(self, kind: int, plain: bytearray, pos: int, now: float) -> int:
        """A path or key frame (engine/migration.py, engine/rekey.py); returns the
        position after it."""
        if kind <= migration.PATH_RESPONSE_FRAME:
            _, token = migration.PATH_FRAME.unpack_from(plain, pos)
            if kind == migration.PATH_RESPONSE_FRAME:
                self._path_answer = token  # counts only from the challenged address
            else:
                self._queue_control(migration.response(token), None)
            return pos + migration.PATH_FRAME.size
        if kind == rekey.KEY_CONFIRM_FRAME:
            _, epoch = rekey.CONFIRM_FRAME.unpack_from(plain, pos)
            if self.keys.on_confirm(epoch):
                self._queue_control(b"", None)  # sealed under our (the new) key
            return pos + rekey.CONFIRM_FRAME.size
        _, epoch, public = rekey.KEY_FRAME.unpack_from(plain, pos)
        if kind == rekey.KEY_OFFER_FRAME:
            self._queue_control(self.keys.on_offer(epoch, public), None)
        elif self.keys.on_accept(epoch, public, now):
            self._use(self.keys.box)
            self.port.stats["native_rekey"] += 1
        return pos + rekey.KEY_FRAME.size

    def _use(self, box: SessionBox) -> None:
        """Seal and open with ``box`` from now on (a key rotation switched)."""
        self.box = box
        self._key = box.shared_key

    def _on_new_source(self, source: Address, newest: bool, now: float) -> None:
        """An authenticated datagram came from ``source``, not the remote's address, or
        answered a challenge: validate that address, or move the session there."""
        answer, self._path_answer = self._path_answer, b""
        path = self.path
        if source == self.remote.ha:
            return
        if path is not None and answer and path.answered(answer, source):
            self.path = None
            other_host = source[0] != self.remote.ha[0]
            self.port.on_path_validated(self.remote, source)
            self.port.stats["native_migrated"] += 1
            if other_host:  # another path: measure it afresh (NAT rebinding keeps the host)
                self.cc = Controller(self.datagram_size, self.cc.limit, self.cc.response)
                self.flow = SendWindow(self.cc)
                self.srtt, self.rttvar, self.rtt_sampled = INITIAL_RTT, INITIAL_RTT / 2, False
                self._pto = self._compute_pto()
        elif newest and (path is None or path.address != source):
            self.path = migration.PathValidation(source)
            self._queue_control(self.path.challenge(now, self._pto), source)

    def _batch(
        self,
        body_kind: int,
        stream: int,
        first: int,
        lengths: tuple[int, ...],
        plain: bytearray,
        pos: int,
        now: float,
    ) -> bool:
        """The whole messages of one BATCH frame; False if any was refused."""
        inbox = self.inboxes[stream]
        if first == inbox.next_deliver and not inbox.waiting:
            # All in line (the usual case): deliver them, no reassembly at all.
            deliver = self._deliver
            for length in lengths:
                deliver(body_kind, plain[pos : pos + length])
                pos += length
            inbox.next_deliver = first + len(lengths)
            return True
        held = True
        take = inbox.take
        for seq, length in enumerate(lengths, start=first):
            if not take(seq, body_kind, length, 0, plain, pos, length, now):
                held = False
            pos += length
        return held

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
                raise BadPacket("unknown body kind", DropReason.BODY)
            value = decode_body_untrusted(kind, data)
        except BadPacket:
            self.port.stats["drop_body"] += 1
            return
        self.port.emit(MessageReceived(self.remote.name, value))

    def _drop_bad(self, exc: BadPacket, address: Address) -> None:
        """Count a datagram of a train as the road counts one that comes alone."""
        trigger = exc.trigger
        reason = trigger if isinstance(trigger, DropReason) else DropReason.MALFORMED
        self.port.drop(reason, address, str(exc))

    def _drop(self, reason: DropReason, detail: str) -> None:
        self.port.drop(reason, self.remote.ha, detail)

    # -- end of the session -------------------------------------------------------------

    def unfinished(self) -> list[Outgoing]:
        """Messages not yet fully acknowledged, in the order they were queued (to send
        again in a new session).

        Ends the channel: its reassembly reservations go back to the road's budget."""
        self.port.arm(self, None)
        for inbox in self.inboxes:
            inbox.close()
        return [
            Outgoing(mid, body, expires, BodyKind(kind))
            for mid, body, expires, kind in self.scheduler.unfinished()
        ]
