"""What a native channel sends next: messages on streams, so small ones never wait behind
bulk bytes.

**Streams and ordering.**  Every message travels on a stream and gets the next sequence
number of that stream; the receiver delivers each stream in sequence order, and the
streams independently of each other.  A message of at most ``express_size`` bytes (as
encoded) goes on the *express* stream, a larger one on the *bulk* stream.  So messages of
one class reach the application in the order they were sent; an express message may
overtake bulk messages sent before it (never the reverse is needed: bulk messages are
never held back for express ones, which are sent first anyway).

**Framing.**  A message that fits one datagram travels whole; consecutive ones of the
same stream and kind share ``BATCH`` frames (one small head, a length per message, the
bodies), so many small messages cost a few bytes each on the wire and no per-message
work in the scheduler beyond measuring them.  A larger message is cut into ``DATA``
pieces of ``chunk`` bytes, built when a datagram is filled from a view of its body (no
copy of the body before the datagram's own).

**Scheduling.**  ``fill`` puts frames into one datagram in this order: frames to send
again (lost), then the express stream, then the bulk stream; every ``BULK_TURN``-th
datagram the bulk stream goes first, so a steady flow of express messages cannot starve
it.  Which datagrams may go at all is the channel's flow gate (``native/flow.py``).

**Confirmation.**  A frame's messages count as delivered when the packet carrying it is
acknowledged; a stream confirms them in sequence order (``confirmed``).  Messages queued
one by one are confirmed one ``MessageDelivered`` each; a batch queued at once
(``add_batch``) by one ``MessageDelivered`` whose ``count`` covers it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from raetsalt.engine.native.frames import (
    BATCH_FRAME,
    BATCH_HEAD,
    BATCH_LENGTH,
    BULK,
    DATA_FRAME,
    DATA_HEAD,
    EXPRESS,
    STREAMS,
    lengths_struct,
)

BULK_TURN = 8
"""Every this many-th datagram the bulk stream is served before the express stream."""
RUN_SPAN = 0.05
"""Messages queued one by one join the previous run (sharing its expiry) within this many
seconds of it."""


@dataclass(slots=True, eq=False)
class Run:
    """Whole messages, consecutive on one stream, sent in BATCH frames."""

    stream: int
    first_seq: int
    kind: int
    expires: float
    bodies: list[bytes]
    mids: list[int] | range
    batch: bool
    """Queued at once: confirmed by one event for all."""
    sent: int = 0
    """Bodies framed at least once."""
    reported: int = 0
    """Bodies confirmed to the application."""
    dead: bool = False

    @property
    def end_seq(self) -> int:
        return self.first_seq + len(self.bodies)


@dataclass(slots=True, eq=False)
class Bulk:
    """One message too large for a datagram, sent in DATA pieces."""

    stream: int
    first_seq: int
    kind: int
    expires: float
    body: bytes
    mid: int
    unacked: int
    """Bytes of it not acknowledged yet (pieces may differ in size: ``Scheduler.chunk``
    is smaller while express messages flow)."""
    view: memoryview = field(init=False)
    sent: int = 0
    """Bytes framed at least once."""
    dead: bool = False

    def __post_init__(self) -> None:
        self.view = memoryview(self.body)

    @property
    def end_seq(self) -> int:
        return self.first_seq + 1


Item = Run | Bulk
Frame = tuple[Item, int, int]
"""A frame in flight: (item, first body index or byte offset, count or length)."""


@dataclass(slots=True, eq=False)
class _Stream:
    next_seq: int = 1
    queue: deque[Item] = field(default_factory=deque)
    """Items not framed completely yet, in sequence order."""
    unconfirmed: deque[Item] = field(default_factory=deque)
    """Items not confirmed completely yet, in sequence order."""
    confirmed: int = 1
    """Every sequence number below this one is acknowledged."""
    ahead: dict[int, int] = field(default_factory=dict)
    """Acknowledged ranges beyond ``confirmed``: first seq -> end."""


class Scheduler:
    """The send side of one native session: queues, framing, confirmation, expiry.

    ``confirm(mid, count)`` and ``fail(mid)`` report outcomes to the channel.
    """

    def __init__(
        self,
        *,
        chunk: int,
        whole_max: int,
        express_size: int,
        confirm: Callable[[int, int], None],
        fail: Callable[[int], None],
    ) -> None:
        self.chunk = chunk
        self.whole_max = whole_max
        self.express_size = express_size
        self.confirm = confirm
        self.fail = fail
        self.streams = [_Stream() for _ in range(STREAMS)]
        self.retx: list[deque[Frame]] = [deque() for _ in range(STREAMS)]
        """Frames to send again, per stream."""
        self._turn = 0

    # -- queueing -----------------------------------------------------------------------

    def add_message(self, mid: int, body: bytes, kind: int, expires: float) -> None:
        size = len(body)
        stream_id = EXPRESS if size <= self.express_size else BULK
        stream = self.streams[stream_id]
        seq = stream.next_seq
        stream.next_seq = seq + 1
        if size > self.whole_max:
            item: Item = Bulk(stream_id, seq, kind, expires, body, mid, size)
        else:
            queue = stream.queue
            if queue:
                tail = queue[-1]
                if (
                    isinstance(tail, Run)
                    and not tail.batch
                    and tail.kind == kind
                    and expires - tail.expires <= RUN_SPAN
                ):
                    tail.bodies.append(body)
                    tail.mids.append(mid)  # type: ignore[union-attr]
                    return
            item = Run(stream_id, seq, kind, expires, [body], [mid], False)
        stream.queue.append(item)
        stream.unconfirmed.append(item)

    def add_batch(self, first_mid: int, bodies: list[bytes], kind: int, expires: float) -> None:
        """Queue ``bodies`` (mids from ``first_mid`` on), confirmed by one event; bodies
        too large for a datagram, or for the express stream, are queued one by one."""
        whole_max, express_size = self.whole_max, self.express_size
        limit = express_size if express_size < whole_max else whole_max
        if max(map(len, bodies), default=0) > limit:
            for offset, body in enumerate(bodies):
                self.add_message(first_mid + offset, body, kind, expires)
            return
        stream = self.streams[EXPRESS]
        run = Run(
            EXPRESS,
            stream.next_seq,
            kind,
            expires,
            bodies,
            range(first_mid, first_mid + len(bodies)),
            True,
        )
        stream.next_seq += len(bodies)
        stream.queue.append(run)
        stream.unconfirmed.append(run)

    def has_data(self) -> bool:
        express, bulk = self.streams
        retx = self.retx
        return bool(express.queue or bulk.queue or retx[EXPRESS] or retx[BULK])

    def burst(self, most: int) -> tuple[Bulk | None, int]:
        """The bulk message whose whole pieces, one per datagram, are all ``fill`` would
        send next (nothing to send again, no express message waiting), and how many of
        them (at most ``most``); (None, 0) when that is not the case.  The caller frames
        them itself (``Channel``'s tight loop) and then calls ``took``."""
        retx = self.retx
        if retx[EXPRESS] or retx[BULK] or self.streams[EXPRESS].queue:
            return None, 0
        queue = self.streams[BULK].queue
        if not queue:
            return None, 0
        item = queue[0]
        if not isinstance(item, Bulk) or item.dead:
            return None, 0
        count = (len(item.body) - item.sent) // self.chunk
        return item, count if count < most else most

    def batch_burst(self) -> tuple[Run | None, bool]:
        """The run of whole express messages ``fill`` would frame next, when nothing else
        is waiting (nothing to send again, no bulk) and at least two of its messages
        are left, and whether more follow it (then the datagram with its last messages
        is left to ``fill``, which adds the next run's); the caller frames them itself
        (``Channel``'s burst of small messages) and then calls ``took_bodies``.
        (None, False) otherwise."""
        item = self._express_head()
        if item is None or len(item.bodies) - item.sent < 2:
            return None, False
        return item, len(self.streams[EXPRESS].queue) > 1

    def single(self) -> Run | None:
        """The run whose next body is all ``fill`` would frame: one whole express
        message, with nothing to send again and nothing else queued (a lone request or
        reply).  The caller frames it itself (``Channel``'s lone message) and then calls
        ``took_bodies``.  None otherwise."""
        item = self._express_head()
        if item is None or len(item.bodies) - item.sent != 1:
            return None
        return item if len(self.streams[EXPRESS].queue) == 1 else None

    def _express_head(self) -> Run | None:
        """The run of whole express messages ``fill`` would frame first when nothing else
        waits (nothing to send again, no bulk); None otherwise."""
        retx = self.retx
        if retx[EXPRESS] or retx[BULK] or self.streams[BULK].queue:
            return None
        queue = self.streams[EXPRESS].queue
        if not queue:
            return None
        item = queue[0]
        if isinstance(item, Bulk) or item.dead:
            return None
        return item

    def took_bodies(self, run: Run, count: int, datagrams: int) -> None:
        """``count`` bodies of ``run`` (from ``batch_burst``) were framed in ``datagrams``."""
        self._turn += datagrams
        run.sent += count
        if run.sent >= len(run.bodies):
            self.streams[run.stream].queue.popleft()

    def took(self, item: Bulk, count: int) -> None:
        """``count`` whole pieces of ``item`` (from ``burst``) were framed."""
        self._turn += count
        item.sent += count * self.chunk
        if item.sent >= len(item.body):
            self.streams[item.stream].queue.popleft()

    def express_first(self) -> bool:
        """Whether the next datagram would start with an express frame."""
        return bool(self.retx[EXPRESS] or self.streams[EXPRESS].queue)

    # -- framing ------------------------------------------------------------------------

    def first_size(self) -> int:
        """Bytes of the first frame ``fill`` would put in a datagram (0: nothing to send)."""
        for stream_id in self._order():
            retx = self.retx[stream_id]
            while retx and retx[0][0].dead:
                retx.popleft()
            if retx:
                item, start, count = retx[0]
                if isinstance(item, Bulk):
                    return DATA_HEAD.size + count
                return BATCH_HEAD.size + BATCH_LENGTH + len(item.bodies[start])
        for stream_id in self._order():
            queue = self.streams[stream_id].queue
            while queue and queue[0].dead:
                queue.popleft()
            if queue:
                item = queue[0]
                if isinstance(item, Bulk):
                    return DATA_HEAD.size + min(self.chunk, len(item.body) - item.sent)
                return BATCH_HEAD.size + BATCH_LENGTH + len(item.bodies[item.sent])
        return 0

    def _order(self) -> tuple[int, int]:
        if self._turn % BULK_TURN == BULK_TURN - 1 and self.streams[BULK].queue:
            return BULK, EXPRESS
        return EXPRESS, BULK

    def fill(
        self,
        room: int,
        parts: list[bytes | memoryview],
        frames: list[Frame],
        *,
        express_only: bool = False,
    ) -> tuple[int, bool]:
        """Append frames for one datagram with ``room`` bytes to ``parts`` (and what they
        are to ``frames``): frames to send again first, then new ones (see the module
        docstring); ``express_only``: nothing of the bulk stream.  Returns the bytes used
        and whether any express frame went in."""
        self._turn += 1
        order = (EXPRESS,) if express_only else self._order()
        used = 0
        express = 0
        full = False
        for stream_id in order:
            before = len(frames)
            used, full = self._fill_retx(self.retx[stream_id], room, used, parts, frames)
            if stream_id == EXPRESS:
                express += len(frames) - before
            if full:
                break
        if not full:
            for stream_id in order:
                queue = self.streams[stream_id].queue
                before = len(frames)
                used, full = self._fill_queue(queue, room, used, parts, frames)
                if stream_id == EXPRESS:
                    express += len(frames) - before
                if full:
                    break
        return used, express > 0

    def _fill_retx(
        self,
        retx: deque[Frame],
        room: int,
        used: int,
        parts: list[bytes | memoryview],
        frames: list[Frame],
    ) -> tuple[int, bool]:
        """Frames to send again, as far as they fit: (bytes used, whether it is full)."""
        while retx:
            item, start, count = retx[0]
            if item.dead:
                retx.popleft()
                continue
            if isinstance(item, Bulk):
                size = DATA_HEAD.size + count
                if used + size > room:
                    return used, True
                retx.popleft()
                self._piece(item, start, count, parts, frames)
                used += size
                continue
            taken, size = self._frame_run(item, start, count, room - used, parts, frames)
            used += size
            if taken < count:
                if taken:
                    retx[0] = (item, start + taken, count - taken)
                return used, True
            retx.popleft()
        return used, False

    def _fill_queue(
        self,
        queue: deque[Item],
        room: int,
        used: int,
        parts: list[bytes | memoryview],
        frames: list[Frame],
    ) -> tuple[int, bool]:
        """New frames of one stream, as far as they fit: (bytes used, whether it is full)."""
        chunk = self.chunk
        while queue:
            item = queue[0]
            if item.dead:
                queue.popleft()
                continue
            if isinstance(item, Bulk):
                offset = item.sent
                length = len(item.body) - offset
                if length > chunk:
                    length = chunk
                size = DATA_HEAD.size + length
                if used + size > room:
                    return used, True
                self._piece(item, offset, length, parts, frames)
                used += size
                item.sent = offset + length
                if item.sent >= len(item.body):
                    queue.popleft()
                continue
            start = item.sent
            count = len(item.bodies) - start
            taken, size = self._frame_run(item, start, count, room - used, parts, frames)
            item.sent = start + taken
            used += size
            if taken < count:
                return used, True
            queue.popleft()
        return used, False

    @staticmethod
    def _piece(
        item: Bulk, offset: int, length: int, parts: list[bytes | memoryview], frames: list[Frame]
    ) -> None:
        parts.append(
            DATA_HEAD.pack(
                DATA_FRAME, item.kind, item.stream, item.first_seq, len(item.body), offset, length
            )
        )
        parts.append(item.view[offset : offset + length])
        frames.append((item, offset, length))

    @staticmethod
    def _frame_run(
        run: Run,
        start: int,
        count: int,
        room: int,
        parts: list[bytes | memoryview],
        frames: list[Frame],
    ) -> tuple[int, int]:
        """Frame as many of ``count`` bodies of ``run`` from ``start`` as fit ``room`` in
        one BATCH frame; returns how many and the frame's size."""
        bodies = run.bodies
        space = room - BATCH_HEAD.size
        size = 0
        stop = start
        end = start + count
        while stop < end:
            need = size + len(bodies[stop]) + BATCH_LENGTH
            if need > space:
                break
            size = need
            stop += 1
        taken = stop - start
        if not taken:
            return 0, 0
        chosen = bodies[start:stop]
        parts.append(
            BATCH_HEAD.pack(BATCH_FRAME, run.kind, run.stream, run.first_seq + start, taken)
        )
        parts.append(lengths_struct(taken).pack(*map(len, chosen)))
        parts.extend(chosen)
        frames.append((run, start, taken))
        return taken, BATCH_HEAD.size + size

    # -- outcomes -----------------------------------------------------------------------

    def acked(self, frames: list[Frame]) -> None:
        """The packet carrying ``frames`` was acknowledged."""
        touched = 0
        for item, start, count in frames:
            if item.dead:
                continue
            if isinstance(item, Bulk):
                item.unacked -= count  # (a piece's frame: item, offset, length)
                if item.unacked > 0:
                    continue
                self._ack_seqs(item.stream, item.first_seq, 1)
            else:
                self._ack_seqs(item.stream, item.first_seq + start, count)
            touched |= 1 << item.stream
        if touched & 1:
            self._confirm(self.streams[EXPRESS])
        if touched & 2:
            self._confirm(self.streams[BULK])

    def lost(self, frames: list[Frame]) -> int:
        """The packet carrying ``frames`` is lost: send them again.  Returns how many."""
        again = 0
        retx = self.retx
        for frame in frames:
            if not frame[0].dead:
                retx[frame[0].stream].append(frame)
                again += 1
        return again

    def _ack_seqs(self, stream_id: int, first: int, count: int) -> None:
        stream = self.streams[stream_id]
        if first == stream.confirmed:
            end = first + count
            ahead = stream.ahead
            while end in ahead:
                end = ahead.pop(end)
            stream.confirmed = end
        elif first > stream.confirmed:
            stream.ahead[first] = first + count

    def _confirm(self, stream: _Stream) -> None:
        confirmed = stream.confirmed
        unconfirmed = stream.unconfirmed
        confirm = self.confirm
        while unconfirmed:
            item = unconfirmed[0]
            if isinstance(item, Bulk):
                if item.first_seq >= confirmed:
                    return
                unconfirmed.popleft()
                if not item.dead:
                    confirm(item.mid, 1)
                continue
            done = confirmed - item.first_seq
            total = len(item.bodies)
            if done > total:
                done = total
            if done <= item.reported:
                return
            if item.batch:
                if done < total:
                    return
                confirm(item.mids[0], total)
            else:
                for mid in item.mids[item.reported : done]:
                    confirm(mid, 1)
            item.reported = done
            if done < total:
                return
            unconfirmed.popleft()

    # -- time ---------------------------------------------------------------------------

    def next_expiry(self) -> float | None:
        when = None
        for stream in self.streams:
            if stream.unconfirmed:
                expires = stream.unconfirmed[0].expires
                if when is None or expires < when:
                    when = expires
        return when

    def expire(self, now: float) -> None:
        """Fail every message not confirmed by its expiry (``fail`` per message).  The
        receiver passes over the gap after its own time-out."""
        for stream in self.streams:
            unconfirmed = stream.unconfirmed
            while unconfirmed and unconfirmed[0].expires <= now:
                item = unconfirmed.popleft()
                item.dead = True
                for mid in _unreported(item):
                    self.fail(mid)
                # Its sequence numbers count as done, so later messages confirm.
                start = max(item.first_seq, stream.confirmed)
                if item.end_seq > start:
                    self._ack_seqs(item.stream, start, item.end_seq - start)
            self._confirm(stream)

    # -- end of the session -------------------------------------------------------------

    def unfinished(self) -> Iterator[tuple[int, bytes, float, int]]:
        """(mid, body, expires, kind) of every message not confirmed, by mid."""
        found = []
        for stream in self.streams:
            for item in stream.unconfirmed:
                if item.dead:
                    continue
                if isinstance(item, Bulk):
                    found.append((item.mid, item.body, item.expires, item.kind))
                else:
                    for index in range(item.reported, len(item.bodies)):
                        found.append(
                            (item.mids[index], item.bodies[index], item.expires, item.kind)
                        )
                item.dead = True
        found.sort(key=lambda entry: entry[0])
        return iter(found)


def _unreported(item: Item) -> list[int] | range:
    if isinstance(item, Bulk):
        return [item.mid]
    return item.mids[item.reported :]
