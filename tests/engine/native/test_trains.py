"""The per-datagram kernels of the native profile (``raetsalt.engine.native.trains``).

The compiled kernel (``raetsalt._trains``) and the Python one must give the same bytes and
the same entries for every input, honest or hostile; a train of hostile datagrams may only
be handed back to the ordinary path (RAW) or opened to what its authenticated plaintext
says, never read or written past its buffers (the C kernel is checked against the Python
one, which slices and cannot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import nacl.bindings
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.engine.native import frames, trains

PY = trains.PyKernel()
C = trains.COMPILED
KERNELS = [PY] if C is None else [PY, C]
needs_c = pytest.mark.skipif(C is None, reason="raetsalt._trains was not built (no compiler)")

KEY = bytes(range(32))
NONCE = b"\x01" + bytes(15)
UID = 0x01020304


def _compiler_here() -> bool:
    cc = (sysconfig.get_config_var("CC") or "").split()
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    return bool(cc) and shutil.which(cc[0]) is not None and include.exists()


@pytest.mark.skipif(not _compiler_here(), reason="no C compiler or Python headers here")
def test_the_kernel_is_compiled_where_a_compiler_is() -> None:
    # A build that failed quietly (optional=True) would leave every run on the fallback.
    assert C is not None
    assert trains.KERNEL is C or os.environ.get("RAETSALT_PURE_PYTHON")


def test_the_fallback_is_chosen_by_the_environment() -> None:
    code = "from raetsalt.engine.native import trains; print(trains.KERNEL.name)"
    env = dict(os.environ, RAETSALT_PURE_PYTHON="1")
    forced = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert forced.stdout.strip() == "python", forced.stderr
    env.pop("RAETSALT_PURE_PYTHON")
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert default.stdout.strip() == ("python" if C is None else "c"), default.stderr


def test_a_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module left from an older source (another ABI) must not be bound.
    if C is None:
        pytest.skip("no compiled kernel")
    monkeypatch.setattr(C, "ABI", trains.ABI + 1)
    assert trains._load_compiled() is None


# -- sealing ---------------------------------------------------------------------------------

parts_st = st.lists(st.binary(max_size=300), max_size=5)


@needs_c
@given(
    key=st.binary(min_size=32, max_size=32),
    fuid=st.integers(0, 2**32 - 1),
    counter=st.integers(0, 2**64 - 1),
    parts=parts_st,
)
def test_seal_and_open_are_the_same_in_c_and_python(
    key: bytes, fuid: int, counter: int, parts: list[bytes]
) -> None:
    assert C is not None
    sealed = C.seal(key, NONCE, fuid, counter, parts)
    assert sealed == PY.seal(key, NONCE, fuid, counter, parts)
    for kernel in KERNELS:
        assert kernel.open(key, NONCE, sealed, counter) == b"".join(parts)
        assert kernel.open(key, NONCE, sealed, counter ^ 1) is None
        assert kernel.open(key, NONCE, sealed[:-1], counter) is None
        assert kernel.open(key, NONCE, sealed[:29], counter) is None


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_seal_refuses_what_no_datagram_holds(kernel: trains.Kernel) -> None:
    with pytest.raises(ValueError):
        kernel.seal(KEY, NONCE, UID, 1, [bytes(65535 - 30 + 1)])
    with pytest.raises(ValueError):
        kernel.seal(KEY[:31], NONCE, UID, 1, [b"x"])


@needs_c
@given(
    chunk=st.integers(1, 200),
    count=st.integers(0, 6),
    extra=st.integers(0, 300),
    offset_pieces=st.integers(0, 3),
    ack_now=st.booleans(),
    seq=st.integers(0, 2**32 - 1),
    stream=st.integers(0, 1),
    least=st.integers(0, 2**64 - 1),
)
def test_seal_pieces_is_the_same_in_c_and_python(
    chunk: int, count: int, extra: int, offset_pieces: int, ack_now: bool, seq: int,
    stream: int, least: int,
) -> None:
    assert C is not None
    offset = offset_pieces * chunk
    body = bytes(i & 0xFF for i in range(offset + count * chunk + extra))
    size = count * (trains.OVERHEAD + chunk) + (1 if ack_now else 0)
    ours, theirs = bytearray(size), bytearray(size)
    args = (KEY, NONCE, UID, 10, least, 1, stream, seq, body, offset, chunk, count, ack_now)
    C.seal_pieces(*args, ours)
    PY.seal_pieces(*args, theirs)
    assert ours == theirs
    with pytest.raises(ValueError):  # one byte short of the promised layout
        C.seal_pieces(*args, bytearray(size + 1))


@needs_c
@settings(max_examples=300)
@given(
    bodies=st.lists(st.binary(max_size=400), max_size=12),
    start=st.integers(0, 12),
    room=st.integers(9, 1400),
    budget=st.integers(-3000, 6000),
    extra=st.integers(-100, 3000),
    most=st.integers(0, 8),
    first_seq=st.integers(0, 2**32 - 1 - 20),
    stream=st.integers(0, 1),
    least=st.integers(0, 2**64 - 1),
    counter=st.integers(0, 2**63),
    keep_tail=st.booleans(),
)
def test_seal_batches_is_the_same_in_c_and_python(
    bodies: list[bytes], start: int, room: int, budget: int, extra: int, most: int,
    first_seq: int, stream: int, least: int, counter: int, keep_tail: bool,
) -> None:
    assert C is not None
    start = min(start, len(bodies))
    limit = budget + extra
    args = (KEY, NONCE, UID, counter, least, 1, stream, first_seq, bodies, start, len(bodies),
            room, budget, limit, most, keep_tail)
    ours, theirs = C.seal_batches(*args), PY.seal_batches(*args)
    assert ours == theirs
    made, asking = ours
    # What they framed, in order, each whole and once, as the channel's flush would.
    taken = sum(count for _, count in made)
    assert len(made) <= most
    assert all(count >= 1 for _, count in made)
    spent = counted = 0
    for number, (data, count) in enumerate(made):
        assert spent < limit  # it was allowed to go
        plain = PY.open(KEY, NONCE, data, counter + 1 + number)
        assert plain is not None
        _, got_least, _, _, got_stream, seq, got_count = (
            frames.LEAST.unpack_from(plain) + frames.BATCH_HEAD.unpack_from(plain, 9)
        )
        assert (got_least, got_stream, got_count) == (least, stream, count)
        first = start + sum(c for _, c in made[:number])
        assert seq == first_seq + first
        pos = 9 + frames.BATCH_HEAD.size + 2 * count
        for body in bodies[first : first + count]:
            assert plain[pos : pos + len(body)] == body
            pos += len(body)
        size = len(data) - len(plain[pos:])
        ack_now = budget - spent - size <= 0
        assert plain[pos:] == (frames.ACK_NOW if ack_now else b"")
        counted += ack_now
        assert size - 30 - 9 <= room
        spent += len(data)
    assert asking == counted
    if keep_tail:
        assert start + taken < len(bodies) or not made  # the last body is left
    elif made and taken < len(bodies) - start and len(made) < most and spent < limit:
        # stopped early only at a body too large for a datagram of its own
        assert frames.BATCH_HEAD.size + 2 + len(bodies[start + taken]) > room


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_seal_batches_refuses_bad_arguments(kernel: trains.Kernel) -> None:
    bodies = [b"a", b"b"]
    for start, end, room in [(-1, 2, 100), (0, 3, 100), (2, 1, 100), (0, 2, 8), (0, 2, 65536)]:
        with pytest.raises(ValueError):
            kernel.seal_batches(KEY, NONCE, UID, 1, 1, 1, 0, 1, bodies, start, end, room, 99,
                                99, 4, False)
    with pytest.raises(TypeError):
        kernel.seal_batches(KEY, NONCE, UID, 1, 1, 1, 0, 1, [b"a", bytearray(b"b")], 0, 2,
                            100, 99, 99, 4, False)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_seal_pieces_never_reads_past_the_body(kernel: trains.Kernel) -> None:
    body = bytes(100)
    for offset, count in [(0, 3), (90, 1), (101, 0), (-1, 1)]:
        with pytest.raises(ValueError):
            kernel.seal_pieces(
                KEY, NONCE, UID, 1, 1, 1, 0, 1, body, offset, 40, count, False,
                bytearray(count * (trains.OVERHEAD + 40)) if count >= 0 else bytearray(),
            )


# -- opening trains --------------------------------------------------------------------------

SEGMENT = 96
CHUNK = SEGMENT - trains.OVERHEAD


def _sealed(counter: int, plain: bytes) -> bytes:
    return bytes(PY.seal(KEY, NONCE, UID, counter, [plain]))


def _piece(counter: int, least: int, seq: int, total: int, offset: int, ack_now: bool) -> bytes:
    length = CHUNK - (1 if ack_now else 0)
    out = bytearray(trains.OVERHEAD + length + (1 if ack_now else 0))
    body = bytes(i & 0xFF for i in range(total))
    PY.seal_pieces(KEY, NONCE, UID, counter - 1, least, 1, 0, seq, body, offset, length, 1,
                   ack_now, out)
    return bytes(out)


def _fit(data: bytes) -> bytes:
    """A datagram of exactly SEGMENT bytes (GRO makes every one but the last that long)."""
    return data[:SEGMENT].ljust(SEGMENT, b"\0")


def _run(counter: int, seq: int, first: int, count: int, ack_now: bool) -> list[bytes]:
    """``count`` honest consecutive pieces of message ``seq`` (the last may ask for an ack)."""
    return [
        _piece(counter + i, 1, seq, 10 * CHUNK, (first + i) * CHUNK, ack_now and i == count - 1)
        for i in range(min(count, 10 - first))
    ]


def _batches(counter: int, least: int, stream: int, seq: int, shapes: list[tuple[int, int]],
             ack_now: bool) -> list[bytes]:
    """Honest datagrams of whole messages, one per shape (messages, first length), with
    consecutive counters and seqs, each exactly SEGMENT bytes (the last may ask for an
    ack)."""
    out = []
    for index, (count, first) in enumerate(shapes):
        asks = ack_now and index == len(shapes) - 1
        room = SEGMENT - 30 - 9 - frames.BATCH_HEAD.size - 2 * count - (1 if asks else 0)
        lengths = [min(first, room)] + [0] * (count - 1)
        lengths[-1] += room - sum(lengths)
        bodies = [bytes([seq + n & 0xFF]) * length for n, length in enumerate(lengths)]
        head = frames.BATCH_HEAD.pack(4, 1, stream, seq & 0xFFFFFFFF, count)
        plain = (frames.LEAST.pack(3, least) + head
                 + frames.lengths_struct(count).pack(*lengths) + b"".join(bodies)
                 + (frames.ACK_NOW if asks else b""))
        out.append(_sealed(counter + index, plain))
        seq += count
    return out


def _authenticated(counter: int, plain: bytes) -> list[bytes]:
    return [_sealed(counter, plain[: SEGMENT - 30].ljust(SEGMENT - 30, b"\0"))]


datagrams_st = st.one_of(
    # honest pieces of one message: a run when the counters follow each other
    st.builds(_run, st.integers(1, 40), st.integers(0, 2), st.integers(0, 9), st.integers(1, 5),
              st.booleans()),
    # authenticated plaintext of any shape: a piece head whose length overruns the
    # datagram or falls short of it, streams and offsets out of range, other frames
    st.builds(
        _authenticated,
        st.integers(1, 40),
        st.builds(
            lambda head, tail: head + tail,
            st.builds(
                lambda least, kind, stream, seq, total, offset, length: trains.PIECE.pack(
                    3, least, 1, kind, stream, seq, total, offset, length
                ),
                st.integers(0, 50), st.integers(0, 255), st.integers(0, 3),
                st.integers(0, 3), st.integers(0, 2**32 - 1) | st.integers(0, 10 * CHUNK),
                st.integers(0, 2**32 - 1) | st.integers(0, 10 * CHUNK),
                st.integers(0, 65535) | st.integers(CHUNK - 2, CHUNK + 1),
            ) | st.binary(max_size=30),
            st.binary(max_size=SEGMENT) | st.sampled_from([b"", b"\x05", b"\x05\x05"]),
        ),
    ),
    # honest datagrams of whole messages: one entry when counters and seqs follow
    st.builds(_batches, st.integers(1, 40), st.integers(0, 45), st.integers(0, 1),
              st.integers(0, 3) | st.just(2**32 - 2),
              st.lists(st.tuples(st.integers(1, 4), st.integers(0, 40)), min_size=1, max_size=4),
              st.booleans()),
    # authenticated LEAST + BATCH of any shape: counts and lengths that do not add up,
    # streams out of range, a least above the counter, seqs that would wrap
    st.builds(
        _authenticated,
        st.integers(1, 40),
        st.builds(
            lambda least, stream, seq, count, tail: frames.LEAST.pack(3, least)
            + frames.BATCH_HEAD.pack(4, 1, stream, seq, count) + tail,
            st.integers(0, 50), st.integers(0, 3), st.integers(0, 3) | st.just(2**32 - 1),
            st.integers(0, 30), st.binary(max_size=SEGMENT),
        ),
    ),
    # a bad tag, a wrong uid, not native, too short for a box
    st.builds(lambda c, at: [_flip(_piece(c, 1, 0, 10 * CHUNK, 0, False), at)],
              st.integers(1, 40), st.integers(0, SEGMENT * 8 - 1)),
    st.builds(lambda c: [b"\xf5\x01\0\0\0\x09" + _piece(c, 1, 0, 10 * CHUNK, 0, False)[6:]],
              st.integers(1, 40)),
    st.binary(min_size=0, max_size=SEGMENT).map(lambda data: [data]),
)


def _flip(data: bytes, bit: int) -> bytes:
    buf = bytearray(data)
    buf[bit // 8 % len(buf)] ^= 1 << (bit % 8)
    return bytes(buf)


@st.composite
def train_st(draw: st.DrawFn) -> bytes:
    groups = draw(st.lists(datagrams_st, min_size=1, max_size=8))
    datagrams = [_fit(d) for group in groups for d in group]
    last = draw(st.integers(1, SEGMENT))  # the last datagram of a GRO train may be shorter
    return b"".join(datagrams)[: (len(datagrams) - 1) * SEGMENT + last]


@needs_c
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=train_st(),
    bits=st.binary(min_size=8, max_size=8).map(bytearray),
    highest=st.integers(0, 80) | st.integers(2**64 - 100, 2**64 - 1),
)
def test_open_train_is_the_same_in_c_and_python_whatever_arrives(
    data: bytes, bits: bytearray, highest: int
) -> None:
    assert C is not None
    ours, theirs = bytearray(len(data)), bytearray(len(data))
    entries = C.open_train(KEY, NONCE, UID, data, SEGMENT, bits, highest, ours)
    assert entries == PY.open_train(KEY, NONCE, UID, data, SEGMENT, bits, highest, theirs)
    assert ours == theirs
    _check_entries(entries, data, ours)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(data=train_st())
def test_open_train_accounts_for_every_datagram(data: bytes) -> None:
    out = bytearray(len(data))
    entries = trains.KERNEL.open_train(KEY, NONCE, UID, data, SEGMENT, bytearray(8), 0, out)
    _check_entries(entries, data, out)


def _check_entries(entries: list[trains.Entry], data: bytes, out: bytearray) -> None:
    """Every datagram is in exactly one entry, in order; what an entry points at lies
    inside its buffer; a RUN's data is what its pieces' plaintexts carry."""
    datagrams, written = 0, 0
    for entry in entries:
        if entry[0] == trains.FORGED:
            assert PY.open(KEY, NONCE, data[datagrams * SEGMENT : (datagrams + 1) * SEGMENT],
                           entry[1]) is None
            datagrams += 1
        elif entry[0] == trains.RAW:
            start, length = entry[1], entry[2]
            assert start == datagrams * SEGMENT and 0 < length <= SEGMENT
            assert start + length <= len(data)
            datagrams += 1
        elif entry[0] == trains.PLAIN:
            pos, length = entry[2], entry[3]
            assert pos == written and pos + length <= len(out)
            plain = PY.open(KEY, NONCE, data[datagrams * SEGMENT : (datagrams + 1) * SEGMENT],
                            entry[1])
            assert plain == out[pos : pos + length]
            written += length
            datagrams += 1
        elif entry[0] == trains.MESSAGES:
            count, pos, lengths, per = entry[2], entry[8], entry[9], entry[10]
            assert count == len(per) >= 1 and sum(per) == len(lengths) and pos == written
            assert pos + sum(lengths) <= len(out) and min(per) >= 1
            assert entry[7] + len(lengths) <= 2**32 - 1 and entry[3] <= entry[1]
            written += sum(lengths)
            datagrams += count
        else:
            count, pos, length = entry[2], entry[10], entry[11]
            assert entry[0] == trains.RUN and count >= 1 and pos == written
            assert length <= count * entry[12] and entry[9] + length <= entry[8]
            written += length
            datagrams += count
    assert datagrams == -(-len(data) // SEGMENT)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_datagrams_of_whole_messages_join_while_counters_and_seqs_follow(
    kernel: trains.Kernel,
) -> None:
    train = b"".join(_batches(5, 2, 0, 7, [(1, 10), (2, 5), (1, 0)], True)
                     + _batches(8, 2, 0, 20, [(3, 1)], False))
    out = bytearray(len(train))
    entries = kernel.open_train(KEY, NONCE, UID, train, SEGMENT, bytearray(8), 4, out)
    room = SEGMENT - 30 - 18
    assert entries == [
        (trains.MESSAGES, 5, 3, 2, 1, 1, 0, 7, 0, [room - 2, 5, room - 4 - 5, room - 3],
         [1, 2, 1]),
        (trains.MESSAGES, 8, 1, 2, 0, 1, 0, 20, 3 * room - 9, [1, 0, room - 6 - 1], [3]),
    ]
    assert out[:room - 2] == bytes([7]) * (room - 2)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_a_run_joins_consecutive_pieces(kernel: trains.Kernel) -> None:
    total = 10 * CHUNK
    train = b"".join(_piece(5 + i, 1, 7, total, i * CHUNK, False) for i in range(4))
    out = bytearray(len(train))
    entries = kernel.open_train(KEY, NONCE, UID, train, SEGMENT, bytearray(8), 4, out)
    body = bytes(i & 0xFF for i in range(total))
    # (RUN, first counter, count, least, ack_now, kind, stream, seq, total, offset, pos,
    #  length, chunk)
    assert entries == [(trains.RUN, 5, 4, 1, 0, 1, 0, 7, total, 0, 0, 4 * CHUNK, CHUNK)]
    assert out[: 4 * CHUNK] == body[: 4 * CHUNK]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_replayed_and_falling_counters_go_to_the_ordinary_path(kernel: trains.Kernel) -> None:
    total = 10 * CHUNK
    pieces = [_piece(c, 1, 0, total, i * CHUNK, False) for i, c in enumerate([9, 10, 10, 3, 2])]
    bits = bytearray(8)
    bits[0] = 1 << 2  # counter 2 was accepted before
    out = bytearray(SEGMENT * len(pieces))
    entries = kernel.open_train(KEY, NONCE, UID, b"".join(pieces), SEGMENT, bits, 8, out)
    assert [e[0] for e in entries] == [trains.RUN, trains.RAW, trains.RAW, trains.RAW]
    assert entries[0][2] == 2  # counters 9 and 10; the second 10, 3 (below 10) and 2 left


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_open_train_refuses_impossible_arguments(kernel: trains.Kernel) -> None:
    data = bytes(SEGMENT * 2)
    for segment, bits, out in [
        (0, bytearray(8), bytearray(len(data))),
        (70000, bytearray(8), bytearray(len(data))),
        (SEGMENT, bytearray(6), bytearray(len(data))),  # not a power of two of bits
        (SEGMENT, bytearray(8), bytearray(len(data) - 1)),  # no room for the plaintexts
    ]:
        with pytest.raises(ValueError):
            kernel.open_train(KEY, NONCE, UID, data, segment, bits, 0, out)


def test_libsodium_is_the_one_pynacl_uses() -> None:
    # The compiled kernel calls PyNaCl's libsodium through pointers: its boxes are
    # PyNaCl's.
    plain = b"frames"
    sealed = trains.KERNEL.seal(KEY, NONCE, UID, 3, [plain])
    nonce = NONCE + (3).to_bytes(8, "big")
    assert nacl.bindings.crypto_box_open_easy_afternm(bytes(sealed[14:]), nonce, KEY) == plain
