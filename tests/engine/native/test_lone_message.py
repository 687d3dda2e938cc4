"""The datagram of a lone message, framed and taken apart in one kernel call.

``trains.seal_message`` / ``open_message`` (compiled and Python twins) do for a lone
request or reply what the channel's flush loop and the receiver's frame parser do for
any packet.  Checked here: the twins agree byte for byte and entry for entry, whatever
the frames; the receiver does the same with a packet taken apart as with its frames; and
a whole session, lossy and reordered, sends the same plaintexts and delivers the same
messages with the one-call path as without it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.drops import DropReason
from raetsalt.engine.events import MessageReceived
from raetsalt.engine.native import frames, trains
from raetsalt.engine.native.channel import Channel
from raetsalt.engine.native.receive import Receiver
from raetsalt.engine.native.scheduler import Scheduler
from raetsalt.engine.reassembly import Reassembly, ReassemblyBudget
from raetsalt.errors import BadPacket
from raetsalt.testing.fakenet import Conditions
from raetsalt.testing.pair import Peer, road_pair

PY = trains.PyKernel()
C = trains.COMPILED
needs_c = pytest.mark.skipif(C is None, reason="raetsalt._trains was not built (no compiler)")
KEY = bytes(range(32))
NONCE = frames.nonce_head(True)
U64 = st.integers(0, 2**64 - 1)

# -- the twins ---------------------------------------------------------------------------

message_args = st.tuples(
    st.integers(0, 2**32 - 1),  # fuid
    U64,  # counter
    U64,  # least
    st.booleans(),  # with_ack
    U64,
    U64,  # ack range
    st.integers(0, 255),  # kind
    st.integers(0, frames.STREAMS - 1),
    st.integers(0, 2**32 - 1),  # seq
    st.binary(max_size=600),
    st.booleans(),  # ack_now
)


@needs_c
@settings(deadline=None)
@given(args=message_args)
def test_seal_message_is_the_same_in_c_and_python_and_reads_back(args: tuple[Any, ...]) -> None:
    assert C is not None
    fuid, counter, least, with_ack, first, last, kind, stream, seq, body, ack_now = args
    sealed = C.seal_message(KEY, NONCE, *args)
    assert sealed == PY.seal_message(KEY, NONCE, *args)
    expected = (least, first if with_ack else None, last if with_ack else None, kind, stream,
                seq)
    for kernel in (PY, C):
        opened = kernel.open_message(KEY, NONCE, sealed, counter)
        assert isinstance(opened, tuple)
        plain, *fields, at, length, asked = opened
        assert tuple(fields) == expected
        assert (plain[at : at + length], asked) == (body, ack_now)
        assert kernel.open_message(KEY, NONCE, sealed, counter ^ 1) is None


@pytest.mark.parametrize("kernel", [PY] if C is None else [PY, C], ids=lambda k: k.name)
def test_seal_message_refuses_what_no_frame_holds(kernel: trains.Kernel) -> None:
    good: list[Any] = [7, 1, 0, False, 0, 0, 1, 0, 5, b"x", False]
    for at, bad in ((0, 2**32), (6, 256), (6, -1), (7, frames.STREAMS), (8, 2**32),
                    (9, bytes(0x10000))):
        args = list(good)
        args[at] = bad
        with pytest.raises(ValueError):
            kernel.seal_message(KEY, NONCE, *args)
    with pytest.raises(ValueError):  # fits a frame, not a datagram
        kernel.seal_message(KEY, NONCE, *good[:9], bytes(65535 - 30 - 20), True)


frame_st = st.one_of(
    st.builds(lambda n: frames.LEAST.pack(frames.LEAST_FRAME, n), U64),
    st.builds(lambda a, b: frames.ONE_RANGE.pack(frames.ACK_FRAME, 1, a, b), U64, U64),
    st.builds(  # an ACK of another range count, or one whose count lies
        lambda count, ranges: frames.ACK_HEAD.pack(frames.ACK_FRAME, count)
        + b"".join(frames.RANGE.pack(a, b) for a, b in ranges),
        st.integers(0, 3), st.lists(st.tuples(U64, U64), max_size=3),
    ),
    st.builds(  # a BATCH frame: one message or more, lengths true or not
        lambda kind, stream, seq, count, lengths, tail: frames.BATCH_HEAD.pack(
            frames.BATCH_FRAME, kind, stream, seq, count)
        + b"".join(struct.pack("!H", n) for n in lengths) + tail,
        st.integers(0, 255), st.integers(0, 3), st.integers(0, 2**32 - 1),
        st.integers(0, 3), st.lists(st.integers(0, 40), max_size=3), st.binary(max_size=40),
    ),
    st.builds(
        lambda body: frames.BATCH_HEAD.pack(frames.BATCH_FRAME, 1, 0, 3, 1)
        + struct.pack("!H", len(body)) + body,
        st.binary(max_size=60),
    ),
    st.just(frames.ACK_NOW),
    st.builds(lambda ms: frames.HINT.pack(frames.HINT_FRAME, ms), st.integers(0, 2**32 - 1)),
    st.binary(min_size=1, max_size=12),
)
plain_st = st.lists(frame_st, max_size=5).map(b"".join)


@needs_c
@settings(max_examples=500, deadline=None)
@given(plain=plain_st)
def test_open_message_is_the_same_in_c_and_python_whatever_the_frames(plain: bytes) -> None:
    assert C is not None
    sealed = C.seal(KEY, NONCE, 9, 33, [plain])
    ours = C.open_message(KEY, NONCE, sealed, 33)
    assert ours == PY.open_message(KEY, NONCE, sealed, 33)
    if not isinstance(ours, tuple):
        assert ours == plain  # handed back whole, for the ordinary parser


# -- the receiver ------------------------------------------------------------------------


class Recorded:
    """A receiver whose calls out are written down, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        budget = ReassemblyBudget(1 << 20, 1 << 22, 1 << 16)
        inboxes = [
            Reassembly(budget, 1, max_message=1 << 16, timeout=5.0,
                       deliver=lambda kind, body: self.calls.append(("deliver", kind,
                                                                     bytes(body))),
                       drop=lambda reason, detail: self.calls.append(("drop", reason)))
            for _ in range(frames.STREAMS)
        ]
        self.receiver = Receiver(
            inboxes,
            on_ack=lambda ranges, now: self.calls.append(("ack", list(ranges))),
            on_control=self._control,
            deliver=lambda kind, body: self.calls.append(("deliver", kind, bytes(body))),
            want_flush=lambda: self.calls.append(("flush",)),
        )

    def _control(self, kind: int, plain: bytearray, pos: int, now: float) -> int:
        self.calls.append(("control", kind, pos))
        if kind != frames.HINT_FRAME:
            raise BadPacket("not in this test", DropReason.BODY)
        return pos + frames.HINT.size

    def state(self) -> tuple[Any, ...]:
        r = self.receiver
        return (r.ack_ranges, r.ack_pending, r.ack_due, r.ack_deadline, r.probed,
                r.window.highest, [i.next_deliver for i in r.inboxes])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packets=st.lists(plain_st, min_size=1, max_size=8))
def test_the_receiver_takes_a_packet_taken_apart_as_it_takes_its_frames(
    packets: list[bytes],
) -> None:
    apart, whole = Recorded(), Recorded()
    for counter, plain in enumerate(packets, start=1):
        now = counter / 1000
        message = trains._message(bytearray(plain))
        outcomes = []
        for side, take_apart in ((apart, True), (whole, False)):
            try:
                if take_apart and isinstance(message, tuple):
                    side.receiver.take_message(counter, message, now)
                else:
                    side.receiver.take_packet(counter, bytearray(plain), now)
                outcomes.append("taken")
            except BadPacket as exc:
                outcomes.append(exc.trigger)
        assert outcomes[0] == outcomes[1]
        assert apart.calls == whole.calls
        assert apart.state() == whole.state()


# -- a whole session ---------------------------------------------------------------------


class Recording:
    """A channel's kernel that writes down every plaintext it seals, by counter."""

    def __init__(self, kernel: trains.Kernel, key: bytes, nonce: bytes, log: list[Any],
                 side: str, one_call: bool) -> None:
        self._kernel, self._key, self._nonce = kernel, key, nonce
        self._log, self._side, self._one_call = log, side, one_call
        self.name = kernel.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)

    def _note(self, data: bytearray, counter: int) -> bytearray:
        self._log.append((self._side, counter, self._kernel.open(self._key, self._nonce,
                                                                  data, counter)))
        return data

    def seal(self, key: bytes, nonce: bytes, fuid: int, counter: int, parts: Any) -> bytearray:
        return self._note(self._kernel.seal(key, nonce, fuid, counter, parts), counter)

    def seal_message(self, key: bytes, nonce: bytes, fuid: int, counter: int,
                     *rest: Any) -> bytearray:
        return self._note(self._kernel.seal_message(key, nonce, fuid, counter, *rest), counter)

    def open_message(self, key: bytes, nonce: bytes, data: Any, counter: int) -> Any:
        if self._one_call:
            return self._kernel.open_message(key, nonce, data, counter)
        return self._kernel.open(key, nonce, data, counter)  # the ordinary parser's


def _arrived(peer: Peer, body: dict[str, Any]) -> Callable[[], bool]:
    return lambda: any(e.body == body for e in peer.of(MessageReceived))


def _session(
    one_call: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], list[Any], list[Any]]:
    """Requests and replies of every size class over a lossy, reordering path: every
    plaintext sealed, every message received, and the senders' state at the end (the
    congestion controller's, the pacer's bucket included), by side."""
    with monkeypatch.context() as patch:
        if not one_call:
            patch.setattr(Scheduler, "single", lambda self: None)
        pair = road_pair(Conditions(loss=0.1, jitter=0.002, latency=0.001), seed=5)
        assert pair.connect()
        log: list[Any] = []
        for side in ("main", "minion"):
            channel = pair.channel(side)
            assert isinstance(channel, Channel)
            channel._kernel = Recording(  # type: ignore[assignment]
                channel._kernel, channel._key, channel._tx_nonce, log, side, one_call)
        sizes = [10, 300, 3000, 40_000]
        main, minion = pair.main, pair.minion
        for index in range(40):  # requests answered as they arrive, and some traffic aside
            body = {"n": index, "pad": "x" * sizes[index % len(sizes)]}
            minion.road.send_message("main", body, pair.net.now)
            if index % 5 == 0:
                main.road.send_message("minion", {"aside": index}, pair.net.now)
            if index % 8 == 0:  # a flight that fills the window: its last message asks
                for _ in range(1 + index):
                    minion.road.send_message("main", {"fill": "y" * 1200}, pair.net.now)
            assert pair.until(_arrived(main, body))
            main.road.send_message("minion", {"reply": index}, pair.net.now)
            assert pair.until(_arrived(minion, {"reply": index}))
        pair.net.run_until(lambda: False, timeout=1.0)  # the last acks
        received = [(e.body, side) for side in ("main", "minion")
                    for e in getattr(pair, side).of(MessageReceived)]
        state = [{name: getattr(pair.channel(side).cc, name)
                  for name in type(pair.channel(side).cc).__slots__}
                 for side in ("main", "minion")]
        return log, received, state


def test_a_session_sends_and_delivers_the_same_with_the_one_call_path_as_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast_log, fast_received, fast_state = _session(True, monkeypatch)
    slow_log, slow_received, slow_state = _session(False, monkeypatch)
    assert fast_received == slow_received
    assert fast_state == slow_state
    assert len(fast_log) > 200
    assert fast_log == slow_log
    # ... and messages went alone with their acks (each side the other's)
    lone = [trains._message(bytearray(p)) for _, _, p in fast_log]
    assert sum(isinstance(m, tuple) and m[2] is not None and m[4] is not None
               for m in lone) > 20
    assert sum(isinstance(m, tuple) and m[4] is not None and m[9] for m in lone) > 5
