"""Returners on the minion: where a job's return goes besides the master (``--return``).

A publication may name returners (``ret``: ``'master_bus'``, ``'syslog,sqlite3'``) with
their settings (``ret_config``: a profile name, ``ret_kwargs``: a mapping).  After the job
ran, in the job's own process as in Salt's minion, each named returner gets the return
as Salt's returners take it (``returner_load``): ``{id, jid, fun, fun_args, return,
retcode, success[, out, ret_config, ret_kwargs]}``.  The master still gets the return as
always; a returner that fails or does not exist is logged on the minion (once per job and
returner, never with the return's text) and changes nothing else.

Built-in returners, which work without Salt:

* ``master_bus``: fires the return on the master's event bus (through the minion's
  ``fire_master``, as Salt's ``event.fire_master`` does) under ``ret_kwargs['tag']``,
  default ``master_bus``; listeners on the master find the return in ``['data']``.
* ``sqlite3``: appends the return to ``salt_returns`` in the SQLite database
  ``sqlite3.database`` (Salt's ``sqlite3`` returner's table and keys; the table is
  created when missing, Salt's needs it made beforehand).

Any other name is one of Salt's returner modules, loaded with Salt's loader when the
``salt`` extra is installed (``raetsalt.saltbridge.saltjob.salt_loader_returners``);
without it the job's log line says so.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

MAX_RETURNERS = 8
"""Returners one publication may name; more are ignored (and logged)."""
MAX_NAME = 64
MAX_KWARGS_BYTES = 4096
"""Largest ``ret_kwargs`` (as JSON) a publication may carry."""
DEFAULT_TAG = "master_bus"
BUILTIN = ("master_bus", "sqlite3")

FireMaster = Callable[[str, dict[str, Any]], bool]
SaltReturners = Callable[[], Mapping[str, Any] | None]
"""Salt's returners (``name.returner`` -> function), built on first use; None without
Salt."""


def returner_names(ret: Any) -> list[str]:
    """The returner names of a publication's ``ret`` (comma-separated or a list), in
    order, without repeats, at most ``MAX_RETURNERS``."""
    if isinstance(ret, str):
        items = ret.split(",")
    elif isinstance(ret, list):
        items = [r for r in ret if isinstance(r, str)]
    else:
        return []
    names: list[str] = []
    for item in items:
        name = item.strip()
        if name and name not in names and len(name) <= MAX_NAME and name.isprintable():
            names.append(name)
    if len(names) > MAX_RETURNERS:
        log.warning("a job names %d returners; only the first %d get its return",
                    len(names), MAX_RETURNERS)
    return names[:MAX_RETURNERS]


def ret_kwargs_untrusted(value: Any) -> dict[str, Any]:
    """A publication's ``ret_kwargs``: a mapping with string keys, at most
    ``MAX_KWARGS_BYTES`` as JSON; anything else is ``{}``."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return {}
    try:
        size = len(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return {}
    return dict(value) if size <= MAX_KWARGS_BYTES else {}


def returner_load(minion_id: str, jid: str, fun: str, fun_args: list[Any],
                  ret: Mapping[str, Any], ret_config: str = "",
                  ret_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The mapping a returner receives (Salt's minion builds the same one)."""
    load: dict[str, Any] = {"id": minion_id, "jid": jid, "fun": fun, "fun_args": fun_args,
                            **{k: v for k, v in ret.items()
                               if k in ("return", "retcode", "success", "out")}}
    if ret_config:
        load["ret_config"] = ret_config
    if ret_kwargs:
        load["ret_kwargs"] = dict(ret_kwargs)
    return load


def master_bus_tag(load: Mapping[str, Any]) -> str:
    kwargs = load.get("ret_kwargs")
    tag = kwargs.get("tag") if isinstance(kwargs, Mapping) else None
    return tag if isinstance(tag, str) and tag.strip() else DEFAULT_TAG


def sqlite_returner(opts: Mapping[str, Any], load: Mapping[str, Any]) -> None:
    """Salt's ``sqlite3`` returner's row in ``salt_returns`` (``sqlite3.database``)."""
    path = setting(opts, load, "sqlite3.database")
    if not isinstance(path, str) or not path:
        raise ValueError("sqlite3.database is not set")
    timeout = setting(opts, load, "sqlite3.timeout")
    conn = sqlite3.connect(path, timeout=float(timeout) if isinstance(
        timeout, int | float) else 5.0)
    try:
        with conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS salt_returns (fun TEXT, jid TEXT, id TEXT, "
                "fun_args TEXT, date TEXT, full_ret TEXT, success TEXT)")
            conn.execute(
                "INSERT INTO salt_returns (fun, jid, id, fun_args, date, full_ret, success) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (str(load.get("fun")), str(load.get("jid")), str(load.get("id")),
                 json.dumps(load.get("fun_args"), default=str),
                 datetime.now(UTC).isoformat(), json.dumps(load.get("return"), default=str),
                 str(load.get("success", ""))))
    finally:
        conn.close()


def setting(opts: Mapping[str, Any], load: Mapping[str, Any], key: str) -> Any:
    """A returner setting: from the profile ``ret_config`` names (``<profile>.<key>``),
    else the plain key, as Salt's ``get_returner_options`` looks them up."""
    profile = load.get("ret_config")
    if isinstance(profile, str) and profile and f"{profile}.{key}" in opts:
        return opts[f"{profile}.{key}"]
    return opts.get(key)


def run_returners(names: list[str], load: dict[str, Any], opts: Mapping[str, Any], *,
                  fire_master: FireMaster, salt_returners: SaltReturners) -> dict[str, str]:
    """Give ``load`` to each returner of ``names``; returns ``{name: problem}`` for those
    that failed (each also logged once, with the job's id and the returner's name)."""
    problems: dict[str, str] = {}
    salt_funcs: Mapping[str, Any] | None = None
    salt_looked = False
    for name in names:
        try:
            if name == "master_bus":
                if not fire_master(master_bus_tag(load), load):
                    raise RuntimeError("the minion's bus did not take the event")
            elif name == "sqlite3":
                sqlite_returner(opts, load)
            else:
                if not salt_looked:
                    salt_looked = True
                    salt_funcs = salt_returners()
                if salt_funcs is None:
                    raise LookupError(f"returner {name!r} is one of Salt's: install the salt "
                                      "extra (pip install 'raetsalt[salt]') to use it")
                func = salt_funcs.get(f"{name}.returner") if hasattr(
                    salt_funcs, "get") else None
                if func is None:
                    raise LookupError(f"Salt has no returner {name!r} (or it could not "
                                      "be loaded on this minion)")
                func(load)
        except Exception as exc:  # noqa: BLE001 - a returner's failure is only logged
            problems[name] = str(exc)[:300] or type(exc).__name__
            log.error("returner %s failed for job %s: %s", name, load.get("jid"),
                      problems[name])
    return problems


def deliver(opts: Mapping[str, Any], job: Mapping[str, Any], ret: Mapping[str, Any], *,
            fire_master: FireMaster, salt_returners: SaltReturners | None = None
            ) -> dict[str, str]:
    """After job ``job`` (``jid``, ``fun``, ``arg``, ``ret``, ``ret_config``,
    ``ret_kwargs``: a publication's fields) returned ``ret``: give it to its returners
    and to those of the minion's ``return`` option."""
    names = returner_names(job.get("ret"))
    names += [n for n in returner_names(opts.get("return")) if n not in names]
    if not names:
        return {}
    kwargs = job.get("ret_kwargs")
    load = returner_load(str(opts.get("id")), str(job.get("jid")), str(job.get("fun")),
                         list(job.get("arg") or []), ret, str(job.get("ret_config") or ""),
                         kwargs if isinstance(kwargs, Mapping) else None)
    return run_returners(names, load, opts, fire_master=fire_master,
                         salt_returners=salt_returners or (lambda: None))


def module_settings(opts: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of modules in a config (``sqlite3.database``, ``redis.host``...)."""
    return {k: v for k, v in opts.items() if "." in k.strip(".")}

