"""``GrainPool``: one copy of each grain value that many minions report alike.

A master keeps every connected minion's grains for targeting.  Most of them are the same
across a fleet (``os``, ``kernel``, ``cpu_flags``, ``cpu_model``, ...), yet each minion's
report is a fresh decoded object: about 20 KiB a minion, 200 MiB for 10,000 minions.
``share`` returns the grains with each string, list or mapping value replaced by the
first equal value the pool has seen under that key, so a fleet of alike machines costs
one copy of those values.  The master treats grains as read-only, so sharing is safe.

The pool is bounded (``limit`` values, none of more than ``largest`` parts):
beyond that values are kept as reported, so a minion reporting odd grains can only fill
the pool, not grow it without end.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

LIMIT = 100_000
LARGEST = 4096
"""Values of more parts than this (list items, mapping entries, characters) are not pooled."""


class _TooLarge(Exception):
    pass


def _frozen(value: Any, budget: list[int]) -> Hashable:
    """A hashable twin of a decoded value (equal values, equal twins; a mapping's order
    counts), or ``_TooLarge`` once more than ``budget[0]`` parts were seen."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if isinstance(value, list):
        return ("l", tuple(_frozen(item, budget) for item in value))
    if isinstance(value, dict):
        return ("d", tuple((_frozen(k, budget), _frozen(v, budget)) for k, v in value.items()))
    if isinstance(value, str | bytes):
        budget[0] -= len(value) // 64
        return (type(value).__name__, value)
    if value is None or isinstance(value, bool | int | float):
        return (type(value).__name__, value)  # 1 and True and 1.0 stay apart
    raise _TooLarge  # nothing a decoder makes


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
                ident = _frozen(value, [self.largest])
            except (_TooLarge, RecursionError):
                return value
        else:
            return value  # numbers, booleans, None: small
        pooled = self._values.get((key, ident))
        if pooled is not None:
            return pooled
        if len(self._values) < self.limit:
            self._values[(key, ident)] = value
        return value
