"""``GrainPool``: one copy of each grain value that many minions report alike.

A master keeps every connected minion's grains for targeting.  Most of them are the same
across a fleet (``os``, ``kernel``, ``cpu_flags``, ``cpu_model``, ...), yet each minion's
report is a fresh decoded object: about 20 KiB a minion, 200 MiB for 10,000 minions.
``share`` returns the grains with each string, list or mapping value replaced by the
first equal value the pool has seen under that key, so a fleet of alike machines costs
one copy of those values.  The master treats grains as read-only, so sharing is safe.

The pool is bounded (``limit`` values, none larger than ``largest`` bytes encoded):
beyond that values are kept as reported, so a minion reporting odd grains can only fill
the pool, not grow it without end.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import msgpack

LIMIT = 100_000
LARGEST = 64 * 1024


class GrainPool:
    """Shared grain values (module docstring)."""

    def __init__(self, limit: int = LIMIT, largest: int = LARGEST) -> None:
        self.limit = limit
        self.largest = largest
        self._values: dict[tuple[str, Hashable], Any] = {}

    def __len__(self) -> int:
        return len(self._values)

    def share(self, grains: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in grains.items():
            out[key] = self._shared(key, value)
        return out

    def _shared(self, key: str, value: Any) -> Any:
        ident: Hashable
        if isinstance(value, str):
            if len(value) > self.largest:
                return value
            ident = value
        elif isinstance(value, list | dict):
            try:
                packed: bytes = msgpack.packb(value)
            except (TypeError, ValueError, OverflowError):
                return value
            if len(packed) > self.largest:
                return value
            ident = packed
        else:
            return value  # numbers, booleans, None: small
        pooled = self._values.get((key, ident))
        if pooled is not None:
            return pooled
        if len(self._values) < self.limit:
            self._values[(key, ident)] = value
        return value
