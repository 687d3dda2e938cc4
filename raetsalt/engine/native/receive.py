"""The receiving side of native datagram trains (GRO): a ``Channel``'s ``receive_train``,
with runs of bulk pieces taken at once (moved out of ``engine/native.py``, which holds
the rest of the channel, to keep it under the size limit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from raetsalt.drops import DropReason
from raetsalt.engine import trains
from raetsalt.engine.reassembly import Reassembly
from raetsalt.engine.rekey import KeyRing
from raetsalt.engine.remote import Address, Receive, SessionChannel
from raetsalt.engine.replay import ReplayWindow
from raetsalt.errors import BadPacket

if TYPE_CHECKING:
    from raetsalt.engine.port import RoadPort
    from raetsalt.engine.remote import Remote


class Channel(SessionChannel, Protocol):
    """What the train receive path uses of ``engine.native.Channel`` (which imports this
    module, so it is described here rather than imported: no import circles)."""

    port: RoadPort
    remote: Remote
    keys: KeyRing
    rx_window: ReplayWindow
    inboxes: list[Reassembly]
    ack_ranges: list[list[int]]
    ack_pending: int
    ack_due: bool
    ack_deadline: float | None
    _kernel: trains.Kernel
    _key: bytes
    _rx_nonce: bytes
    _path_answer: bytes

    def _arm(self) -> None: ...

    def _drop_bad(self, exc: BadPacket, address: Address) -> None: ...

    def _opened(self, counter: int, plain: bytearray, now: float) -> None: ...

    def _heard(self, now: float) -> None: ...

    def _on_new_source(self, source: Address, newest: bool, now: float) -> None: ...

    def _forget_below(self, least: int) -> None: ...

    def _record(self, counter: int, ack_eliciting: bool, now: float) -> None: ...

    def _add_range(self, first: int, last: int) -> None: ...

ACK_DELAY = 0.001
"""A lone data packet's ack waits this long for a reply to ride on (two are acked at once)."""


def receive_train(
    ch: Channel, data: memoryview, segment: int, address: Address, now: float, alone: Receive
) -> bool:
    """The datagrams of a received train (``Road.receive_train``): what
    ``receive_untrusted`` does for each, with runs of bulk pieces taken at once.
    ``alone`` (``Road.receive_datagram``) takes each the ordinary path must judge (not
    this session's, a replay, a box that does not open), and all after one that ended
    this session.  True if any datagram was authenticated here (the remote is heard)."""
    window, stats, remote = ch.rx_window, ch.port.stats, ch.remote
    highest = window.highest
    rotating = ch.keys.other() is not None  # some may be under the other key
    out = bytearray(len(data))
    bits = window.bits or bytearray(window.size // 8)  # (allocated by the first mark)
    entries = ch._kernel.open_train(
        ch._key, ch._rx_nonce, remote.uid, data, segment, bits, window.highest, out
    )
    heard = False
    taken = 0  # datagrams of the train dealt with
    for entry in entries:
        what = entry[0]
        if what == trains.RAW:
            ch._arm()
            taken += 1
            alone(bytes(data[entry[1] : entry[1] + entry[2]]), address, now)
            if remote.channel is not ch:  # that datagram ended the session
                for rest in range(taken * segment, len(data), segment):
                    alone(bytes(data[rest : rest + segment]), address, now)
                return heard
            continue
        if what == trains.FORGED and rotating:  # the ordinary path tries both keys
            ch._arm()
            alone(bytes(data[taken * segment : (taken + 1) * segment]), address, now)
            taken += 1
            if remote.channel is not ch:
                return heard
            continue
        if what == trains.FORGED:  # what the road does with it alone, without a 2nd open
            stats["rx"] += 1
            taken += 1
            ch._drop_bad(BadPacket("box does not open", DropReason.DECRYPT), address)
            continue
        if what == trains.RUN:
            stats["rx"] += entry[2]
            taken += entry[2]
            heard = _run(ch, entry, out, address, now) or heard
            continue
        stats["rx"] += 1
        taken += 1
        counter, pos, length = entry[1], entry[2], entry[3]
        try:
            ch._opened(counter, out[pos : pos + length], now)
        except BadPacket as exc:
            ch._drop_bad(exc, address)
        else:
            heard = True
    if heard:
        ch._heard(now)
        if ch._path_answer or address != remote.ha:
            ch._on_new_source(address, window.highest > highest, now)
    ch._arm()
    return heard

def _run(
    ch: Channel, entry: trains.Entry, out: bytearray, address: tuple[str, int], now: float
) -> bool:
    """A ``trains.RUN`` of bulk pieces: one reassembly append when the inbox takes
    them as it would one by one, else one by one.  True if any was authenticated
    and not dropped."""
    _, first, count, least, ack_now, kind, stream, seq, total, offset, pos, length, chunk = (
        entry
    )
    ranges = ch.ack_ranges
    if ranges and ranges[0][0] < least:
        if least > first:  # (no honest sender) one by one forgets differently
            return _pieces(ch, entry, out, address, now)
        ch._forget_below(least)
    if ack_now:
        ch.ack_due = True
        ch.port.want_flush(ch)
    inbox = ch.inboxes[stream]
    if not inbox.take_run(seq, kind, total, offset, out, pos, length, count, now):
        return _pieces(ch, entry, out, address, now)
    _record_run(ch, first, first + count - 1, now)
    return True

def _pieces(
    ch: Channel, entry: trains.Entry, out: bytearray, address: tuple[str, int], now: float
) -> bool:
    """A ``trains.RUN`` taken piece by piece, exactly as the packets one at a time."""
    _, first, count, least, ack_now, kind, stream, seq, total, offset, pos, length, chunk = (
        entry
    )
    if ack_now:
        ch.ack_due = True
        ch.port.want_flush(ch)
    inbox, taken = ch.inboxes[stream], False
    for index in range(count):
        size = chunk if index < count - 1 else length - chunk * index
        ranges = ch.ack_ranges
        if ranges and ranges[0][0] < least:
            ch._forget_below(least)
        try:
            held = inbox.take(
                seq, kind, total, offset + index * chunk, out, pos + index * chunk, size, now
            )
        except BadPacket as exc:
            ch._drop_bad(exc, address)
            continue
        taken = True
        if held:
            ch._record(first + index, True, now)
        else:
            ch.rx_window.mark(first + index)
    return taken

def _record_run(ch: Channel, first: int, last: int, now: float) -> None:
    """``_record(counter, True, now)`` for the counters ``first`` to ``last``."""
    window = ch.rx_window
    for counter in range(first, last + 1):
        window.mark(counter)
    ranges = ch.ack_ranges
    if ranges and ranges[-1][1] + 1 == first:
        ranges[-1][1] = last
    else:
        ch._add_range(first, last)
    if not ch.ack_pending and ch.ack_deadline is None:
        ch.ack_deadline = now + ACK_DELAY
    ch.ack_pending += last - first + 1
    if ch.ack_pending >= 2:
        ch.ack_due = True
        ch.port.want_flush(ch)
