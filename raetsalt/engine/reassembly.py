"""Bounded reassembly: what a road holds of messages it has not delivered yet
(docs/security.md, Unfinished messages).

A peer decides how large a message it announces and how much of it it ever sends.
Allocating what it announced (a ``bytearray(total)`` per message, as the first version
did) let 47-byte datagrams pin 16 MiB each.  Here:

* **Memory grows with the bytes received.**  A partial message is a buffer that grows
  as its pieces arrive in order (it is what is delivered: no copy at the end), plus
  copies of the pieces that came early, merged when the gap before them fills.
* **Every message is reserved before any of it is held.** ``charge(total)`` (the size it
  announces plus a margin for the buffer's growth and early pieces) comes out of a
  ``ReassemblyBudget`` with a cap per remote and one for the whole road. A message that
  does not fit is refused: its frames or segments are not acknowledged, so an honest
  sender sends them again later, and the refusal is counted as
  ``DropReason.REASSEMBLY_LIMIT``. Since an admitted message has its whole size reserved,
  it can always complete: the caps never deadlock the messages they admitted.
* **In-order delivery keeps room for the message in line.**  Messages that would have
  to wait for an earlier one (``waiting``) may together take no more than each cap less
  its ``reserve`` (the charge of the largest message), so the earlier one, which they
  wait for, stays admissible.
* **Stalled messages end.**  A partial message without a new piece for ``timeout``
  seconds is discarded, and so is a gap (a message in line of which nothing came while
  later ones wait), both counted as ``DropReason.REASSEMBLY_TIMEOUT``.  Later frames of a
  discarded message are refused, never acknowledged, so its sender's own time-out reports
  the failure instead of a false delivery.

``ReassemblyBudget`` is shared by all remotes of a road; ``Reassembly`` is the in-order
receive side of one native session; raet-profile receivers (``engine/message.py``) take
their reservations from the same budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket

if TYPE_CHECKING:
    from raetsalt.engine.config import RoadConfig

CHARGE_FLOOR = 4096
"""Bytes every held message is charged beyond its size (its bookkeeping)."""
PIECE_OVERHEAD = 96
"""Bytes charged per early piece beyond its data (object header, dict slot)."""
READY_OVERHEAD = 256
"""Bytes charged for a complete message that waits for an earlier one."""
SEQ_WINDOW = 65536
"""How far ahead of the next message in line a message may be."""
MAX_ABANDONED = 4096
"""Discarded messages remembered (their late frames are refused, not acknowledged)."""

Buffer = bytes | bytearray
"""A message's body as delivered: a slice of a datagram, or its reassembly buffer."""


def charge(total: int) -> int:
    """What a message announcing ``total`` bytes reserves: its size, an eighth (what a
    growing buffer may have allocated beyond its length, or early pieces' overhead), and
    ``CHARGE_FLOOR``."""
    return total + (total >> 3) + CHARGE_FLOOR


class ReassemblyBudget:
    """Bytes reserved for undelivered messages, per remote (``owner``) and in total; and
    the part of both that waiting messages reserved."""

    __slots__ = (
        "per_remote",
        "total",
        "reserve",
        "total_reserve",
        "used",
        "by_owner",
        "waiting",
        "waiting_by_owner",
    )

    def __init__(self, per_remote: int, total: int, largest: int) -> None:
        """``largest``: the largest message a remote may send (its charge is kept free
        for in-order messages, at most half of each cap)."""
        self.per_remote = per_remote
        self.total = total
        self.reserve = min(charge(largest), per_remote // 2)
        self.total_reserve = min(charge(largest), total // 2)
        self.used = 0
        self.by_owner: dict[int, int] = {}
        self.waiting = 0
        self.waiting_by_owner: dict[int, int] = {}

    @classmethod
    def for_config(cls, config: RoadConfig) -> ReassemblyBudget:
        return cls(config.reassembly_per_remote, config.reassembly_total, config.max_message_size)

    def held(self, owner: int) -> int:
        return self.by_owner.get(owner, 0)

    def admit(self, owner: int, size: int, *, waiting: bool = False) -> bool:
        """Reserve ``size`` bytes for ``owner``; False (nothing reserved) if a cap would be
        exceeded.  ``waiting``: the message cannot be delivered before an earlier one, so
        it may not use the reserve kept for the message in line (release it with the
        same ``waiting``)."""
        held = self.by_owner.get(owner, 0)
        if held + size > self.per_remote or self.used + size > self.total:
            return False
        if waiting:
            held_waiting = self.waiting_by_owner.get(owner, 0)
            if (
                held_waiting + size > self.per_remote - self.reserve
                or self.waiting + size > self.total - self.total_reserve
            ):
                return False
            self.waiting_by_owner[owner] = held_waiting + size
            self.waiting += size
        self.by_owner[owner] = held + size
        self.used += size
        return True

    def release(self, owner: int, size: int, *, waiting: bool = False) -> None:
        _take(self.by_owner, owner, size)
        self.used -= size
        if waiting:
            _take(self.waiting_by_owner, owner, size)
            self.waiting -= size


def _take(held: dict[int, int], owner: int, size: int) -> None:
    left = held.get(owner, 0) - size
    if left > 0:
        held[owner] = left
    else:
        held.pop(owner, None)


@dataclass(slots=True, eq=False)
class _Partial:
    kind: int
    total: int
    charge: int
    waiting: bool
    """Admitted while it had to wait for an earlier message (how it was reserved)."""
    touched: float
    """When the last new piece came."""
    buffer: bytearray = field(default_factory=bytearray)
    """The message from offset 0 as far as it is contiguous."""
    early: dict[int, Buffer] = field(default_factory=dict)
    """Pieces beyond the buffer's end, by offset."""
    early_held: int = 0
    """What the early pieces take, overhead included."""


class Reassembly:
    """The in-order receive side of one native session, in bounded memory.

    ``take`` gets every DATA frame that is not the next message, whole (the channel
    delivers those itself, see ``delivered``); ``deliver(kind, data)`` gets messages in
    sequence order; ``drop(reason, detail)`` counts what is refused or discarded.
    """

    def __init__(
        self,
        budget: ReassemblyBudget,
        owner: int,
        *,
        max_message: int,
        timeout: float,
        deliver: Callable[[int, Buffer], None],
        drop: Callable[[DropReason, str], None],
    ) -> None:
        self.budget = budget
        self.owner = owner
        self.max_message = max_message
        self.timeout = timeout
        self.deliver = deliver
        self.drop = drop
        self.next_deliver = 1
        self.partials: dict[int, _Partial] = {}
        self.ready: dict[int, tuple[int, Buffer, int]] = {}
        """Complete messages waiting for an earlier one: seq -> (kind, data, charge)."""
        self.skip: set[int] = set()
        """Discarded messages ahead of the next one: delivery passes over them."""
        self.abandoned: dict[int, None] = {}
        self.head_since = 0.0
        """Since when the next message has been awaited while later ones wait."""
        self.stall_check: float | None = None
        """No partial message can have stalled before this (None: there are none)."""

    # -- frames -------------------------------------------------------------------------

    def take(
        self, seq: int, kind: int, total: int, offset: int, plain: Buffer, pos: int, length: int,
        now: float,
    ) -> bool:
        """One DATA frame (``plain[pos:pos + length]``); False if it was refused (the
        packet carrying it must not be acknowledged).  Raises ``BadPacket`` for a frame
        no honest sender makes."""
        next_deliver = self.next_deliver
        if seq < next_deliver or seq in self.ready:
            if seq in self.abandoned:
                self.drop(DropReason.REASSEMBLY_TIMEOUT, f"frame of discarded message {seq}")
                return False
            return True  # a retransmission of something complete
        if seq in self.abandoned:
            self.drop(DropReason.REASSEMBLY_TIMEOUT, f"frame of discarded message {seq}")
            return False
        if seq >= next_deliver + SEQ_WINDOW or total > self.max_message:
            raise BadPacket("native message out of range", DropReason.BODY)
        if offset + length > total or (length == 0 and total):
            raise BadPacket("native frame outside its message", DropReason.BODY)
        partial = self.partials.get(seq)
        if partial is None:
            if offset == 0 and length == total:
                return self._whole(seq, kind, plain[pos : pos + length], now)
            size, waiting = charge(total), seq != next_deliver
            if not self.budget.admit(self.owner, size, waiting=waiting):
                self.drop(
                    DropReason.REASSEMBLY_LIMIT,
                    f"message {seq} of {total} bytes does not fit the reassembly caps",
                )
                return False
            partial = self.partials[seq] = _Partial(kind, total, size, waiting, now)
            if self.stall_check is None or len(self.partials) == 1:
                self.stall_check = now + self.timeout
        elif partial.total != total or partial.kind != kind:
            raise BadPacket("native frames disagree on their message", DropReason.BODY)
        buffer = partial.buffer
        frontier = len(buffer)
        if offset < frontier or offset in partial.early:
            return True  # held already (a retransmission)
        if offset != frontier:
            # Early: a copy (a slice of a datagram must not keep all of it alive), taken
            # only while the buffer (with what it may have allocated beyond its length)
            # and the early pieces fit the charge.  The piece at the buffer's end is
            # always taken (below) and early pieces merge into the buffer, giving back
            # their overhead, so a message whose early pieces fill its charge still
            # completes.
            cost = length + PIECE_OVERHEAD
            if frontier + (frontier >> 3) + partial.early_held + cost > partial.charge:
                self.drop(DropReason.REASSEMBLY_LIMIT, f"message {seq}: too many pieces")
                return False
            partial.early[offset] = plain[pos : pos + length]
            partial.early_held += cost
        else:
            buffer += memoryview(plain)[pos : pos + length]
            early = partial.early
            while early:
                piece = early.pop(len(buffer), None)
                if piece is None:
                    break
                buffer += piece
                partial.early_held -= len(piece) + PIECE_OVERHEAD
            if len(buffer) == total:
                del self.partials[seq]
                self._complete(seq, partial, now)
                return True
        partial.touched = now
        return True

    def take_run(
        self, seq: int, kind: int, total: int, offset: int, plain: Buffer, pos: int, length: int,
        count: int, now: float,
    ) -> bool:
        """``count`` contiguous pieces of message ``seq`` at ``offset``, joined in
        ``plain[pos:pos + length]``, held with one append when ``take`` would simply have
        appended each to the message's buffer; False (nothing done) otherwise: the caller
        then gives them to ``take`` one by one."""
        next_deliver = self.next_deliver
        if (
            seq < next_deliver
            or seq >= next_deliver + SEQ_WINDOW
            or total > self.max_message
            or seq in self.ready
            or seq in self.abandoned
        ):
            return False
        partial = self.partials.get(seq)
        if partial is None:
            if offset or (count == 1 and length == total):
                return False
            size, waiting = charge(total), seq != next_deliver
            if not self.budget.admit(self.owner, size, waiting=waiting):
                return False
            partial = self.partials[seq] = _Partial(kind, total, size, waiting, now)
            if self.stall_check is None or len(self.partials) == 1:
                self.stall_check = now + self.timeout
        elif (
            partial.total != total
            or partial.kind != kind
            or partial.early
            or offset != len(partial.buffer)
        ):
            return False
        buffer = partial.buffer
        buffer += memoryview(plain)[pos : pos + length]
        if len(buffer) == total:
            del self.partials[seq]
            self._complete(seq, partial, now)
        else:
            partial.touched = now
        return True

    def _whole(self, seq: int, kind: int, data: Buffer, now: float) -> bool:
        """A complete message in one frame."""
        if seq == self.next_deliver:
            self.deliver(kind, data)
            self.delivered(seq, now)
            return True
        size = len(data) + READY_OVERHEAD
        if not self.budget.admit(self.owner, size, waiting=True):
            self.drop(
                DropReason.REASSEMBLY_LIMIT,
                f"message {seq} waits for {self.next_deliver} and does not fit the caps",
            )
            return False
        self._wait(seq, kind, data, size, now)
        return True

    def _complete(self, seq: int, partial: _Partial, now: float) -> None:
        data = partial.buffer
        if seq == self.next_deliver:
            self.budget.release(self.owner, partial.charge, waiting=partial.waiting)
            self.deliver(partial.kind, data)
            self.delivered(seq, now)
            return
        # Only a waiting message completes out of line; it keeps what its data needs
        # (always below the charge) and gives the rest back.
        size = len(data) + READY_OVERHEAD
        self.budget.release(self.owner, partial.charge - size, waiting=True)
        self._wait(seq, partial.kind, data, size, now)

    def _wait(self, seq: int, kind: int, data: Buffer, size: int, now: float) -> None:
        """Hold a complete message (``size`` reserved as waiting) until its turn."""
        if not self.ready:
            self.head_since = now
        self.ready[seq] = (kind, data, size)

    def delivered(self, seq: int, now: float) -> None:
        """Message ``seq`` (the next in line) was delivered or discarded: deliver the ones
        that waited for it."""
        seq += 1
        ready, skip = self.ready, self.skip
        while True:
            item = ready.pop(seq, None)
            if item is not None:
                kind, data, size = item
                self.budget.release(self.owner, size, waiting=True)
                self.deliver(kind, data)
            elif seq in skip:
                skip.discard(seq)
            else:
                break
            seq += 1
        self.next_deliver = seq
        self.head_since = now

    @property
    def waiting(self) -> bool:
        """Messages wait for the next one in line (so delivering it must go through
        ``delivered``)."""
        return bool(self.ready or self.skip)

    # -- time-outs ----------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When a stalled message or gap is due to be discarded (None: nothing held)."""
        when = self.stall_check if self.partials else None
        if self.ready and self.next_deliver not in self.partials:
            gap = self.head_since + self.timeout
            if when is None or gap < when:
                when = gap
        return when

    def on_timer(self, now: float) -> None:
        # (deadlines are compared as get_timer computes them: with ``now - timeout``
        # instead, rounding could leave a partial due but never discarded, and its timer
        # firing again at the same instant without end)
        timeout = self.timeout
        partials = self.partials
        if self.stall_check is not None and self.stall_check <= now:
            for seq in [s for s, p in partials.items() if p.touched + timeout <= now]:
                partial = partials.pop(seq)
                self.budget.release(self.owner, partial.charge, waiting=partial.waiting)
                self._discard(seq, now, f"message {seq}: {len(partial.buffer)} of "
                              f"{partial.total} bytes, no progress for {self.timeout:g} s")
            touched = [p.touched for p in partials.values()]
            self.stall_check = min(touched) + self.timeout if touched else None
        if self.ready and self.next_deliver not in partials and self.head_since + timeout <= now:
            seq = self.next_deliver
            self._discard(seq, now, f"message {seq} never came; {len(self.ready)} wait for it")

    def _discard(self, seq: int, now: float, detail: str) -> None:
        abandoned = self.abandoned
        abandoned[seq] = None
        if len(abandoned) > MAX_ABANDONED:
            del abandoned[next(iter(abandoned))]
        self.drop(DropReason.REASSEMBLY_TIMEOUT, detail)
        if seq == self.next_deliver:
            self.delivered(seq, now)
        else:
            self.skip.add(seq)

    # -- end of the session -------------------------------------------------------------

    def close(self) -> None:
        """Give back every reservation (the session is over)."""
        release, owner = self.budget.release, self.owner
        for partial in self.partials.values():
            release(owner, partial.charge, waiting=partial.waiting)
        for _, _, size in self.ready.values():
            release(owner, size, waiting=True)
        self.partials.clear()
        self.ready.clear()
        self.skip.clear()
        self.stall_check = None
