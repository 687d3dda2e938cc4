"""Which functions a minion runs natively and which through Salt's loader.

``execution_mode`` (minion config):

``native``
    raetsalt's built-in modules and ``module_dirs`` (raetsalt's ``ctx`` convention);
    Salt is never used, as before the bridge existed.
``auto`` (default)
    when the ``salt`` package is importable: raetsalt's built-in functions run natively
    when they accept the call exactly as Salt's would (``native_fits``: every keyword
    argument is one of theirs, and no more positional arguments than they take in
    Salt's order), every other call (``cmd.run ... runas=nobody``, ``grains.items
    sanitize=True``, ``state.*``, ``pkg.*``, ``pillar.*``, ``cp.*``, custom modules in
    ``module_dirs`` and synced ``_modules``...) through Salt's loader, and the grains
    are Salt's.  ``SALT_FIRST`` go to Salt too: ``sys.*`` (so ``sys.doc`` knows Salt's
    functions), ``mine.*`` (so the mine can run any of Salt's functions),
    ``test.version`` (Salt's version inventory), ``saltutil.sync_grains`` (which syncs
    ``_grains``) and ``saltutil.refresh_grains`` (the job computes Salt's grains again,
    ``raetsalt.saltbridge.saltjob.GRAIN_CHANGERS``).  Without ``salt``: as ``native``.
``salt``
    every function through Salt's loader, except those only raetsalt can do
    (``PINNED``: peer publishing, the minion's bus, its job table); the minion refuses
    to start without ``salt``.

A comma job (``test.ping,state.apply``) goes to Salt's loader as a whole as soon as one
of its functions does.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from raetsalt.protocol import unpack_args

MODES = ("auto", "native", "salt")
PINNED_MODULES = ("publish", "event")
PINNED = frozenset({"saltutil.running", "saltutil.find_job", "saltutil.kill_job"})
"""Functions (and modules) that always run natively: they act on raetsalt's own road,
bus and job processes."""
SALT_FIRST_MODULES = ("sys", "mine")
SALT_FIRST = frozenset({"saltutil.sync_grains", "saltutil.refresh_grains", "test.version"})
"""Built-in functions that give way to Salt's when Salt's loader is in use."""
POSITIONAL_AS_SALT = {"cmd.run": 2, "cmd.run_all": 2, "cmd.retcode": 2}
"""Built-in functions whose positional parameters follow Salt's order only this far
(Salt's ``cmd.run`` takes ``stdin`` third, raetsalt's ``env``): a call with more
positional arguments goes to Salt.  Checked against Salt's signatures by the tests."""


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


def native_fits(fun: str, func: Callable[..., Any], arg: list[Any]) -> bool:
    """Whether the built-in ``func`` takes the publication arguments ``arg`` (Salt's
    list: positional values, ``__kwarg__`` mappings) as Salt's ``fun`` would: they bind
    to its signature, with no more positional ones than follow Salt's order."""
    args, kwargs = unpack_args(list(arg))
    if len(args) > POSITIONAL_AS_SALT.get(fun, len(args)):
        return False
    kwargs = {k: v for k, v in kwargs.items() if not str(k).startswith("__pub_")}
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return False
    if "ctx" in signature.parameters:
        kwargs["ctx"] = None
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def runs_in_salt(fun: str, mode: str, native: Collection[str] | Mapping[str, Any],
                 arg: list[Any] | None = None) -> bool:
    """Whether the job of ``fun`` (a comma list allowed) goes to Salt's loader, for a
    minion whose loader is in use in ``mode``; ``native`` are its built-in functions
    (a mapping to the functions themselves: then a call that one of them does not take
    as Salt's would goes to Salt, ``native_fits``); ``arg`` the publication's
    arguments (one list per function for a comma list)."""
    funs = [f.strip() for f in fun.split(",")]
    if mode == "native" or all(pinned(f) for f in funs):
        return False
    if mode == "salt":
        return True
    if any(f not in native or f in SALT_FIRST or f.split(".", 1)[0] in SALT_FIRST_MODULES
           for f in funs):
        return True
    if arg is None or not isinstance(native, Mapping):
        return False
    groups = arg if len(funs) > 1 and len(arg) == len(funs) and all(
        isinstance(a, list) for a in arg) else [arg] if len(funs) == 1 else [[] for _ in funs]
    return any(not pinned(f) and not native_fits(f, native[f], group)
               for f, group in zip(funs, groups, strict=True))
