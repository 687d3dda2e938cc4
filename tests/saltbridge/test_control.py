"""Zygote control messages and worker frames."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.errors import BadPacket
from raetsalt.saltbridge import control


def test_message_with_body_and_descriptor() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_fd, write_fd = os.pipe()
    try:
        body = {"pillar": {"blob": b"x" * 300_000, "n": 1}}
        control.send(left, {"op": "job", "jid": "1"}, body, (write_fd,))
        message = control.receive(right)
        assert message is not None
        header, got, fds = message
        assert header == {"op": "job", "jid": "1", "body": True} and got == body
        assert len(fds) == 1
        os.write(fds[0], b"ok")
        os.close(fds[0])
        assert os.read(read_fd, 2) == b"ok"
        left.close()
        assert control.receive(right) is None  # end of stream
    finally:
        for fd in (read_fd, write_fd):
            os.close(fd)
        right.close()


def test_malformed_messages_are_bad_packets() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with left, right:
        left.send(b"\xc1")  # not msgpack
        with pytest.raises(BadPacket):
            control.receive(right)
        left.send(b"\x93\x01\x02\x03")  # not a mapping
        with pytest.raises(BadPacket):
            control.receive(right)
        left.send(b"\x81\xa4body\xc3")  # promises a body, sends no descriptor
        with pytest.raises(BadPacket):
            control.receive(right)


@given(st.lists(st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1)),
                max_size=5),
       st.integers(min_value=1, max_value=7))
def test_frames_survive_any_fragmentation(values: list[dict[str, int]], step: int) -> None:
    stream = b"".join(control.encode_frame(v) for v in values)
    reader = control.FrameReader()
    got = []
    for start in range(0, len(stream), step):
        got.extend(reader.feed(stream[start:start + step]))
    assert got == values


def test_oversized_frame_is_refused_before_it_is_buffered() -> None:
    with pytest.raises(BadPacket, match="frame of"):
        control.FrameReader().feed((control.MAX_FRAME + 1).to_bytes(4, "big"))
