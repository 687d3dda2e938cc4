"""Salt's mine for minions that run natively: data a minion stores on the master for
other minions to read (``mine.get`` in a template: the addresses of the web nodes...).

The same functions, arguments and return shapes as Salt's ``mine`` module; the loads
go to the master over the road (``salt_req``, relayed by the minion daemon) and the
master keeps them in its minion data cache (``raetsalt.services.mine``).  Where Salt's
loader is in use, Salt's own ``mine`` module runs instead
(``raetsalt.saltbridge.mine_bus``).  Unlike Salt, a write the master did not store
fails with the reason instead of answering True, and a read that the master's
``mine_get`` rules refuse fails naming the function instead of answering ``{}``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from raetsalt import protocol as p
from raetsalt.execution.loader import CommandExecutionError, Context

log = logging.getLogger(__name__)

MASTERLESS = "No access to master. If using salt-call with --local, please remove."
TIMEOUT = 60.0
ACL_ID = "__saltmine_acl__"
ACL_DATA = "__data__"


def _request(ctx: Context, load: dict[str, Any]) -> Any:
    """Send one mine load to the master and return its answer's ``ret``."""
    if ctx.master_client is None:
        raise CommandExecutionError(MASTERLESS)
    client = ctx.master_client()
    try:
        req = client.request(p.SHARE_SALT_REQ, load=load, timeout=TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while (remaining := deadline - time.monotonic()) > 0:
            for body in client.receive(min(1.0, remaining)):
                if body.get("req") == req and p.share_of(body) == p.SHARE_SALT_RET:
                    if "error" in body:
                        raise CommandExecutionError(str(body["error"]))
                    return body.get("ret")
            if not client.daemon_alive():
                raise CommandExecutionError("the raetsalt-minion daemon went away")
        raise CommandExecutionError(f"the master did not answer {load['cmd']!r} "
                                    f"within {TIMEOUT:g} s")
    finally:
        client.close()


def _parse_definition(definition: Any) -> tuple[str | None, list[Any], dict[str, Any],
                                                 dict[str, Any]]:
    """Salt's ``mine_functions`` entry: ``(function, args, kwargs, minion ACL)``."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if isinstance(definition, Mapping):
        kwargs = dict(definition)
    elif isinstance(definition, list):
        for item in definition:
            if isinstance(item, Mapping):
                kwargs.update(item)
            else:
                args.append(item)
    function = kwargs.pop("mine_function", None)
    acl = {k: v for k in ("allow_tgt", "allow_tgt_type") if (v := kwargs.pop(k, None))}
    return function, args, kwargs, acl


def _wrap(value: Any, acl: Mapping[str, Any]) -> Any:
    if not acl.get("allow_tgt"):
        return value
    return {ACL_DATA: value, ACL_ID: 1, **acl}


def _store(ctx: Context, data: dict[str, Any], clear: bool = False) -> Any:
    return _request(ctx, {"cmd": "_mine", "id": ctx.opts.get("id"), "data": data,
                          "clear": clear})


def _configured(ctx: Context) -> dict[str, Any]:
    """The ``mine_functions`` of the minion config, then of its pillar (which wins)."""
    merged: dict[str, Any] = {}
    pillar = ctx.extras.get("pillar") or {}
    for source in (ctx.opts.get("mine_functions"), pillar.get("mine_functions")):
        if isinstance(source, Mapping):
            merged.update(source)
    return merged


def update(clear: bool = False, mine_functions: Any = None, *, ctx: Context) -> Any:
    """Run the configured ``mine_functions`` (minion config and pillar) and store
    their results on the master; ``mine_functions`` (a mapping or a list) runs only
    those.  ``clear`` replaces the whole mine.  A function that fails is left out
    (logged), as in Salt; returns None when nothing is configured."""
    if not mine_functions:
        functions = _configured(ctx)
        if not functions:
            return None
    elif isinstance(mine_functions, list):
        functions = {str(name): {} for name in mine_functions}
    elif isinstance(mine_functions, Mapping):
        functions = dict(mine_functions)
    else:
        return None
    data: dict[str, Any] = {}
    for alias, definition in functions.items():
        name, args, kwargs, acl = _parse_definition(definition)
        target = name or alias
        if ctx.loader is None or target not in ctx.loader.functions:
            log.error("Function %s in mine_functions not available", target)
            continue
        try:
            value = ctx.loader.call(target, args, kwargs, ctx)
        except Exception as exc:  # noqa: BLE001 - Salt leaves a failing function out
            log.error("Function %s in mine.update failed to execute: %s", target, exc)
            continue
        data[alias] = _wrap(value, acl)
    return _store(ctx, data, bool(clear))


def send(name: str, *args: Any, ctx: Context, **kwargs: Any) -> Any:
    """Run ``name`` (or ``mine_function``) with the arguments and store its result
    under ``name`` on the master; ``allow_tgt``/``allow_tgt_type`` say which minions
    may read it."""
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("__")}
    function = kwargs.pop("mine_function", None) or name
    acl = {k: v for k in ("allow_tgt", "allow_tgt_type") if (v := kwargs.pop(k, None))}
    if ctx.loader is None or function not in ctx.loader.functions:
        raise CommandExecutionError(f"'{function}' is not available.")
    try:
        value = ctx.loader.call(function, list(args), kwargs, ctx)
    except Exception as exc:  # noqa: BLE001 - Salt answers False
        log.error("Function %s in mine.send failed to execute: %s", function, exc)
        return False
    return _store(ctx, {name: _wrap(value, acl)})


def get(tgt: Any, fun: Any, tgt_type: str = "glob", exclude_minion: bool = False, *,
        ctx: Context) -> Any:
    """The mine values of ``fun`` (a name, a comma-separated string or a list) of the
    minions ``tgt`` matches: ``{minion: value}``, or ``{function: {minion: value}}``
    for several functions."""
    ret = _request(ctx, {"cmd": "_mine_get", "id": ctx.opts.get("id"), "tgt": tgt,
                         "fun": fun, "tgt_type": tgt_type})
    if exclude_minion and isinstance(ret, dict):
        ret.pop(ctx.opts.get("id"), None)
    return ret


def delete(fun: str, *, ctx: Context) -> Any:
    """Remove function ``fun`` from this minion's mine."""
    return _request(ctx, {"cmd": "_mine_delete", "id": ctx.opts.get("id"), "fun": fun})


def flush(*, ctx: Context) -> Any:
    """Remove this minion's whole mine."""
    return _request(ctx, {"cmd": "_mine_flush", "id": ctx.opts.get("id")})


def valid(*, ctx: Context) -> dict[str, Any] | None:
    """The configured ``mine_functions`` whose functions exist here, as Salt shows
    them (``{alias: {function: [args]}}`` or the entry as configured); None when
    nothing is configured."""
    functions = _configured(ctx)
    if not functions:
        return None
    out: dict[str, Any] = {}
    for alias, definition in functions.items():
        name, args, kwargs, _acl = _parse_definition(definition)
        target = name or alias
        if ctx.loader is None or target not in ctx.loader.functions:
            continue
        call = args + [{k: v} for k, v in kwargs.items()]
        out[alias] = {name: call} if name else definition
    return out
