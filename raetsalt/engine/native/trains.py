"""The native profile's per-datagram work, one call per datagram or per train.

A *train* is a run of native datagrams laid back to back in one buffer: what a UDP GSO
send takes and what a GRO receive returns.  The four operations here are the whole of
the per-datagram work that does not need the channel's state:

* ``seal(key, nonce_head, fuid, counter, parts)``: one datagram (prefix, then the box of
  the concatenated ``parts``);
* ``open(key, nonce_head, data, counter)``: the frames of one datagram, or None when its
  box does not open;
* ``seal_pieces(...)``: ``count`` datagrams of consecutive pieces of one bulk message into
  one buffer (the channel's bulk burst);
* ``seal_batches(...)``: consecutive whole messages in BATCH frames, as many datagrams as
  they fill (the channel's burst of small messages);
* ``seal_message(...)`` and ``open_message(...)``: the datagram of one whole message
  (LEAST, the ack owed in one range, the message, ACK_NOW), as a lone request or reply
  goes, built and taken apart in one call each;
* ``open_train(...)``: open every datagram of a received train, and hand back runs of
  consecutive bulk pieces with their data already joined (one reassembly append per run
  instead of one per datagram), the frames of other datagrams, what is left to the
  ordinary path and what did not open (``RUN``, ``PLAIN``, ``RAW``, ``FORGED`` entries;
  layouts in ``PyKernel.open_train``), and runs of datagrams of whole messages with
  their bodies joined and their lengths listed (``MESSAGES``).

``COMPILED`` is the compiled module ``raetsalt._trains`` (built from ``raetsalt/_trains.c``
when a C compiler is there; libsodium is PyNaCl's own, through the function pointers
``raetsalt.crypto.kernel`` finds); ``PyKernel`` is the same in Python and the fallback.
The layouts are ``native/frames.py``'s.  Both give the same
bytes and the same entries (``tests/engine/native/test_trains.py``).  ``KERNEL`` is the one
channels use: the compiled one unless it is missing or ``RAETSALT_PURE_PYTHON`` is set.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from raetsalt.crypto.box import open_with_key_untrusted, seal_with_key
from raetsalt.crypto.kernel import box_function_addresses
from raetsalt.engine.native.frames import (
    ACK_FRAME,
    ACK_NOW_FRAME,
    BATCH_FRAME,
    BATCH_HEAD,
    BATCH_LENGTH,
    DATA_FRAME,
    LEAST,
    LEAST_FRAME,
    MAGIC,
    MAX_DATAGRAM,
    NONCE,
    ONE_RANGE,
    OVERHEAD,
    PIECE,
    PREFIX,
    STREAMS,
    TAG,
    lengths_struct,
)

Buffer = bytes | bytearray | memoryview
Entry = tuple[int, ...]
"""An entry of ``open_train`` (a MESSAGES entry also holds two lists of ints)."""
Message = tuple[
    bytearray, int | None, int | None, int | None, int | None, int, int, int, int, bool
]
"""What ``open_message`` takes apart: (plain, least, ack first, ack last, kind, stream,
seq, at, length, ack_now); None for the fields of an absent LEAST or ACK, kind None
(and stream, seq, at, length 0) without a message."""

RUN = 0
PLAIN = 1
RAW = 2
FORGED = 3
MESSAGES = 4
ABI = 4
"""The compiled module's ``ABI``: one built from older source (a stale in-place build
left by an earlier install) does not match and is not used."""



class Train(bytearray):
    """Datagrams of ``segment`` bytes back to back, to one address: one GSO send."""

    __slots__ = ("segment",)
    segment: int


class PyKernel:
    """The reference implementation (and the fallback without a compiler); the compiled
    module has the same functions, typed as this class."""

    name = "python"

    def seal(
        self, key: bytes, nonce_head: bytes, fuid: int, counter: int, parts: Sequence[Buffer]
    ) -> bytearray:
        plain = b"".join(parts)
        if len(plain) > MAX_DATAGRAM - PREFIX.size - TAG:
            raise ValueError("datagram too large")
        out = bytearray(PREFIX.pack(MAGIC, fuid, counter))
        out += seal_with_key(key, plain, NONCE.pack(nonce_head, counter))
        return out

    def open(self, key: bytes, nonce_head: bytes, data: Buffer, counter: int) -> bytearray | None:
        if len(data) < PREFIX.size + TAG:
            return None
        plain = open_with_key_untrusted(
            key, bytes(data[PREFIX.size :]), NONCE.pack(nonce_head, counter)
        )
        return None if plain is None else bytearray(plain)

    def seal_pieces(
        self,
        key: bytes,
        nonce_head: bytes,
        fuid: int,
        counter: int,
        least: int,
        kind: int,
        stream: int,
        seq: int,
        body: Buffer,
        offset: int,
        chunk: int,
        count: int,
        ack_now: bool,
        out: bytearray,
    ) -> None:
        size = OVERHEAD + chunk
        if (
            chunk <= 0
            or size > MAX_DATAGRAM
            or offset < 0
            or count < 0
            or offset + count * chunk > len(body)
            or len(out) != count * size + (1 if ack_now else 0)
        ):
            raise ValueError("seal_pieces: arguments out of range")
        view = memoryview(body)
        total = len(body)
        pos = 0
        for index in range(count):
            start = offset + index * chunk
            parts: list[Buffer] = [
                PIECE.pack(
                    LEAST_FRAME, least, DATA_FRAME, kind, stream, seq, total, start, chunk
                ),
                view[start : start + chunk],
            ]
            if ack_now and index == count - 1:
                parts.append(bytes([ACK_NOW_FRAME]))
            data = self.seal(key, nonce_head, fuid, counter + 1 + index, parts)
            out[pos : pos + len(data)] = data
            pos += len(data)

    def seal_batches(
        self,
        key: bytes,
        nonce_head: bytes,
        fuid: int,
        counter: int,
        least: int,
        kind: int,
        stream: int,
        first_seq: int,
        bodies: Sequence[bytes],
        start: int,
        end: int,
        room: int,
        budget: int,
        limit: int,
        most: int,
        keep_tail: bool,
    ) -> tuple[list[tuple[bytearray, int]], int]:
        """Whole messages ``bodies[start:end]`` (the one at index i has seq ``first_seq``
        + i) in datagrams of consecutive counters from ``counter`` + 1, each LEAST(least)
        and one BATCH frame of as many of the next bodies as fit ``room`` bytes (head,
        lengths and bodies), at most ``most`` datagrams, as the channel's flush frames
        them: a datagram goes while the bytes before it stay below ``limit`` (what
        express frames may have in flight), and one whose size without ACK_NOW uses up
        ``budget`` (the window) carries ACK_NOW, as does every one after it.  Returns
        ([(datagram, how many bodies)], how many carry ACK_NOW); stops early at a body
        that does not fit ``room`` alone, and, when ``keep_tail``, before the datagram
        that would take the last body (the caller fills that one with what follows)."""
        if (
            start < 0
            or end > len(bodies)
            or start > end
            or most < 0
            or room < BATCH_HEAD.size
            or room > MAX_DATAGRAM - PREFIX.size - TAG - LEAST.size - 1
        ):
            raise ValueError("seal_batches: arguments out of range")
        if any(not isinstance(body, bytes) for body in bodies[start:end]):
            raise TypeError("seal_batches: bodies must be bytes")
        made: list[tuple[bytearray, int]] = []
        index, spent, asking = start, 0, 0
        least_frame = LEAST.pack(LEAST_FRAME, least)
        while index < end and len(made) < most and limit - spent > 0:
            used, stop = BATCH_HEAD.size, index
            while stop < end:
                need = used + BATCH_LENGTH + len(bodies[stop])
                if need > room or stop - index >= 0xFFFF:
                    break
                used, stop = need, stop + 1
            if stop == index or (keep_tail and stop == end):
                break
            count = stop - index
            size = PREFIX.size + TAG + LEAST.size + used
            ack_now = budget - spent - size <= 0
            chosen = bodies[index:stop]
            parts: list[Buffer] = [
                least_frame,
                BATCH_HEAD.pack(BATCH_FRAME, kind, stream, first_seq + index, count),
                lengths_struct(count).pack(*map(len, chosen)),
                *chosen,
            ]
            if ack_now:
                parts.append(bytes([ACK_NOW_FRAME]))
                asking += 1
            data = self.seal(key, nonce_head, fuid, counter + 1 + len(made), parts)
            made.append((data, count))
            spent += len(data)
            index = stop
        return made, asking

    def seal_message(
        self,
        key: bytes,
        nonce_head: bytes,
        fuid: int,
        counter: int,
        least: int,
        with_ack: bool,
        ack_first: int,
        ack_last: int,
        kind: int,
        stream: int,
        seq: int,
        body: Buffer,
        ack_now: bool,
    ) -> bytearray:
        """The datagram ``counter`` of one whole message: LEAST(least), a one-range ACK
        (``ack_first``..``ack_last``) when ``with_ack``, a BATCH frame of ``body`` alone
        (message ``seq``), then ACK_NOW when ``ack_now``."""
        if (
            fuid > 0xFFFFFFFF
            or not 0 <= kind <= 0xFF
            or not 0 <= stream < STREAMS
            or not 0 <= seq <= 0xFFFFFFFF
            or len(body) > 0xFFFF
        ):
            raise ValueError("seal_message: arguments out of range")
        parts: list[Buffer] = [LEAST.pack(LEAST_FRAME, least)]
        if with_ack:
            parts.append(ONE_RANGE.pack(ACK_FRAME, 1, ack_first, ack_last))
        parts.append(BATCH_HEAD.pack(BATCH_FRAME, kind, stream, seq, 1))
        parts.append(len(body).to_bytes(BATCH_LENGTH, "big"))
        parts.append(body)
        if ack_now:
            parts.append(bytes([ACK_NOW_FRAME]))
        return self.seal(key, nonce_head, fuid, counter, parts)  # (refuses a datagram too large)

    def open_message(
        self, key: bytes, nonce_head: bytes, data: Buffer, counter: int
    ) -> Message | bytearray | None:
        """None if the box does not open; the datagram taken apart (``Message``) when its
        frames are exactly, in this order and each at most once, LEAST, a one-range ACK,
        a BATCH frame of one message (stream in range, the frame holding exactly its
        length) and ACK_NOW, with at least one of the first three; else its frames, for
        the ordinary parser."""
        plain = self.open(key, nonce_head, data, counter)
        return None if plain is None else _message(plain)

    def open_train(
        self,
        key: bytes,
        nonce_head: bytes,
        uid: int,
        data: Buffer,
        segment: int,
        bits: bytearray,
        highest: int,
        out: bytearray,
    ) -> list[Entry]:
        """The entries of the train ``data`` of ``segment``-byte datagrams, in order:

        * ``(RUN, first counter, count, least, ack_now, kind, stream, seq, total, offset,
          pos, length, chunk)``: ``count`` datagrams with consecutive counters, each just
          LEAST + one DATA piece (+ ACK_NOW), of one message, contiguous, the same least,
          all but the last of ``chunk`` bytes; their data joined is ``out[pos:pos+length]``;
        * ``(PLAIN, counter, pos, length)``: another datagram that opened; its frames are
          ``out[pos:pos+length]``;
        * ``(RAW, start, length)``: ``data[start:start+length]`` is left to the ordinary
          path: not ours (magic, uid), a counter the window ``bits``/``highest`` has seen
          or not above those taken before it in the train;
        * ``(FORGED, counter)``: ours, with a fresh counter, but its box does not open
          (dropped as the ordinary path would, without opening it a second time);
        * ``(MESSAGES, first counter, count, least, ack_now, kind, stream, seq, pos,
          lengths, per)``: ``count`` datagrams with consecutive counters, each just LEAST
          + one BATCH frame (+ ACK_NOW) whose lengths add up exactly and whose least is
          not above its counter, with consecutive seqs, one stream, kind and least;
          ``lengths`` lists every message's length, ``per`` how many messages each
          datagram carried; the messages are ``out[pos:pos+sum(lengths)]``, back to back.

        Nothing is marked in the window: the caller does that as it takes entries.
        """
        nbits = len(bits) * 8
        if (
            segment <= 0
            or segment > MAX_DATAGRAM
            or len(out) < len(data)
            or not nbits
            or nbits & (nbits - 1)
        ):
            raise ValueError("open_train: arguments out of range")
        entries: list[Entry] = []
        run: list[Any] | None = None  # [piece fields..., count, length, pos, ack_now, short]
        messages: list[Any] | None = None  # a MESSAGES entry being made
        wpos = 0
        top = highest
        taken = False
        view = memoryview(data)
        for start in range(0, len(data), segment):
            datagram = view[start : start + segment]
            size = len(datagram)
            counter = 0
            raw = size < PREFIX.size + TAG + 1 or datagram[:2] != MAGIC
            if not raw:
                _, their_uid, counter = PREFIX.unpack_from(datagram)
                raw = (
                    their_uid != uid
                    or (taken and counter <= top)
                    or _seen(bits, nbits, highest, counter)
                )
            plain = None if raw else self.open(key, nonce_head, datagram, counter)
            if plain is None:
                run = self._flush(entries, run)
                messages = self._flush_messages(entries, messages)
                entries.append((RAW, start, size) if raw else (FORGED, counter))
                continue
            taken, top = True, counter
            piece = _piece(plain)
            if piece is None:
                run = self._flush(entries, run)
                batch = _batch(plain, counter)
                if batch is not None:
                    b_least, b_kind, b_stream, b_seq, lengths, at, b_ack = batch
                    if messages is not None and not (
                        counter == messages[11] + 1
                        and (b_least, b_kind, b_stream) == tuple(messages[3:4] + messages[5:7])
                        and b_seq == messages[12]
                    ):
                        messages = self._flush_messages(entries, messages)
                    if messages is None:
                        # MESSAGES, first, count, least, ack_now, kind, stream, seq, pos,
                        # lengths, per, last counter, next seq
                        messages = [MESSAGES, counter, 0, b_least, 0, b_kind, b_stream, b_seq,
                                    wpos, [], [], 0, 0]
                    size = sum(lengths)
                    out[wpos : wpos + size] = plain[at : at + size]
                    wpos += size
                    messages[2] += 1
                    messages[4] |= b_ack
                    messages[9].extend(lengths)
                    messages[10].append(len(lengths))
                    messages[11] = counter
                    messages[12] = b_seq + len(lengths)
                    continue
                messages = self._flush_messages(entries, messages)
                out[wpos : wpos + len(plain)] = plain
                entries.append((PLAIN, counter, wpos, len(plain)))
                wpos += len(plain)
                continue
            messages = self._flush_messages(entries, messages)
            least, kind, stream, seq, total, offset, length, ack_now = piece
            if run is not None and not (
                counter == run[0] + run[8]
                and not run[12]
                and (least, kind, stream, seq, total) == (run[1], run[2], run[3], run[4], run[5])
                and offset == run[6] + run[9]
                and length <= run[7]
            ):
                run = self._flush(entries, run)
            if run is None:
                # first counter, least, kind, stream, seq, total, offset, chunk, count,
                # length, pos, ack_now, short
                run = [counter, least, kind, stream, seq, total, offset, length, 0, 0, wpos, 0, 0]
            out[wpos : wpos + length] = plain[PIECE.size : PIECE.size + length]
            wpos += length
            run[8] += 1
            run[9] += length
            run[11] |= ack_now
            run[12] = length < run[7]
        self._flush(entries, run)
        self._flush_messages(entries, messages)
        return entries

    @staticmethod
    def _flush_messages(entries: list[Entry], messages: list[Any] | None) -> None:
        if messages is not None:
            entries.append(tuple(messages[:11]))
        return None

    @staticmethod
    def _flush(entries: list[Entry], run: list[Any] | None) -> None:
        if run is not None:
            first, least, kind, stream, seq, total, offset, chunk, count, length, pos, ack, _ = run
            entry = (RUN, first, count, least, ack, kind, stream, seq, total, offset, pos, length)
            entries.append((*entry, chunk))
        return None


Kernel = PyKernel
"""What a channel seals and opens with: ``PyKernel`` or the compiled module."""


def _seen(bits: bytearray, nbits: int, highest: int, counter: int) -> bool:
    if counter > highest:
        return False
    if counter + nbits <= highest:
        return True
    index = counter & (nbits - 1)
    return bool(bits[index >> 3] >> (index & 7) & 1)


def _piece(plain: bytearray) -> tuple[int, int, int, int, int, int, int, int] | None:
    """(least, kind, stream, seq, total, offset, length, ack_now) of a datagram that is
    just LEAST + one DATA frame (+ ACK_NOW) with every field in range; else None."""
    size = len(plain)
    if size < PIECE.size + 1 or plain[0] != LEAST_FRAME or plain[LEAST.size] != DATA_FRAME:
        return None
    _, least, _, kind, stream, seq, total, offset, length = PIECE.unpack_from(plain)
    rest = size - PIECE.size - length
    if stream >= STREAMS or not length or offset + length > total:
        return None
    if rest == 0:
        return least, kind, stream, seq, total, offset, length, 0
    if rest == 1 and plain[-1] == ACK_NOW_FRAME:
        return least, kind, stream, seq, total, offset, length, 1
    return None


def _batch(
    plain: bytearray, counter: int
) -> tuple[int, int, int, int, tuple[int, ...], int, int] | None:
    """(least, kind, stream, seq, lengths, where the bodies start, ack_now) of a datagram
    that is just LEAST + one BATCH frame (+ ACK_NOW) with every field in range, the
    lengths adding up exactly and the least not above ``counter``; else None."""
    size = len(plain)
    head = LEAST.size + BATCH_HEAD.size
    if size < head or plain[0] != LEAST_FRAME or plain[LEAST.size] != BATCH_FRAME:
        return None
    _, least = LEAST.unpack_from(plain)
    _, kind, stream, seq, count = BATCH_HEAD.unpack_from(plain, LEAST.size)
    at = head + BATCH_LENGTH * count
    if stream >= STREAMS or not count or least > counter or at > size or seq + count > 0xFFFFFFFF:
        return None
    lengths = lengths_struct(count).unpack_from(plain, head)
    rest = size - at - sum(lengths)
    if rest == 0:
        return least, kind, stream, seq, lengths, at, 0
    if rest == 1 and plain[-1] == ACK_NOW_FRAME:
        return least, kind, stream, seq, lengths, at, 1
    return None


def _message(plain: bytearray) -> Message | bytearray:
    """``open_message``'s reading of opened frames (see there)."""
    end = len(plain)
    pos = 0
    least = first = last = kind = None
    stream = seq = at = length = 0
    if end - pos >= LEAST.size and plain[pos] == LEAST_FRAME:
        _, least = LEAST.unpack_from(plain, pos)
        pos += LEAST.size
    if end - pos >= ONE_RANGE.size and plain[pos] == ACK_FRAME and plain[pos + 1] == 1:
        _, _, first, last = ONE_RANGE.unpack_from(plain, pos)
        pos += ONE_RANGE.size
    head = BATCH_HEAD.size + BATCH_LENGTH
    if end - pos >= head and plain[pos] == BATCH_FRAME:
        _, b_kind, b_stream, b_seq, count = BATCH_HEAD.unpack_from(plain, pos)
        size = int.from_bytes(plain[pos + BATCH_HEAD.size : pos + head], "big")
        if count == 1 and b_stream < STREAMS and end - pos - head >= size:
            kind, stream, seq, length = b_kind, b_stream, b_seq, size
            at = pos + head
            pos = at + size
    ack_now = end - pos == 1 and plain[pos] == ACK_NOW_FRAME
    if ack_now:
        pos += 1
    if pos != end or (least is None and first is None and kind is None):
        return plain
    return plain, least, first, last, kind, stream, seq, at, length, ack_now


def _load_compiled() -> Kernel | None:
    """``raetsalt._trains`` bound to PyNaCl's libsodium, or None."""
    try:
        from raetsalt import _trains  # type: ignore[attr-defined]
    except ImportError:
        return None
    if getattr(_trains, "ABI", None) != ABI:
        return None
    addresses = box_function_addresses()
    if addresses is None:
        return None
    try:
        _trains.bind(*addresses)
    except (TypeError, ValueError):
        return None
    _trains.name = "c"
    return _trains  # type: ignore[no-any-return]


COMPILED = _load_compiled()
"""The compiled kernel, or None (no compiler when raetsalt was installed)."""
KERNEL: Kernel = (
    COMPILED if COMPILED is not None and not os.environ.get("RAETSALT_PURE_PYTHON") else PyKernel()
)
