"""The compiled kernel (``raetsalt/_trains.c``) and ``raetsalt.engine.native.frames`` agree.

The C source repeats the few layouts it needs as ``#define``\\s (sizes, frame types, the
magic).  This test reads those lines from the source itself, so it runs with or without
a compiler and catches a change on either side before anything is built: every
``#define`` of a number must be listed below with the ``frames`` value it stands for
(a new one fails until it is), and each must match.  Where the compiled module is
there, its datagrams are also taken apart with ``frames``' structs field by field, so
the order of the fields (which no size can show) is checked too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from raetsalt.engine.native import frames, trains
from raetsalt.engine.native.frames import (
    DATA_HEAD,
    LEAST,
    NONCE,
    PIECE,
    PREFIX,
)

SOURCE = Path(__file__).resolve().parents[3] / "raetsalt" / "_trains.c"

EXPECTED = {
    "PREFIX": PREFIX.size,
    "TAG": frames.TAG,
    "KEY": frames.KEY_SIZE,
    "NONCE_HEAD": NONCE.size - 8,
    "LEAST_SIZE": LEAST.size,
    "DATA_SIZE": DATA_HEAD.size,
    "PIECE_HEAD": PIECE.size,
    "LEAST_FRAME": frames.LEAST_FRAME,
    "DATA_FRAME": frames.DATA_FRAME,
    "ACK_FRAME": frames.ACK_FRAME,
    "ONE_RANGE": frames.ONE_RANGE.size,
    "BATCH_FRAME": frames.BATCH_FRAME,
    "BATCH_HEAD": frames.BATCH_HEAD.size,
    "BATCH_LENGTH": frames.BATCH_LENGTH,
    "ACK_NOW_FRAME": frames.ACK_NOW_FRAME,
    "STREAMS": frames.STREAMS,
    "MAGIC0": frames.MAGIC[0],
    "MAGIC1": frames.MAGIC[1],
    "MAX_DATAGRAM": frames.MAX_DATAGRAM,
    "ABI": trains.ABI,
}

_DEFINE = re.compile(r"^#define\s+([A-Z_][A-Z0-9_]*)\s+(.+?)\s*(?:/\*.*)?$", re.MULTILINE)


def c_constants() -> dict[str, int]:
    """The numeric ``#define``\\s of the C source, with sums of earlier ones evaluated."""
    found: dict[str, int] = {}
    for name, value in _DEFINE.findall(SOURCE.read_text(encoding="utf-8")):
        terms = value.strip("()").split("+")
        total = 0
        for term in (t.strip() for t in terms):
            if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", term):
                total += int(term, 0)
            elif term in found:
                total += found[term]
            else:
                break  # not a number (PY_SSIZE_T_CLEAN and the like)
        else:
            found[name] = total
    return found


def test_every_c_constant_is_the_frames_value() -> None:
    constants = c_constants()
    assert set(constants) == set(EXPECTED), "a #define without a frames counterpart"
    assert constants == EXPECTED


def test_the_reader_sees_the_sources_defines() -> None:
    assert c_constants()["PIECE_HEAD"] == c_constants()["LEAST_SIZE"] + c_constants()["DATA_SIZE"]
    assert frames.OVERHEAD == PREFIX.size + frames.TAG + PIECE.size


@pytest.mark.skipif(trains.COMPILED is None, reason="no compiled kernel here")
def test_a_compiled_piece_reads_back_field_by_field_with_the_frames_structs() -> None:
    kernel = trains.COMPILED
    assert kernel is not None
    key, head = bytes(range(32)), frames.nonce_head(True)
    body = bytes(range(256)) * 4
    chunk = 100
    out = bytearray(frames.OVERHEAD + chunk + 1)
    kernel.seal_pieces(key, head, 0x01020304, 41, 7, 2, frames.BULK, 9, body, 300, chunk, 1,
                       True, out)
    magic, uid, counter = PREFIX.unpack_from(out)
    assert (magic, uid, counter) == (frames.MAGIC, 0x01020304, 42)
    plain = trains.PyKernel().open(key, head, out, counter)
    assert plain is not None
    fields = PIECE.unpack_from(plain)
    assert fields == (frames.LEAST_FRAME, 7, frames.DATA_FRAME, 2, frames.BULK, 9, len(body),
                      300, chunk)
    assert plain[PIECE.size : PIECE.size + chunk] == body[300:400]
    assert plain[PIECE.size + chunk :] == frames.ACK_NOW


@pytest.mark.skipif(trains.COMPILED is None, reason="no compiled kernel here")
def test_a_compiled_lone_message_reads_back_field_by_field_with_the_frames_structs() -> None:
    kernel = trains.COMPILED
    assert kernel is not None
    key, head = bytes(range(32)), frames.nonce_head(False)
    body = b"a request"
    out = kernel.seal_message(key, head, 0x0A0B0C0D, 77, 70, True, 60, 76, 1,
                              frames.EXPRESS, 0x01020304, body, True)
    assert PREFIX.unpack_from(out) == (frames.MAGIC, 0x0A0B0C0D, 77)
    plain = trains.PyKernel().open(key, head, out, 77)
    assert plain is not None
    assert LEAST.unpack_from(plain) == (frames.LEAST_FRAME, 70)
    assert frames.ONE_RANGE.unpack_from(plain, LEAST.size) == (frames.ACK_FRAME, 1, 60, 76)
    at = LEAST.size + frames.ONE_RANGE.size
    assert frames.BATCH_HEAD.unpack_from(plain, at) == (
        frames.BATCH_FRAME, 1, frames.EXPRESS, 0x01020304, 1)
    at += frames.BATCH_HEAD.size
    assert frames.lengths_struct(1).unpack_from(plain, at) == (len(body),)
    at += frames.BATCH_LENGTH
    assert plain[at:] == body + frames.ACK_NOW
