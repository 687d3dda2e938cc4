"""Read and set the minion's grains."""

from __future__ import annotations

from typing import Any

from raetsalt.execution.loader import Context

_MISSING = object()


def items(*, ctx: Context) -> dict[str, Any]:
    """Return all grains."""
    return dict(ctx.grains)


def item(*keys: str, ctx: Context) -> dict[str, Any]:
    """Return ``{key: value}`` for the named grains ('' for a missing one, as Salt)."""
    return {key: ctx.grains.get(key, "") for key in keys}


def get(key: str, default: Any = "", delimiter: str = ":", *, ctx: Context) -> Any:
    """Return a grain, descending into nested dicts and lists with ``key`` parts joined
    by ``delimiter`` (``'a:b:0'``); ``default`` if the path does not exist."""
    value: Any = ctx.grains
    for part in str(key).split(delimiter):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif (
            isinstance(value, list)
            and part.lstrip("-").isdigit()
            and -len(value) <= int(part) < len(value)
        ):
            value = value[int(part)]
        else:
            return default
    return value


def ls(*, ctx: Context) -> list[str]:
    """Return the sorted names of all grains."""
    return sorted(ctx.grains)


def setval(key: str, val: Any, *, ctx: Context) -> dict[str, Any]:
    """Set a static grain (kept across restarts) and return ``{key: val}``."""
    ctx.grains[key] = val
    ctx.save_grains({key: val})
    return {key: val}
