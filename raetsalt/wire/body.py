"""Body serialisation (docs/raet-wire.md §4.1).

* JSON (bk 1): UTF-8, compact separators, ASCII escapes as Python's ``json.dumps``
  writes them by default (what raet sends); the value must be a JSON object, and an
  empty object travels as an empty body.  Decoded objects are plain dicts, which keep
  the key order of the wire.
* msgpack (bk 3): a map; packed with the msgpack >= 1.0 defaults (str as UTF-8 str,
  bytes as bin).  raet 0.6.8 cannot use this kind at all with msgpack >= 1.0, so it
  only matters between raetsalt peers.
* raw (bk 2): the bytes as given (the allow handshake's fixed layouts).
* nada (bk 0): no body.

Drop trigger for everything here: ``DropReason.BODY``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgpack

from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError
from raetsalt.wire.constants import MAX_BODY_DEPTH, MAX_BODY_SIZE
from raetsalt.wire.enums import BodyKind

__all__ = ["encode_body", "encode_message", "decode_body_untrusted"]

# Enum members as plain module globals: cheaper to look up on every body than the class
# attribute.
_JSON, _RAW, _MSGPACK, _NADA = BodyKind.JSON, BodyKind.RAW, BodyKind.MSGPACK, BodyKind.NADA

# allow_nan=False: NaN and Infinity are not JSON, and our decoder refuses them.
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def encode_body(kind: BodyKind, value: Any) -> bytes:
    """Serialise ``value`` as a body of ``kind``.

    JSON and msgpack take a mapping (an empty one gives ``b""``); raw takes bytes;
    nada takes ``None`` or an empty mapping and gives ``b""``.  Raises ``LocalError``
    for anything else (including values JSON cannot represent).
    """
    if kind == _MSGPACK:  # the native profile's kind first: it is the hot path
        if type(value) is not dict and not isinstance(value, Mapping):
            raise LocalError(f"a msgpack body must be a mapping, not {type(value).__name__}")
        if not value:
            return b""
        try:
            return msgpack.packb(value)  # type: ignore[no-any-return,unused-ignore]
        except (TypeError, ValueError, OverflowError) as exc:
            raise LocalError(f"body is not msgpack serialisable: {exc}") from exc
    if kind == _JSON:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise LocalError(f"a JSON body must be a mapping, not {type(value).__name__}")
        if not value:
            return b""
        try:
            return _JSON_ENCODER.encode(value).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise LocalError(f"body is not JSON serialisable: {exc}") from exc
    if kind == _RAW:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise LocalError(f"a raw body must be bytes, not {type(value).__name__}")
        return bytes(value)
    if kind == _NADA:
        if value is None or (isinstance(value, Mapping) and not value):
            return b""
        raise LocalError("a nada body carries no value")
    raise LocalError(f"unknown body kind {kind!r}")


def encode_message(kind: BodyKind, body: Mapping[str, Any], max_size: int) -> bytes:
    """A message body (a mapping) encoded as ``kind``, at most ``max_size`` bytes; raises
    ``LocalError`` for anything else, whatever the encoder's complaint."""
    if type(body) is not dict:
        if not isinstance(body, Mapping):
            raise LocalError("a message body must be a mapping")
        body = dict(body)
    try:
        encoded = encode_body(kind, body)
    except Exception as exc:  # noqa: BLE001 - any encoder failure is the caller's
        raise LocalError(f"message body cannot be encoded: {exc}") from exc
    if len(encoded) > max_size:
        raise LocalError(f"message body of {len(encoded)} bytes exceeds max_message_size")
    return encoded


def nests_deeper_than(value: Any, limit: int) -> bool:
    """Lists/maps in ``value`` nest deeper than ``limit`` (an iterative walk, so a
    hostile nesting cannot hit Python's recursion limit here)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values() if _is_container(child))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item if _is_container(child))
    return False


_CONTAINERS = (dict, list)


def _flat(value: dict[Any, Any]) -> bool:
    """No value of the map is a container (most bodies): its depth is 1, nothing to count."""
    for item in value.values():
        if type(item) in _CONTAINERS:
            return False
    return True


def _is_container(value: Any) -> bool:
    return isinstance(value, dict | list | tuple)


# Every msgpack map or array starts with one of these bytes (fixmap, fixarray, array
# 16/32, map 16/32), so their count bounds the number of containers, and so the depth,
# from above (other bytes may have these values too: it is only a bound).
_MSGPACK_CONTAINER_BYTES = bytes([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_COUNT_BELOW = 65536
"""Bodies shorter than this are counted first; longer ones go straight to the walk,
which costs one step per container, whereas the count would copy the body."""


def _reject_constant(name: str) -> Any:
    # NaN and Infinity are not JSON; Python's encoder would write them, raet's peers
    # (and ours) should never have to read them.
    raise ValueError(f"non-standard JSON constant {name}")


def _reject_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} not accepted")


def _decode_json(data: bytes | bytearray) -> Any:
    if not data:
        return {}
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadPacket("body is not valid JSON", DropReason.BODY) from None
    if not isinstance(value, dict):
        raise BadPacket("JSON body is not an object", DropReason.BODY)
    # Counting brackets (fast, in C) bounds the depth from above; only bodies with
    # many containers pay for the exact walk.
    if data.count(b"{") + data.count(b"[") > MAX_BODY_DEPTH and nests_deeper_than(
        value, MAX_BODY_DEPTH
    ):
        raise BadPacket(f"body nests deeper than {MAX_BODY_DEPTH}", DropReason.BODY)
    return value


def _decode_msgpack(data: bytes | bytearray) -> Any:
    if not data:
        return {}
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_reject_ext,
            timestamp=0,
            # Container and string length limits default to len(data) in unpackb, so
            # a forged length prefix cannot make the unpacker allocate more than that.
        )
    # msgpack raises a zoo of types for bad input (ValueError subclasses, TypeError for
    # unhashable keys, its own ExtraData/FormatError/StackError, OverflowError); the
    # input is untrusted, so every failure means the same thing: a bad body.
    except Exception:
        raise BadPacket("body is not valid msgpack", DropReason.BODY) from None
    if type(value) is not dict:
        raise BadPacket("msgpack body is not a map", DropReason.BODY)
    size = len(data)
    if (
        size > MAX_BODY_DEPTH
        and not _flat(value)
        and (
            size >= _COUNT_BELOW
            or size - len(data.translate(None, _MSGPACK_CONTAINER_BYTES)) > MAX_BODY_DEPTH
        )
        and nests_deeper_than(value, MAX_BODY_DEPTH)
    ):
        raise BadPacket(f"body nests deeper than {MAX_BODY_DEPTH}", DropReason.BODY)
    return value


def decode_body_untrusted(
    kind: BodyKind, data: bytes | bytearray, *, max_size: int = MAX_BODY_SIZE
) -> Any:
    """Decode a received (already decrypted) body of ``kind``.

    JSON and msgpack give a dict (``{}`` for an empty body), raw gives the bytes, nada
    gives ``{}`` and requires an empty body.  Bodies longer than ``max_size`` or nested
    deeper than ``MAX_BODY_DEPTH`` are refused.  Raises only ``BadPacket`` (``DropReason.BODY``).
    """
    if len(data) > max_size:
        raise BadPacket(f"body of {len(data)} bytes exceeds {max_size}", DropReason.BODY)
    if kind == _MSGPACK:  # the native profile's kind first: it is the hot path
        return _decode_msgpack(data)  # bytes or bytearray alike: no copy
    if kind == _JSON:
        return _decode_json(data)
    if kind == _RAW:
        return bytes(data)
    if kind == _NADA:
        if data:
            raise BadPacket("body kind nada with a non-empty body", DropReason.BODY)
        return {}
    raise BadPacket(f"unknown body kind {kind!r}", DropReason.BODY)
