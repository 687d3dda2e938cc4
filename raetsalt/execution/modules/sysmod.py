"""What this minion can do: its modules, functions and their documentation."""

from __future__ import annotations

import fnmatch
import inspect

from raetsalt.execution.loader import Context

__virtualname__ = "sys"


def _functions(ctx: Context) -> dict[str, object]:
    assert ctx.loader is not None
    return dict(ctx.loader.functions)


def _select(names: list[str], patterns: tuple[str, ...]) -> list[str]:
    if not patterns:
        return sorted(names)
    chosen: set[str] = set()
    for pattern in patterns:
        glob = (
            pattern
            if any(c in pattern for c in "*?[")
            else f"{pattern}.*"
            if "." not in pattern
            else pattern
        )
        chosen.update(n for n in names if fnmatch.fnmatch(n, glob))
    return sorted(chosen)


def list_functions(*modules: str, ctx: Context) -> list[str]:
    """Return the functions of the named modules (or of all modules; globs allowed)."""
    return _select(list(_functions(ctx)), modules)


def list_modules(*, ctx: Context) -> list[str]:
    """Return the names of the loaded modules; a custom module that failed to load is
    listed as ``NAME (not loaded: <error>)``."""
    assert ctx.loader is not None
    loaded = ctx.loader.modules()
    failed = [f"{name} (not loaded: {why})" for name, why in sorted(ctx.loader.missing.items())
              if name not in loaded]
    return loaded + failed


def doc(*names: str, ctx: Context) -> dict[str, str]:
    """Return ``{function: docstring}`` for the named functions or modules (all if none)."""
    functions = _functions(ctx)
    return {name: inspect.getdoc(functions[name]) or "" for name in _select(list(functions), names)}
