"""Salt 3008's local framing (raetsalt.saltbridge.saltframe), Salt's own code as the oracle."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raetsalt.saltbridge.saltframe import (
    MAX_DEPTH,
    FrameError,
    PullReader,
    parse_event,
    parse_request,
    publish_frame,
    pull_frame,
)

salt_event = pytest.importorskip("salt.utils.event")
salt_frame = pytest.importorskip("salt.transport.frame")
salt_payload = pytest.importorskip("salt.payload")

tags = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1,
               max_size=60).filter(lambda t: "\n\n" not in t and "\n" not in t)
values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
datas = st.dictionaries(st.text(max_size=10), values, max_size=6)


@settings(max_examples=200, deadline=None)
@given(tags, datas)
def test_a_subscriber_reads_what_salt_would_publish(tag: str, data: dict) -> None:
    frame = publish_frame(tag, data)
    unpacker = msgpack.Unpacker(raw=True)  # as Salt's PublishClient reads
    unpacker.feed(frame)
    body = next(iter(unpacker))[b"body"]
    assert salt_event.SaltEvent.unpack(body) == (tag, data)


@settings(max_examples=200, deadline=None)
@given(tags, datas, st.integers(1, 7))
def test_events_fired_by_salt_are_read_whatever_the_chunks(tag: str, data: dict,
                                                            chunk: int) -> None:
    wire = salt_frame.frame_msg_ipc(salt_event.SaltEvent.pack(tag, data), raw_body=True) * 2
    reader = PullReader()
    got = []
    for start in range(0, len(wire), chunk):
        got.extend(reader.feed(wire[start:start + chunk]))
    assert got == [(tag, data), (tag, data)] and reader.pending == 0
    assert pull_frame(tag, data) == wire[: len(wire) // 2]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_frame_error(blob: bytes) -> None:
    reader = PullReader(max_frame=1 << 16)
    for tag, data in reader.feed(blob):
        assert isinstance(tag, str) and isinstance(data, dict)
    try:
        parse_request(blob)
    except FrameError:
        pass


def test_bad_frames_are_refused() -> None:
    reader = PullReader(max_frame=100)
    assert reader.feed(struct.pack(">I", 101)) == [] and "at most" in str(reader.error)
    assert reader.feed(pull_frame("late", {})) == []  # nothing after a bad frame
    for framed in ({"head": {}}, [1, 2], {"body": 5}, {"body": b"no tag end"},
                   {"body": b"\n\n\x80"}, {"body": b"\xff\xfe\n\n\x80"},
                   {"body": b"t" * 2000 + b"\n\n\x80"}):
        raw = msgpack.packb(framed, use_bin_type=True)
        reader = PullReader()
        good = pull_frame("before", {"n": 1})
        assert reader.feed(good + struct.pack(">I", len(raw)) + raw) == [("before", {"n": 1})]
        assert isinstance(reader.error, FrameError), framed
    deep: object = 1
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(FrameError, match="nested"):
        parse_event(b"tag\n\n" + msgpack.packb(deep))
    assert parse_event(b"tag\n\n" + msgpack.packb([1])) == ("tag", {"data": [1]})


def test_requests_are_salts_clear_loads() -> None:
    load = {"cmd": "publish", "tgt": "*", "fun": "test.ping", "arg": [], "key": "k"}
    raw = salt_payload.dumps({"enc": "clear", "load": load, "version": 3})
    assert parse_request(raw) == load
    for message in ({"enc": "aes", "load": "x"}, {"enc": "clear", "load": "x"}, [1]):
        with pytest.raises(FrameError):
            parse_request(salt_payload.dumps(message))
