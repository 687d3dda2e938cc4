"""The native session with one remote: what the road drives (``Channel``).

The channel ties the profile's parts together for one remote: messages go to the
scheduler (``native/scheduler.py``), which frames them; ``flush`` sends what the flow
gate (``native/flow.py``: the congestion controller and pacer of
``native/congestion.py``) allows, coalescing frames into datagrams sealed by the kernel
(``native/trains.py``) under the current key (``native/rekey.py``), and files what went
with loss recovery (``native/recovery.py``).  Received datagrams are opened here (with
the other key too during a rotation) and their frames taken by the receiving side
(``native/receive.py``); path and key frames come back here, as do acknowledgements
(for recovery).  Layouts: ``native/frames.py``.

Sending: an owed ack rides along with data, or goes alone once it is due; a datagram
after which the window is full asks for an ack at once (ACK_NOW), so the window never
idles for the receiver's ack delay.  One ``flush`` sends at most ``FLUSH_BYTES`` while
packets are in flight, so the driver reads acks and replies between bursts, and the
pieces of a bulk transfer with nothing else to send are sealed in one kernel call
(``_burst``, a train).  A message counts as delivered when every frame of it is
acknowledged.

Reassembly is bounded (``engine/reassembly.py``): a message that does not fit the road's
caps is refused, and a packet with a refused frame is not acknowledged, so the sender
sends it again later; a stalled message is discarded after a time-out.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from raetsalt.drops import DropReason
from raetsalt.engine.events import MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.native import migration, rekey, trains
from raetsalt.engine.native.alive import hint_millis, take_hint_untrusted
from raetsalt.engine.native.congestion import Controller, LossResponse
from raetsalt.engine.native.flow import QUIET_PIECE, SendWindow
from raetsalt.engine.native.frames import (
    ACK_FRAME,
    ACK_NOW,
    BATCH_HEAD,
    BATCH_LENGTH,
    CONFIRM_FRAME,
    DATA_HEAD,
    HINT,
    HINT_FRAME,
    KEY_CONFIRM_FRAME,
    KEY_FRAME,
    KEY_OFFER_FRAME,
    LEAST,
    LEAST_ACK,
    LEAST_FRAME,
    ONE_RANGE,
    OVERHEAD,
    PATH_FRAME,
    PATH_RESPONSE_FRAME,
    PREFIX,
    STREAMS,
    TAG,
    nonce_head,
)
from raetsalt.engine.native.receive import Receiver
from raetsalt.engine.native.recovery import Recovery
from raetsalt.engine.native.scheduler import Frame, Run, Scheduler
from raetsalt.engine.reassembly import Reassembly
from raetsalt.engine.remote import Address, Outgoing, Receive
from raetsalt.errors import BadPacket
from raetsalt.wire.body import decode_body_untrusted
from raetsalt.wire.enums import BodyKind

if TYPE_CHECKING:
    from raetsalt.crypto import SessionBox
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote

_BODY_KINDS = {int(k): k for k in BodyKind}

Datagram = bytes | bytearray
"""What a road sends: native packets are built in place (bytearray), raet ones are bytes;
a ``trains.Train`` (a bytearray) is several native datagrams back to back, sent only to a
driver that asked for them (``RoadConfig.native_trains``)."""

MAX_CONTROL = 8
"""Path and key frames waiting for the next flush (more are not sent)."""
QUICK_IN_FLIGHT = 16 * 1024
"""At most this many bytes in flight is request/response traffic (``answer_expected``),
not a bulk transfer."""
FLUSH_BYTES = 256 * 1024
"""Bytes of datagrams one ``flush`` makes while packets are in flight: then the driver
reads (acks, replies) before it sends more, so a reply does not wait behind the
encryption of a whole window."""


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
            reject_after=port.config.native_reject_after,
            reject_packets=port.config.native_reject_packets,
            min_gap=port.config.native_rekey_min_gap,
        )
        self.path: migration.PathValidation | None = None
        """A new address of the remote being validated (native/migration.py)."""
        self._path_answer = b""  # the token of a PATH_RESPONSE in the packet being read
        # Frames that go in datagrams of their own at the next flush, to the remote's
        # address (None) or the one being validated.
        self._control: list[tuple[bytes, Address | None]] = []
        self.hint_due = True
        """Tell the remote how long it may stay silent (``native/alive.py``) at the next
        flush: at the start and in the answer to each of its probes."""
        self._hinted = 0  # the last hint sent, in milliseconds
        self._kernel = trains.KERNEL
        self._key = box.shared_key
        self._tx_nonce = nonce_head(initiator)
        self._rx_nonce = nonce_head(not initiator)
        self.datagram_size = datagram_size
        self._limit = datagram_size - PREFIX.size - TAG  # plaintext bytes per datagram
        self._flush_most = max(2, FLUSH_BYTES // datagram_size)  # datagrams per flush
        config = port.config  # frozen
        self.deadline: float | None = None
        # sending
        room = self._limit - LEAST.size - len(ACK_NOW)  # a datagram with one frame
        self._chunk = room - DATA_HEAD.size  # a bulk piece that fills a datagram
        self._quiet_chunk = min(self._chunk, QUIET_PIECE - (datagram_size - self._chunk))
        self.scheduler = Scheduler(
            chunk=self._chunk,
            whole_max=room - BATCH_HEAD.size - BATCH_LENGTH,
            express_size=config.native_express_size,
            confirm=self._confirmed,
            fail=self._failed,
        )
        self.cc = Controller(datagram_size, window, loss_response)
        self.flow = SendWindow(self.cc)
        self._pacing_wait = False  # the last flush stopped for the pacer: wake at its time
        self.recovery = Recovery(
            self.cc,
            acked=self.scheduler.acked,
            lost=self.scheduler.lost,
            stats=port.stats,
            rng=port.secret_rng,
        )
        # receiving
        inboxes = [
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
        self.receiver = Receiver(
            inboxes,
            on_ack=self._on_ack,
            on_control=self._control_frame_untrusted,
            deliver=self._deliver,
            want_flush=partial(port.want_flush, self),
        )
        self._arm()  # the key rotation's timer runs from the start
        if port.announced_period():
            port.want_flush(self)  # the hint goes at once

    def use_controller(self, cc: Controller) -> None:
        """Send under ``cc`` from now on (a new path; tests pin other controllers)."""
        self.cc = cc
        self.flow = SendWindow(cc)
        self.recovery.cc = cc

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
        recovery = self.recovery
        receiver = self.receiver
        self._pacing_wait = False
        keys = self.keys
        if keys.sealed >= keys.packets:
            if keys.sealed >= keys.reject_packets:
                self._expire(now)
                return
            self._queue_control(keys.on_timer(now, recovery.pto), None)
        hint = b""
        if self.hint_due:
            self.hint_due = False
            millis = hint_millis(self.port.announced_period())
            if millis or self._hinted:  # (a hint once given is withdrawn with 0)
                hint = HINT.pack(HINT_FRAME, millis)
                self._hinted = millis
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
                if recovery.bytes_in_flight and len(out) - end >= self._flush_most:
                    # Enough for one pass: the driver reads (acks, replies) before more.
                    self.port.want_flush(self)
                    break
                if not receiver.ack_pending and (
                    self._burst(now, out) or self._batch_burst(now, out)
                ):
                    continue
                express_only = False
                if allowance(recovery.bytes_in_flight, now) <= 0:
                    # The window is full: only express frames may go, a little beyond it.
                    if not scheduler.express_first() or (
                        allowance(recovery.bytes_in_flight, now, express=True) <= 0
                    ):
                        break
                    express_only = True
                elif not scheduler.express_first() and paced(now) < self.datagram_size:
                    # Room in the window but not yet in time: wake when the pacer allows.
                    self._pacing_wait = True
                    break
                # Tell the receiver which acks still matter, so its ranges stay few.
                least = recovery.oldest_unacked()
                run = scheduler.single()
                if run is not None and self._message(run, least, now, out):
                    continue
                with_ack = False
                if receiver.ack_pending:
                    first = scheduler.first_size()
                    if not first:
                        break
                    ranges = receiver.ack_ranges
                    if len(ranges) == 1:  # the usual case: both frames in one pack
                        head = LEAST_ACK.pack(
                            LEAST_FRAME, least, ACK_FRAME, 1, ranges[0][0], ranges[0][1]
                        )
                    else:
                        head = LEAST.pack(LEAST_FRAME, least) + receiver.ack_frame()
                    if len(head) + first + len(ACK_NOW) <= limit:
                        with_ack = True
                    else:  # no room beside the first frame: the ack goes alone
                        self._emit((head[LEAST.size :],), now, out, None, with_ack=True)
                        head = head[: LEAST.size]
                else:
                    head = LEAST.pack(LEAST_FRAME, least)
                parts: list[bytes | memoryview] = [head]
                frames: list[Frame] = []
                # One byte kept for ACK_NOW: a datagram that fills the window asks for an
                # ack at once, or the sender would idle for the receiver's ack delay.
                room = limit - len(head) - len(ACK_NOW)
                used, express = scheduler.fill(room, parts, frames, express_only=express_only)
                if not frames:
                    break
                size = len(head) + used + PREFIX.size + TAG
                self.flow.on_sent(now, size, express=express)
                if allowance(recovery.bytes_in_flight + size, now) <= 0:
                    parts.append(ACK_NOW)
                self._emit(parts, now, out, frames, with_ack=with_ack)
        if receiver.ack_due and receiver.ack_pending:
            ack = (receiver.ack_frame(), hint) if hint else (receiver.ack_frame(),)
            self._emit(ack, now, out, None, with_ack=True)
            hint = b""
        if hint:  # no ack to ride with
            out.append((self.seal_packet(hint), self.remote.ha))
        self._arm()

    def answer_expected(self) -> float | None:
        """The smoothed round trip when what is in flight is a little request/response
        traffic (at most ``QUICK_IN_FLIGHT`` bytes, nothing more waiting to go) whose
        answer, an ack or a reply, the remote owes; None otherwise (nothing in flight, a
        bulk transfer, no round trip measured yet)."""
        recovery = self.recovery
        if (0 < recovery.bytes_in_flight <= QUICK_IN_FLIGHT and recovery.rtt_sampled
                and not self.scheduler.has_data()):
            return recovery.srtt
        return None

    def _burst(self, now: float, out: list[tuple[Datagram, tuple[str, int]]]) -> bool:
        """The pieces of a bulk transfer, one per datagram, sealed in one call (a train):
        what ``flush`` does for them one by one, without its per-datagram choices (nothing
        else is waiting and no ack is owed; ``Scheduler.burst`` checks).  False: not now."""
        item, count = self.scheduler.burst(self._flush_most)
        if item is None or count < 2:  # (first: small messages never pay for the rest)
            return False
        recovery = self.recovery
        size = OVERHEAD + self.scheduler.chunk  # a datagram with one whole piece
        room = self.flow.allowance(recovery.bytes_in_flight, now)
        most = -(-room // size) if room > 0 else 0
        paced = self.cc.paced(now)
        if paced < most * self.datagram_size:
            most = int(paced // self.datagram_size)
        if most < count:
            count = most
            if count < 2:
                return False
        chunk = self.scheduler.chunk
        length = OVERHEAD + chunk  # of every datagram (the last may ask for an ack)
        # The window is full after the last one: it asks for an ack at once.
        ack_now = room - (count - 1) * length - size <= 0
        if recovery.counter + count >= recovery.skip_at:
            recovery.skip()  # before the run: its counters stay consecutive
        least, seal = recovery.oldest_unacked(), self._kernel.seal_pieces
        key, nonce = self._key, self._tx_nonce
        fuid, kind, stream, seq = self.remote.fuid, item.kind, item.stream, item.first_seq
        counter, offset, ha = recovery.counter, item.sent, self.remote.ha
        train = trains.Train(length * (count - 1))
        train.segment = length
        # All but the last piece in one train, then the last, which may ask for an ack.
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
        stop = offset + count * chunk
        recovery.on_sent_run(
            now, [[(item, at, chunk)] for at in range(offset, stop, chunk)], length, len(last)
        )
        self.keys.sealed += count
        self.flow.on_sent(now, length * (count - 1) + len(last), express=False)
        self.scheduler.took(item, count)
        return True

    def _batch_burst(self, now: float, out: list[tuple[Datagram, tuple[str, int]]]) -> bool:
        """Whole express messages, as many datagrams as they fill, sealed in one call:
        what ``flush`` does for them one datagram at a time (the same frames, the same
        ACK_NOW once the window is used up, express frames beyond it as far as they may
        go), when nothing else is waiting and no ack is owed (``Scheduler.batch_burst``
        checks).  False: not now."""
        scheduler = self.scheduler
        run, keep_tail = scheduler.batch_burst()
        if run is None:
            return False
        recovery = self.recovery
        allowance, in_flight = self.flow.allowance, recovery.bytes_in_flight
        limit = allowance(in_flight, now, express=True)
        if limit <= 0:
            return False
        most, start = self._flush_most, run.sent
        if recovery.counter + most >= recovery.skip_at:
            recovery.skip()  # before the burst: its counters stay consecutive
        made, asking = self._kernel.seal_batches(
            self._key, self._tx_nonce, self.remote.fuid, recovery.counter,
            recovery.oldest_unacked(), run.kind, run.stream, run.first_seq, run.bodies,
            start, len(run.bodies), self._limit - LEAST.size - len(ACK_NOW),
            allowance(in_flight, now), limit, most, keep_tail,
        )
        if not made:
            return False
        ha, on_sent = self.remote.ha, recovery.on_sent
        index = start
        size = 0
        for data, count in made:
            out.append((data, ha))
            on_sent(now, len(data), [(run, index, count)])
            index += count
            size += len(data)
        self.keys.sealed += len(made)
        self.flow.on_sent(now, size - asking, express=True)
        scheduler.took_bodies(run, index - start, len(made))
        return True

    def _message(
        self, run: Run, least: int, now: float, out: list[tuple[Datagram, tuple[str, int]]]
    ) -> bool:
        """A lone message and the ack owed (one range) in one datagram, framed and sealed
        in one call: the bytes and the bookkeeping of ``flush``'s loop for it.  False
        (nothing done) when the loop must choose: more ranges, or no room for both."""
        receiver = self.receiver
        body = run.bodies[run.sent]
        with_ack = receiver.ack_pending > 0
        first = last = 0
        if with_ack:
            ranges = receiver.ack_ranges
            if len(ranges) != 1:
                return False
            first, last = ranges[0]
        frames = LEAST.size + (ONE_RANGE.size if with_ack else 0)
        frames += BATCH_HEAD.size + BATCH_LENGTH + len(body)
        if frames + len(ACK_NOW) > self._limit:
            return False
        size = PREFIX.size + TAG + frames
        self.flow.on_sent(now, size, express=True)
        ack_now = self.flow.allowance(self.recovery.bytes_in_flight + size, now) <= 0
        data = self._kernel.seal_message(
            self._key, self._tx_nonce, self.remote.fuid, self._next_counter(), least,
            with_ack, first, last, run.kind, run.stream, run.first_seq + run.sent, body,
            ack_now,
        )
        self._went(data, now, out, [(run, run.sent, 1)], with_ack=with_ack)
        self.scheduler.took_bodies(run, 1, 1)
        return True

    def _emit(
        self,
        parts: Sequence[bytes | memoryview],
        now: float,
        out: list[tuple[Datagram, tuple[str, int]]],
        frames: list[Frame] | None,
        *,
        with_ack: bool,
    ) -> None:
        counter = self._next_counter()
        data = self._kernel.seal(self._key, self._tx_nonce, self.remote.fuid, counter, parts)
        self._went(data, now, out, frames, with_ack=with_ack)

    def _next_counter(self) -> int:
        """The counter of the next datagram with a record (one is left unused now and
        then: native/recovery.py, the optimistic-ack check)."""
        recovery = self.recovery
        counter = recovery.counter + 1
        if counter >= recovery.skip_at:
            recovery.skip()
            counter += 1
        return counter

    def _went(
        self,
        data: bytearray,
        now: float,
        out: list[tuple[Datagram, tuple[str, int]]],
        frames: list[Frame] | None,
        *,
        with_ack: bool,
    ) -> None:
        """``data``, sealed under ``_next_counter``, goes out carrying ``frames`` (and the
        ack owed, when ``with_ack``)."""
        out.append((data, self.remote.ha))
        self.recovery.on_sent(now, len(data), frames)
        self.keys.sealed += 1
        if with_ack:
            self.receiver.acked()

    def seal_packet(self, plain: bytes) -> bytearray:
        """The datagram carrying ``plain`` (frames) under the next packet counter; nothing
        in it is sent again if it is lost."""
        counter = self.recovery.on_sent(0.0, 0, None)
        self.keys.sealed += 1
        return self._kernel.seal(self._key, self._tx_nonce, self.remote.fuid, counter, (plain,))

    def _queue_control(self, frame: bytes | None, address: Address | None) -> None:
        """Send ``frame`` in a datagram of its own at the next flush (a few at most)."""
        if frame is not None and len(self._control) < MAX_CONTROL:
            self._control.append((frame, address))
            self.port.want_flush(self)

    def _on_ack(self, ranges: list[tuple[int, int]], now: float) -> None:
        """An ACK frame came (``Receiver``): loss recovery takes it.  One that names a
        skipped packet number ends the session (native/recovery.py)."""
        try:
            opened = self.recovery.on_ack(ranges, now)
        except BadPacket as exc:
            if exc.trigger is DropReason.OPTIMISTIC_ACK:
                self.port.end_session(self.remote, "optimistic_ack", str(exc), now)
            raise
        if opened and self.scheduler.has_data():
            self.port.want_flush(self)  # the window opened: send more at the next flush

    def _confirmed(self, mid: int, count: int) -> None:
        self.port.emit(MessageDelivered(self.remote.name, mid, count))

    def _failed(self, mid: int) -> None:
        self.port.emit(TransactionFailed(self.remote.name, "message", "timeout", mid))

    # -- time ---------------------------------------------------------------------------

    def _arm(self) -> None:
        """Wake at the earliest of what is due (once per packet and per flush: the
        receiver's deadlines are read here, not asked for, and recovery is asked only
        while something is in flight)."""
        recovery = self.recovery
        when = recovery.get_timer() if recovery.bytes_in_flight else None
        expires = self.scheduler.next_expiry()
        if expires is not None and (when is None or expires < when):
            when = expires
        receiver = self.receiver
        ack_deadline = receiver.ack_deadline
        if ack_deadline is not None and (when is None or ack_deadline < when):
            when = ack_deadline
        for inbox in receiver.inboxes:
            if inbox.partials or inbox.ready:
                stall = inbox.get_timer()
                if stall is not None and (when is None or stall < when):
                    when = stall
        if self._pacing_wait:
            release = self.cc.release_at(self.datagram_size)
            if when is None or release < when:
                when = release
        path_at = self.path.get_timer() if self.path is not None else None
        for other in (self.keys.get_timer(recovery.pto), path_at):
            if other is not None and (when is None or other < when):
                when = other
        # A live heap entry stays valid while the deadline is unchanged (lazy
        # invalidation in TimerQueue), so only a moved deadline costs a push.
        if when != self.deadline:
            self.port.arm(self, when)

    def on_timer(self, now: float) -> None:
        if self.remote.channel is not self:
            return  # ended (a time-out armed before the end)
        if self.keys.expired(now):
            self._expire(now)
            return
        self.receiver.on_timer(now)
        self.scheduler.expire(now)
        recovery = self.recovery
        recovery.on_timeout(now)  # the probes' frames go at the next flush
        self._queue_control(self.keys.on_timer(now, recovery.pto), None)
        path = self.path
        if path is not None:
            if path.expired(now):
                self.path = None
                self.port.stats["native_path_failed"] += 1
            else:
                self._queue_control(path.challenge(now, recovery.pto), path.address)
        self.port.want_flush(self)

    # -- receiving ----------------------------------------------------------------------

    def receive_untrusted(
        self, data: bytes, counter: int, now: float, source: Address | None = None
    ) -> None:
        """One native datagram from ``source`` (None: the remote's address)."""
        window = self.receiver.window
        highest = window.highest
        if counter <= highest and window.seen(counter):  # new counters: no call
            raise BadPacket("native counter already seen", DropReason.REPLAY)
        keys = self.keys
        # A lone message (with its ack) comes taken apart; other packets as their frames.
        opened = self._kernel.open_message(self._key, self._rx_nonce, data, counter)
        if opened is None:
            other = keys.other()  # during a key rotation: the previous or the next key
            if other is not None:
                opened = self._kernel.open(other.shared_key, self._rx_nonce, data, counter)
            if opened is None:
                raise BadPacket("box does not open", DropReason.DECRYPT)
            keys.opened_with_other(now, self.recovery.pto)
            self._use(keys.box)
        elif keys.previous is not None:
            keys.opened_with_current(now, self.recovery.pto)
        receiver = self.receiver
        try:
            if isinstance(opened, tuple):
                receiver.take_message(counter, opened, now)
            else:
                receiver.take_packet(counter, opened, now)
            if receiver.probed:  # the remote probes us: the answer says how long to wait
                receiver.probed = False
                self.hint_due = True
            if self._path_answer or (source is not None and source != self.remote.ha):
                self._on_new_source(source or self.remote.ha, counter > highest, now)
            self._heard(now)
        finally:
            self._arm()  # once per packet, whatever its frames changed

    def _take(self, counter: int, plain: bytearray, now: float) -> None:
        """The frames of an authenticated packet (the receiving side's)."""
        receiver = self.receiver
        receiver.take_packet(counter, plain, now)
        if receiver.probed:  # the remote probes us: the answer says how long it may wait
            receiver.probed = False
            self.hint_due = True

    def receive_train(
        self, data: memoryview, segment: int, address: Address, now: float, alone: Receive
    ) -> bool:
        """The datagrams of a received train (``Road.receive_train``): what
        ``receive_untrusted`` does for each, with runs of bulk pieces taken at once.
        ``alone`` (``Road.receive_datagram``) takes each the ordinary path must judge (not
        this session's, a replay, a box that does not open), and all after one that ended
        this session.  True if any datagram was authenticated here (the remote is heard)."""
        receiver, stats, remote = self.receiver, self.port.stats, self.remote
        window = receiver.window
        highest = window.highest
        rotating = self.keys.other() is not None  # some may be under the other key
        out = bytearray(len(data))
        bits = window.bits or bytearray(window.size // 8)  # (allocated by the first mark)
        entries = self._kernel.open_train(
            self._key, self._rx_nonce, remote.uid, data, segment, bits, window.highest, out
        )
        heard = False
        taken = 0  # datagrams of the train dealt with

        def bad(exc: BadPacket) -> None:
            self._drop_bad(exc, address)

        for entry in entries:
            what = entry[0]
            if what == trains.RAW:
                self._arm()
                taken += 1
                alone(bytes(data[entry[1] : entry[1] + entry[2]]), address, now)
                if remote.channel is not self:  # that datagram ended the session
                    for rest in range(taken * segment, len(data), segment):
                        alone(bytes(data[rest : rest + segment]), address, now)
                    return heard
                continue
            if what == trains.FORGED and rotating:  # the ordinary path tries both keys
                self._arm()
                alone(bytes(data[taken * segment : (taken + 1) * segment]), address, now)
                taken += 1
                if remote.channel is not self:
                    return heard
                continue
            if what == trains.FORGED:  # what the road does with it alone, without a 2nd open
                stats["rx"] += 1
                taken += 1
                bad(BadPacket("box does not open", DropReason.DECRYPT))
                continue
            if what == trains.RUN:
                stats["rx"] += entry[2]
                taken += entry[2]
                heard = receiver.take_run(entry, out, now, bad) or heard
                continue
            if what == trains.MESSAGES:
                stats["rx"] += entry[2]
                taken += entry[2]
                heard = receiver.take_messages(entry, out, now, bad) or heard
                continue
            stats["rx"] += 1
            taken += 1
            counter, pos, length = entry[1], entry[2], entry[3]
            try:
                self._take(counter, out[pos : pos + length], now)
            except BadPacket as exc:
                bad(exc)
                if remote.channel is not self:  # it ended the session: no more here
                    return heard
            else:
                heard = True
        if heard:
            self._heard(now)
            if self._path_answer or address != remote.ha:
                self._on_new_source(address, window.highest > highest, now)
        self._arm()
        return heard

    def _heard(self, now: float) -> None:
        """An authenticated datagram came from the remote (the road sets it alive)."""
        self.remote.last_rx = now
        self.remote.alive_failures = 0

    def _control_frame_untrusted(self, kind: int, plain: bytearray, pos: int, now: float) -> int:
        """A path, key or hint frame (native/migration.py, native/rekey.py,
        native/alive.py); returns the position after it."""
        if kind <= PATH_RESPONSE_FRAME:
            _, token = PATH_FRAME.unpack_from(plain, pos)
            if kind == PATH_RESPONSE_FRAME:
                self._path_answer = token  # counts only from the challenged address
            else:
                self._queue_control(migration.response(token), None)
            return pos + PATH_FRAME.size
        if kind == KEY_CONFIRM_FRAME:
            _, epoch = CONFIRM_FRAME.unpack_from(plain, pos)
            if self.keys.on_confirm(epoch):
                self._queue_control(b"", None)  # sealed under our (the new) key
            return pos + CONFIRM_FRAME.size
        if kind == HINT_FRAME:
            _, millis = HINT.unpack_from(plain, pos)
            take_hint_untrusted(self.remote, millis / 1000)
            return pos + HINT.size
        if kind > HINT_FRAME:
            raise BadPacket("unknown native frame", DropReason.BODY)
        _, epoch, public = KEY_FRAME.unpack_from(plain, pos)
        if kind == KEY_OFFER_FRAME:
            self._queue_control(self.keys.on_offer(epoch, public, now), None)
        elif self.keys.on_accept(epoch, public, now):
            self._use(self.keys.box)
            self.port.stats["native_rekey"] += 1
        return pos + KEY_FRAME.size

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
                cc = Controller(self.datagram_size, self.cc.limit, self.cc.response)
                self.use_controller(cc)
                self.recovery.new_path(cc)
        elif newest and (path is None or path.address != source):
            self.path = migration.PathValidation(source)
            self._queue_control(self.path.challenge(now, self.recovery.pto), source)

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

    def _expire(self, now: float) -> None:
        """No key rotation completed within the limits (native/rekey.py): the road ends
        the session and handshakes a new one."""
        keys = self.keys
        self.port.end_session(
            self.remote,
            "key_expired",
            f"key epoch {keys.epoch} is {now - keys.installed_at:.0f} s old and sealed "
            f"{keys.sealed} datagrams; no rotation completed",
            now,
        )

    def unfinished(self) -> list[Outgoing]:
        """Messages not yet fully acknowledged, in the order they were queued (to send
        again in a new session).

        Ends the channel: its reassembly reservations go back to the road's budget."""
        self.port.arm(self, None)
        self.receiver.close()
        return [
            Outgoing(mid, body, expires, BodyKind(kind))
            for mid, body, expires, kind in self.scheduler.unfinished()
        ]
