"""Compatibility shim that lets the reference implementation raet 0.6.8 run on Python 3.11.

This module lives only in the tests tree: raetsalt itself never imports raet.
Import it (``import raet_shim`` or ``from tests import raet_shim``) *before* anything
from ``raet`` or ``ioflo``; then use :func:`load` to get the raet package.

What raet 0.6.8 / ioflo 2.0.3 need on 3.11, and nothing more:

1. ``collections.abc`` must have been imported as a submodule before ioflo is
   imported: ``ioflo/aid/osetting.py`` does ``import collections`` and then uses
   ``collections.abc.MutableSet``, which only works when some earlier import
   already loaded ``collections.abc``.
2. raet does ``from collections import Mapping`` (road/packeting.py,
   road/stacking.py, stacking.py, lane/paging.py). Those ABC aliases were removed
   from ``collections`` in Python 3.10, so they are re-added (only when missing).
3. raet's JSON body and JSON-head decoders call ``json.loads(..., encoding='utf-8')``;
   the ``encoding`` keyword was removed in Python 3.9 and now raises TypeError,
   so every received JSON body would fail. Instead of patching the global
   ``json`` module, the ``json`` name inside the two raet modules that decode
   JSON (road/packeting.py and lane/paging.py) is replaced by a proxy whose
   ``loads``/``load`` drop that keyword. Everything else in the process keeps
   the real ``json``.

Things deliberately *not* shimmed (they are raet behaviour we want to observe):
msgpack bodies/keeps (``encoding=`` for msgpack >= 1.0 still fails), ``time.clock``
(only reached on Windows), the known raet bugs listed in docs/raet-wire.md §10.
"""

from __future__ import annotations

import collections
import collections.abc  # noqa: F401  -- must be loaded before ioflo (point 1 above)
import json
import types
from typing import Any

# Names raet/ioflo reach for via ``collections.<Name>`` or ``from collections import``.
_ABC_ALIASES = (
    "Callable",
    "Hashable",
    "Iterable",
    "Iterator",
    "Mapping",
    "MutableMapping",
    "MutableSequence",
    "MutableSet",
    "Sequence",
    "Set",
)

for _name in _ABC_ALIASES:
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))


def _loads(s: str | bytes, *args: Any, encoding: Any = None, **kwargs: Any) -> Any:
    """``json.loads`` accepting (and ignoring) the Python 2 era ``encoding`` keyword."""
    return json.loads(s, *args, **kwargs)


def _load(fp: Any, *args: Any, encoding: Any = None, **kwargs: Any) -> Any:
    """``json.load`` accepting (and ignoring) the ``encoding`` keyword."""
    return json.load(fp, *args, **kwargs)


def _json_proxy() -> types.ModuleType:
    proxy = types.ModuleType("json_raet_shim")
    for attr in ("dumps", "dump", "JSONDecodeError", "JSONEncoder", "JSONDecoder"):
        setattr(proxy, attr, getattr(json, attr))
    proxy.loads = _loads  # type: ignore[attr-defined]
    proxy.load = _load  # type: ignore[attr-defined]
    return proxy


_patched = False


def load() -> types.ModuleType:
    """Import raet (all of it, as ``raet/__init__`` does) with the JSON fix applied.

    Idempotent. Returns the ``raet`` package.
    """
    global _patched
    import raet  # noqa: PLC0415  -- imports raet.road and raet.lane as a side effect
    import raet.lane.paging
    import raet.road.packeting

    if not _patched:
        proxy = _json_proxy()
        for module in (raet.road.packeting, raet.lane.paging):
            # raet prefers simplejson when installed; simplejson still accepts
            # ``encoding=`` and needs no proxy.
            if getattr(module, "json", None) is json:
                module.json = proxy  # type: ignore[attr-defined]
        _patched = True
    return raet


def mute_console(verbosity: int = 0, path: str | None = None) -> None:
    """Set ioflo's process-wide console (raet's logger) verbosity.

    The console writes to ``sys.stdout`` by default; ``path`` redirects it to a file.
    0 = mute, 1 = terse, 2 = concise (raet's default: one line per transaction step).
    """
    from ioflo.base.consoling import getConsole  # noqa: PLC0415

    getConsole().reinit(verbosity=verbosity, path=path)
