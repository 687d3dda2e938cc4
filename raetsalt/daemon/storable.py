"""What a daemon stores as JSON (the job cache, the minion data cache): any value the
road's, the lane's or the command socket's decoders accept, made storable.

JSON's encoder takes ``default`` for values it does not know (``repr`` here: bytes are
stored as ``"b'...'"``, as before) but nothing for map keys: a key that is not a str,
int, float, bool or None (a msgpack ``bin`` key, an ext type, a timestamp) raised
``TypeError`` in the caller.  ``encode_json`` tries the plain encoder first (the common
case costs nothing more) and, only when a key is in the way, encodes a copy where every
such key is its ``repr`` (``b'k'`` becomes ``"b'k'"``, beside any str key ``"k"``).
"""

from __future__ import annotations

import json
from typing import Any

from raetsalt.errors import KeepError

_PLAIN_KEYS = (str, int, float, bool, type(None))
_SCALARS = (str, int, float, bool, type(None))


def storable(value: Any) -> Any:
    """A copy of ``value`` JSON's encoder takes whole: map keys it cannot hold become
    their ``repr``, tuples lists, other unknown values their ``repr``."""
    if isinstance(value, dict):
        return {(key if isinstance(key, _PLAIN_KEYS) else repr(key)): storable(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    if isinstance(value, _SCALARS):
        return value
    return repr(value)


def encode_json(data: Any, name: str) -> bytes:
    """The JSON text (UTF-8) of ``data``, whatever a decoder gave; ``KeepError`` only for
    a structure that has none (nested too deep for the encoder, circular)."""
    try:
        try:
            return json.dumps(data, default=repr).encode("utf-8")
        except TypeError:  # a map key JSON cannot hold
            return json.dumps(storable(data), default=repr).encode("utf-8")
    except (RecursionError, ValueError, TypeError) as exc:
        raise KeepError(f"{name}: cannot be stored as JSON: {exc}") from None
