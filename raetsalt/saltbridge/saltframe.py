"""Salt 3008's local framing, as its clients on the master's host speak it (pure).

* The master's event bus: a subscriber of ``master_event_pub.ipc`` reads a stream of
  msgpack maps ``{"head": {}, "body": EVENT}``; a publisher writes to
  ``master_event_pull.ipc`` the same map preceded by its length (4 bytes, big-endian).
  ``EVENT`` is bytes: the tag, ``"\\n\\n"``, then the msgpack of the event's data.
* The request channel (ZeroMQ): a request is the msgpack of ``{"enc": "clear", "load":
  LOAD, "version": 3}``; the answer is one msgpack value.

Everything decoded here comes from a local process that may be hostile: frames are
bounded (``MAX_FRAME``), nesting is bounded (``MAX_DEPTH``), and a malformed frame
raises ``FrameError`` (the caller closes that connection and counts it).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import msgpack

TAGEND = b"\n\n"
MAX_FRAME = 16 << 20
"""Bytes of one frame (as the lane's message limit)."""
MAX_DEPTH = 32
MAX_TAG = 1024
"""Characters of a tag (longer tags are refused, not trimmed)."""


class FrameError(ValueError):
    """A frame that is not Salt's, too big, or too deep."""


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > limit:
                raise FrameError(f"nested more than {limit} deep")
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


def _unpack(raw: bytes) -> Any:
    try:
        value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise FrameError(f"not msgpack: {type(exc).__name__}") from None
    _depth(value)
    return value


def _pack(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True, default=str))


def event_body(tag: str, data: Mapping[str, Any]) -> bytes:
    """An event as Salt's ``SaltEvent.pack`` makes it."""
    return tag.encode() + TAGEND + _pack(dict(data))


def publish_frame(tag: str, data: Mapping[str, Any]) -> bytes:
    """What a subscriber of ``master_event_pub.ipc`` reads for one event."""
    return _pack({"head": {}, "body": event_body(tag, data)})


def pull_frame(tag: str, data: Mapping[str, Any]) -> bytes:
    """What Salt's ``fire_event`` writes to ``master_event_pull.ipc`` (for tests)."""
    framed = _pack({"head": {}, "body": event_body(tag, data)})
    return struct.pack(">I", len(framed)) + framed


def parse_event(body: Any) -> tuple[str, dict[str, Any]]:
    """``(tag, data)`` of an event body; non-map data is wrapped as ``{"data": value}``."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogateescape")
    if not isinstance(body, bytes):
        raise FrameError("the event is not bytes")
    raw_tag, sep, raw_data = body.partition(TAGEND)
    if not sep:
        raise FrameError("no tag end")
    try:
        tag = raw_tag.decode()
    except UnicodeDecodeError:
        raise FrameError("the tag is not UTF-8") from None
    if not tag or len(tag) > MAX_TAG:
        raise FrameError("empty or over-long tag")
    data = _unpack(raw_data)
    return tag, data if isinstance(data, dict) else {"data": data}


class PullReader:
    """Length-prefixed frames from one ``master_event_pull.ipc`` connection."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self.error: FrameError | None = None
        """The first bad frame; nothing after it is read (the caller disconnects)."""
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        """The events completed by ``data`` before any bad frame (then ``error`` is set)."""
        out: list[tuple[str, dict[str, Any]]] = []
        if self.error is not None:
            return out
        self._buf += data
        try:
            while len(self._buf) >= 4:
                (length,) = struct.unpack(">I", self._buf[:4])
                if length > self.max_frame:
                    raise FrameError(f"a frame of {length} bytes (at most {self.max_frame})")
                if len(self._buf) < 4 + length:
                    break
                framed = _unpack(bytes(self._buf[4:4 + length]))
                del self._buf[:4 + length]
                if not isinstance(framed, dict) or "body" not in framed:
                    raise FrameError("not a {head, body} map")
                out.append(parse_event(framed["body"]))
        except FrameError as exc:
            self.error = exc
            self._buf.clear()
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame."""
        return len(self._buf)


def parse_request(raw: bytes) -> dict[str, Any]:
    """The load of a request-channel message; only ``enc: clear`` is served."""
    message = _unpack(raw)
    if not isinstance(message, dict):
        raise FrameError("the request is not a map")
    if message.get("enc") != "clear":
        raise FrameError("only clear requests are served locally")
    load = message.get("load")
    if not isinstance(load, dict):
        raise FrameError("the request has no load map")
    return load


def reply(value: Any) -> bytes:
    """An answer on the request channel."""
    return _pack(value)
