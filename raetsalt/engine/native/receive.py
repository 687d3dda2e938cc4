"""The receiving side of a native channel: what came in and what it owes in acks.

``Receiver`` takes the frames of each authenticated packet (the channel opens the box):
data goes to the streams' reassembly (``engine/reassembly.py``, one inbox per stream,
each delivered in order), acknowledgements to the channel's loss recovery, path and key
frames to the channel.  Every packet counter goes into the replay window and into the
acknowledgement ranges (at most ``MAX_ACK_RANGES``, the newest; the sender's ``LEAST``
frame says which it no longer needs).  Only packets carrying data, or a probe
(``ACK_NOW`` alone), ask for an ack: an ack of an ack would never end.  Two such
packets are acknowledged at once; a lone one waits ``ACK_DELAY`` for a reply to ride on.
A packet with a data frame the reassembly refused (its caps) is not acknowledged, so the
sender sends its frames again later under new counters.

``take_run`` is the same for a run of bulk pieces of a received train (GRO), opened by
the kernel (``native/trains.py``) and taken with one reassembly append.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import cast

from raetsalt.drops import DropReason
from raetsalt.engine.native.frames import (
    ACK_DELAY,
    ACK_FRAME,
    ACK_HEAD,
    ACK_NOW_FRAME,
    BATCH_FRAME,
    BATCH_HEAD,
    BATCH_LENGTH,
    DATA_FRAME,
    DATA_HEAD,
    LEAST,
    LEAST_FRAME,
    MAX_ACK_RANGES,
    ONE_RANGE,
    PATH_CHALLENGE_FRAME,
    PIECE,
    RANGE,
    STREAMS,
    lengths_struct,
)
from raetsalt.engine.native.trains import Entry, Message
from raetsalt.engine.reassembly import Reassembly
from raetsalt.engine.replay import ReplayWindow
from raetsalt.errors import BadPacket

# What the frames of one received packet amounted to.
NO_DATA = 0
HELD = 1
REFUSED = 2
"""A data frame was not held (reassembly caps): the packet is not acknowledged."""

AckHandler = Callable[[list[tuple[int, int]], float], None]
"""Takes the ranges of an ACK frame (the sender's loss recovery), at ``now``."""
ControlHandler = Callable[[int, bytearray, int, float], int]
"""Takes a path, key or hint frame of ``kind`` at ``plain[pos]``; returns the position
after it."""
Deliver = Callable[[int, bytes | bytearray], None]
"""A whole message of a body kind, in order."""


class Receiver:
    """The receiving state of one native channel (see the module docstring)."""

    __slots__ = (
        "window",
        "inboxes",
        "ack_ranges",
        "ack_pending",
        "ack_due",
        "ack_deadline",
        "probed",
        "_on_ack",
        "_on_control",
        "_deliver",
        "_want_flush",
    )

    def __init__(
        self,
        inboxes: list[Reassembly],
        *,
        on_ack: AckHandler,
        on_control: ControlHandler,
        deliver: Deliver,
        want_flush: Callable[[], None],
    ) -> None:
        self.window = ReplayWindow()
        self.inboxes = inboxes
        """One per stream."""
        self.ack_ranges: list[list[int]] = []
        """Counters received, as [first, last], oldest first."""
        self.ack_pending = 0
        """Packets asking for an ack received since the last ack."""
        self.ack_due = False
        """An ack must go out at the next flush, data or not."""
        self.ack_deadline: float | None = None
        """When a lone packet's ack is due (the channel's timer: it also wakes for the
        inboxes' stall time-outs)."""
        self.probed = False
        """A probe (``ACK_NOW`` alone) came since the channel last looked."""
        self._on_ack = on_ack
        self._on_control = on_control
        self._deliver = deliver
        self._want_flush = want_flush

    # -- packets ------------------------------------------------------------------------

    def take_packet(self, counter: int, plain: bytearray, now: float) -> None:
        """The frames of the authenticated packet ``counter``.  Only packets carrying
        data are acknowledged (an ack of an ack would never end), but every counter goes
        into the ranges."""
        self._settle(counter, self._frames_untrusted(plain, now), now)

    def take_message(self, counter: int, message: Message, now: float) -> None:
        """``take_packet`` for a packet the kernel took apart (``trains.open_message``):
        the same frames, handled in the same order, without reading them again."""
        plain, least, first, last, kind, stream, seq, at, length, ack_now = message
        if least is not None:
            ranges = self.ack_ranges
            if ranges and ranges[0][0] < least:
                self.forget_below(least)
        if first is not None and last is not None:
            self._on_ack([(first, last)], now)
        carries = NO_DATA
        if kind is not None:
            held = self._batch(kind, stream, seq, (length,), plain, at, now)
            carries = HELD if held else REFUSED
        if ack_now:
            self.ack_due = True
            self._want_flush()
            if carries == NO_DATA:
                carries = HELD
        self._settle(counter, carries, now)

    def _settle(self, counter: int, carries: int, now: float) -> None:
        """Packet ``counter`` carried what ``carries`` says: into the ranges, or, with
        data we could not hold, left unacknowledged, so the sender sends its frames again
        under new counters (this one is marked seen)."""
        if carries == REFUSED:
            self.window.mark(counter)
        else:
            self._record(counter, carries == HELD, now)

    def _frames_untrusted(self, plain: bytearray, now: float) -> int:
        """Handle the frames of one packet: ``NO_DATA``, ``HELD`` (data taken) or
        ``REFUSED`` (a data frame was not held)."""
        end = len(plain)
        if end > PIECE.size and plain[0] == LEAST_FRAME and plain[LEAST.size] == DATA_FRAME:
            # One piece of a bulk transfer (maybe with ACK_NOW): the frames at one go.
            _, least, _, body_kind, stream, seq, total, offset, length = PIECE.unpack_from(plain)
            rest = end - PIECE.size - length
            if stream < STREAMS and (rest == 0 or (rest == 1 and plain[-1] == ACK_NOW_FRAME)):
                ranges = self.ack_ranges
                if ranges and ranges[0][0] < least:
                    self.forget_below(least)
                if rest:
                    self.ack_due = True
                    self._want_flush()
                if self.inboxes[stream].take(
                    seq, body_kind, total, offset, plain, PIECE.size, length, now
                ):
                    return HELD
                return REFUSED
        pos = 0
        carries = NO_DATA
        try:
            while pos < end:
                kind = plain[pos]
                if kind == BATCH_FRAME:
                    _, body_kind, stream, first, count = BATCH_HEAD.unpack_from(plain, pos)
                    pos += BATCH_HEAD.size
                    if stream >= STREAMS or not count:
                        raise BadPacket("bad native batch frame", DropReason.BODY)
                    lengths = lengths_struct(count).unpack_from(plain, pos)
                    pos += BATCH_LENGTH * count
                    stop = pos + sum(lengths)
                    if stop > end:
                        raise BadPacket("truncated native batch frame", DropReason.BODY)
                    if not self._batch(body_kind, stream, first, lengths, plain, pos, now):
                        carries = REFUSED
                    elif carries == NO_DATA:
                        carries = HELD
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
                        if carries == NO_DATA:
                            carries = HELD
                    else:
                        carries = REFUSED
                    pos += length
                elif kind == ACK_NOW_FRAME:
                    pos += 1
                    self.ack_due = True
                    self._want_flush()
                    if carries == NO_DATA:  # a probe: this packet is acknowledged too
                        carries = HELD
                        if end == 1:
                            self.probed = True
                elif kind == LEAST_FRAME:
                    _, least = LEAST.unpack_from(plain, pos)
                    pos += LEAST.size
                    ranges = self.ack_ranges
                    if ranges and ranges[0][0] < least:
                        self.forget_below(least)
                elif kind == ACK_FRAME:
                    count = plain[pos + 1]
                    if count == 1:
                        _, _, first, last = ONE_RANGE.unpack_from(plain, pos)
                        pos += ONE_RANGE.size
                        self._on_ack([(first, last)], now)
                    else:
                        pos += ACK_HEAD.size
                        ranges_in = [
                            RANGE.unpack_from(plain, pos + i * RANGE.size) for i in range(count)
                        ]
                        pos += count * RANGE.size
                        self._on_ack(ranges_in, now)
                elif kind >= PATH_CHALLENGE_FRAME:
                    pos = self._on_control(kind, plain, pos, now)
                else:
                    raise BadPacket("unknown native frame", DropReason.BODY)
        except (struct.error, IndexError) as exc:
            raise BadPacket(f"truncated native frame: {exc}", DropReason.BODY) from None
        return carries

    def _batch(
        self,
        body_kind: int,
        stream: int,
        first: int,
        lengths: Sequence[int],
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

    # -- trains -------------------------------------------------------------------------

    def take_run(
        self, entry: Entry, out: bytearray, now: float, bad: Callable[[BadPacket], None]
    ) -> bool:
        """A ``trains.RUN`` of bulk pieces (their data joined in ``out``): one reassembly
        append when the inbox takes them as it would one by one, else one by one
        (``bad`` counts a piece found bad).  True if any was authenticated and not
        dropped."""
        _, first, count, least, ack_now, kind, stream, seq, total, offset, pos, length, _ = entry
        ranges = self.ack_ranges
        if ranges and ranges[0][0] < least:
            if least > first:  # (no honest sender) one by one forgets differently
                return self._pieces(entry, out, now, bad)
            self.forget_below(least)
        if ack_now:
            self.ack_due = True
            self._want_flush()
        inbox = self.inboxes[stream]
        if not inbox.take_run(seq, kind, total, offset, out, pos, length, count, now):
            return self._pieces(entry, out, now, bad)
        self._record_run(first, first + count - 1, now)
        return True

    def take_messages(
        self, entry: Entry, out: bytearray, now: float, bad: Callable[[BadPacket], None]
    ) -> bool:
        """A ``trains.MESSAGES`` entry: datagrams of whole messages (their bodies back to
        back in ``out``), delivered at once when they are next in line on their stream
        (the usual case), else taken datagram by datagram as ``take_packet`` would.  True
        if any was taken (not dropped)."""
        _, first, count, least, ack_now, kind, stream, seq, pos, _, _ = entry
        lengths, per = cast("list[int]", entry[9]), cast("list[int]", entry[10])
        ranges = self.ack_ranges
        if ranges and ranges[0][0] < least:
            self.forget_below(least)  # (least is not above the first counter)
        if ack_now:
            self.ack_due = True
            self._want_flush()
        inbox = self.inboxes[stream]
        if seq == inbox.next_deliver and not inbox.waiting:
            self._batch(kind, stream, seq, lengths, out, pos, now)  # in line: all delivered
            self._record_run(first, first + count - 1, now)
            return True
        index, heard = 0, False
        for number, messages in enumerate(per):
            chunk = lengths[index : index + messages]
            try:
                held = self._batch(kind, stream, seq, chunk, out, pos, now)
            except BadPacket as exc:  # (as the packet alone: dropped, not recorded)
                bad(exc)
            else:
                heard = True
                if held:
                    self._record(first + number, True, now)
                else:
                    self.window.mark(first + number)
            index += messages
            seq += messages
            pos += sum(chunk)
        return heard

    def _pieces(
        self, entry: Entry, out: bytearray, now: float, bad: Callable[[BadPacket], None]
    ) -> bool:
        """A ``trains.RUN`` taken piece by piece, exactly as the packets one at a time."""
        _, first, count, least, ack_now, kind, stream, seq, total, offset, pos, length, chunk = (
            entry
        )
        if ack_now:
            self.ack_due = True
            self._want_flush()
        inbox, taken = self.inboxes[stream], False
        for index in range(count):
            size = chunk if index < count - 1 else length - chunk * index
            ranges = self.ack_ranges
            if ranges and ranges[0][0] < least:
                self.forget_below(least)
            try:
                held = inbox.take(
                    seq, kind, total, offset + index * chunk, out, pos + index * chunk, size, now
                )
            except BadPacket as exc:
                bad(exc)
                continue
            taken = True
            if held:
                self._record(first + index, True, now)
            else:
                self.window.mark(first + index)
        return taken

    # -- acknowledgements ---------------------------------------------------------------

    def _record(self, counter: int, ack_eliciting: bool, now: float) -> None:
        self.window.mark(counter)
        ranges = self.ack_ranges
        if ranges and ranges[-1][1] + 1 == counter:
            ranges[-1][1] = counter
        else:
            self._add_range(counter, counter)
        if ack_eliciting:
            self.ack_pending += 1
            if self.ack_pending >= 2:
                self.ack_due = True
                self._want_flush()
            elif self.ack_deadline is None:
                self.ack_deadline = now + ACK_DELAY

    def _record_run(self, first: int, last: int, now: float) -> None:
        """``_record(counter, True, now)`` for the counters ``first`` to ``last``."""
        window = self.window
        for counter in range(first, last + 1):
            window.mark(counter)
        ranges = self.ack_ranges
        if ranges and ranges[-1][1] + 1 == first:
            ranges[-1][1] = last
        else:
            self._add_range(first, last)
        if not self.ack_pending and self.ack_deadline is None:
            self.ack_deadline = now + ACK_DELAY
        self.ack_pending += last - first + 1
        if self.ack_pending >= 2:
            self.ack_due = True
            self._want_flush()

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

    def forget_below(self, least: int) -> None:
        """The sender no longer needs acks below ``least`` (its LEAST frame)."""
        ranges = self.ack_ranges
        while ranges and ranges[0][1] < least:
            ranges.pop(0)
        if ranges and ranges[0][0] < least:
            ranges[0][0] = least

    def ack_frame(self) -> bytes:
        """The ACK frame of the ranges held (the newest ``MAX_ACK_RANGES``)."""
        ranges = self.ack_ranges
        if len(ranges) == 1:
            return ONE_RANGE.pack(ACK_FRAME, 1, ranges[0][0], ranges[0][1])
        ranges = ranges[-MAX_ACK_RANGES:]
        return ACK_HEAD.pack(ACK_FRAME, len(ranges)) + b"".join(
            RANGE.pack(first, last) for first, last in ranges
        )

    def acked(self) -> None:
        """An ack went out: nothing is owed until the next packet asking for one."""
        self.ack_pending = 0
        self.ack_due = False
        self.ack_deadline = None

    # -- time ---------------------------------------------------------------------------

    def on_timer(self, now: float) -> None:
        for inbox in self.inboxes:
            inbox.on_timer(now)
        if self.ack_deadline is not None and self.ack_deadline <= now:
            self.ack_deadline = None
            self.ack_due = True

    def close(self) -> None:
        """The session ended: the reassembly reservations go back to the road's budget."""
        for inbox in self.inboxes:
            inbox.close()
