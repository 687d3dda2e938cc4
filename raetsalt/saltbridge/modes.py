"""Which functions a minion runs natively and which through Salt's loader.

``execution_mode`` (minion config):

``native``
    raetsalt's built-in modules and ``module_dirs`` (raetsalt's ``ctx`` convention);
    Salt is never used, as before the bridge existed.
``auto`` (default)
    when the ``salt`` package is importable: raetsalt's built-in functions run natively,
    every other function (``state.*``, ``pkg.*``, ``pillar.*``, ``cp.*``, custom modules
    in ``module_dirs`` and synced ``_modules``...) through Salt's loader, and the grains
    are Salt's.  ``SALT_FIRST`` go to Salt too: ``sys.*`` (so ``sys.doc`` knows Salt's
    functions), ``mine.*`` (so the mine can run any of Salt's functions) and
    ``saltutil.sync_grains`` (which syncs ``_grains``).  Without
    ``salt``: as ``native``.
``salt``
    every function through Salt's loader, except those only raetsalt can do
    (``PINNED``: peer publishing, the minion's bus, its job table); the minion refuses
    to start without ``salt``.

A comma job (``test.ping,state.apply``) goes to Salt's loader as a whole as soon as one
of its functions does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection

MODES = ("auto", "native", "salt")
PINNED_MODULES = ("publish", "event")
PINNED = frozenset({"saltutil.running", "saltutil.find_job", "saltutil.kill_job"})
"""Functions (and modules) that always run natively: they act on raetsalt's own road,
bus and job processes."""
SALT_FIRST_MODULES = ("sys", "mine")
SALT_FIRST = frozenset({"saltutil.sync_grains"})
"""Built-in functions that give way to Salt's when Salt's loader is in use."""


def salt_importable() -> bool:
    """Whether the ``salt`` package can be found (it is not imported here)."""
    try:
        return importlib.util.find_spec("salt") is not None
    except (ImportError, ValueError):
        return False


def uses_salt(mode: str, importable: bool) -> bool:
    """Whether a minion in ``mode`` runs Salt's loader (its zygote)."""
    return mode == "salt" or (mode == "auto" and importable)


def pinned(fun: str) -> bool:
    return fun in PINNED or fun.split(".", 1)[0] in PINNED_MODULES


def runs_in_salt(fun: str, mode: str, native: Collection[str]) -> bool:
    """Whether the job of ``fun`` (a comma list allowed) goes to Salt's loader, for a
    minion whose loader is in use in ``mode``; ``native`` are its built-in functions."""
    funs = [f.strip() for f in fun.split(",")]
    if mode == "native" or all(pinned(f) for f in funs):
        return False
    if mode == "salt":
        return True
    return any(f not in native or f in SALT_FIRST or f.split(".", 1)[0] in SALT_FIRST_MODULES
               for f in funs)
