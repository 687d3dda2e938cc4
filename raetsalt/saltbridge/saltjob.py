"""Salt's loader inside raetsalt: built once in the zygote, used by each forked job.

``SaltRuntime(config)`` imports Salt, builds the minion's Salt opts from raetsalt's
(paths under ``<cachedir>/salt``, the raetsalt ``sock_dir``, ``conf_file`` so the
``grains`` file beside it is read, ``module_dirs``, ``file_client``...), puts raetsalt
under Salt where Salt would talk to a master or to its own minion daemon, and loads
grains, utils, execution modules and executors (``load``; again on a refresh).  The
modules most jobs need are imported right after, one at a time between jobs (``warm``),
so a forked job starts running its function within milliseconds.

What is put under Salt (only in the zygote and its jobs, never in raetsalt's daemons):

* ``salt.channel.client.ReqChannel.factory`` / ``AsyncReqChannel.factory`` return
  raetsalt's channel (``raetsalt.saltbridge.channel``): ``salt://`` files, remote pillar
  and the master's options come from the raetsalt master over the road;
* ``salt.crypt.SAuth`` makes no ZeroMQ sign-in (the road authenticated the minion):
  ``cp.push`` goes on to the master, which answers ``False`` as Salt's does with
  ``file_recv`` off;
* ``salt.utils.event.get_event`` / ``MinionEvent`` are raetsalt's minion bus
  (``raetsalt.event``), so ``event.fire``, ``event.fire_master``, state events and the
  ``module_refresh``/``pillar_refresh``/``grains_refresh`` events of ``saltutil`` reach
  the raetsalt minion (the job's outcome also carries the refreshes it asked for);
  Salt's mine writes, fired as ``_minion_mine``, go to the master instead
  (``raetsalt.saltbridge.mine_bus``).

``run(payload)`` runs one job in the calling (forked) process as Salt's
``Minion._thread_return`` does, and returns the outcome the daemon expects
(``raetsalt.services.minion.JobOutcome`` on the wire): Salt's return shape, its
retcodes (``__context__['retcode']``, then ``result``/``success``), ``out`` from the
function's ``__outputter__`` (``highstate`` for states), and Salt's messages for a
missing function, bad arguments and exceptions.
"""

from __future__ import annotations

import datetime
import logging
import os
import traceback
import types
from collections.abc import Mapping
from functools import partial
from typing import Any

from raetsalt import event as raet_event
from raetsalt.drivers.jobchild import plain
from raetsalt.execution import returners

from . import channel, mine_bus
from .unserved import unserved

log = logging.getLogger(__name__)

CONFIG_KEYS = ("id", "cachedir", "sock_dir", "conf_file", "log_file", "file_client",
               "file_roots", "pillar_roots", "module_dirs", "grains", "return",
               "mine_functions", "schedule", "beacons", "engines", "master", "master_port",
               "__salt")
"""The raetsalt minion opts ``SaltRuntime`` needs."""
WARM = ("test.ping", "cmd.run", "state.apply", "pillar.items", "grains.items",
        "cp.get_file", "saltutil.sync_all", "pkg.list_pkgs", "file.stat")
"""Functions whose modules are imported in the zygote, before any job forks."""
REFRESH_TAGS = {"module_refresh": "modules", "pillar_refresh": "pillar",
                "grains_refresh": "modules"}
TRANSPORT = "raet"
"""The transport Salt's modules see: raetsalt's (Salt's own request and event channels
are replaced; no Salt code goes down its ZeroMQ paths)."""
_REFRESHES: set[str] = set()
"""What the running job asked to reload (filled by the bus events it fires)."""
GRAIN_CHANGERS = frozenset({"saltutil.sync_grains", "saltutil.sync_all",
                            "saltutil.refresh_grains", "saltutil.refresh_modules"})
"""Functions after which the job reports the minion's grains anew (custom ``_grains``
synced, or a refresh asked): the minion takes them before the job's return goes out,
so jobs and grain targeting see them at once, as with Salt."""


class _MinionBus(raet_event.MinionEvent):
    """raetsalt's minion bus with Salt's ``MinionEvent`` call shape; notes refreshes and
    carries the mine's writes to the master (``mine_bus``)."""

    def fire_event(self, data: Any, tag: str, timeout: float = 1000) -> bool:
        if str(tag) == mine_bus.MINE_TAG:
            return bool(mine_bus.send(self.opts, data))
        what = REFRESH_TAGS.get(str(tag))
        if what is not None:
            _REFRESHES.add(what)
        if isinstance(data, dict):
            data = _bus_safe(data)
        return super().fire_event(data, tag, timeout)


def _bus_safe(value: Any, depth: int = 0) -> Any:
    """``value`` as Salt's serializer would send it on its bus: dates as Salt's
    ``%Y%m%dT%H:%M:%S.%f`` text (the scheduler's ``_next_fire_time``...), the rest as
    ``plain`` makes it."""
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y%m%dT%H:%M:%S.%f")
    if isinstance(value, dict) and depth < 64:
        return {k if isinstance(k, str) else str(k): _bus_safe(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, list | tuple) and depth < 64:
        return [_bus_safe(v, depth + 1) for v in value]
    return plain(value, depth)


def salt_opts(config: Mapping[str, Any]) -> dict[str, Any]:
    """Salt's minion opts for a raetsalt minion whose config (the relevant keys) is
    ``config``; Salt's config files (``/etc/salt``) are never read."""
    import salt.config

    cachedir = os.path.join(str(config["cachedir"]), "salt")
    # Salt's own keys from the config files first (disable_modules, providers...); what
    # raetsalt must decide (paths, the bus, how the master is reached) wins.
    given = config.get("__salt")
    overrides = dict(given) if isinstance(given, dict) else {}
    overrides.update({
        "id": config["id"], "root_dir": "/", "conf_file": config.get("conf_file"),
        "cachedir": cachedir, "pki_dir": os.path.join(cachedir, "pki"),
        "sock_dir": config["sock_dir"], "extension_modules": os.path.join(cachedir, "extmods"),
        "log_file": config.get("log_file"), "file_client": config.get("file_client", "remote"),
        "file_roots": dict(config.get("file_roots") or {}),
        "pillar_roots": dict(config.get("pillar_roots") or {}),
        "module_dirs": list(config.get("module_dirs") or []),
        "grains": dict(config.get("grains") or {}),
        "mine_functions": dict(config.get("mine_functions") or {}),
        "schedule": dict(config.get("schedule") or {}),
        "beacons": dict(config.get("beacons") or {}),
        "engines": list(config.get("engines") or []),
        "multiprocessing": True, "cache_jobs": False,
        "master_type": "str", "transport": TRANSPORT,
    })
    if config.get("master"):
        overrides["master"] = config["master"]  # (the master's address, as configured)
    if config.get("master_port"):
        overrides["master_port"] = config["master_port"]
    opts: dict[str, Any] = salt.config.apply_minion_config(
        overrides, salt.config.DEFAULT_MINION_OPTS.copy())
    opts["sock_dir"] = config["sock_dir"]  # the raetsalt minion's bus, whatever Salt derived
    opts["__cli"] = str(config.get("__cli") or "salt-minion")  # as Salt's daemon sets it
    # Settings of Salt's modules from the raetsalt config (``redis.host``...).
    opts.update({k: v for k, v in config.items() if "." in k.strip(".")})
    return opts


def _patch_salt(opts: Mapping[str, Any]) -> None:
    import salt.channel.client
    import salt.crypt
    import salt.utils.event

    bus = {"id": str(opts["id"]), "sock_dir": str(opts["sock_dir"])}

    def sync_factory(opts: dict[str, Any], **kwargs: Any) -> channel.RaetReqChannel:
        return channel.RaetReqChannel(opts, **kwargs)

    def async_factory(opts: dict[str, Any], **kwargs: Any) -> channel.AsyncRaetReqChannel:
        return channel.AsyncRaetReqChannel(opts, **kwargs)

    def get_event(node: str, sock_dir: str | None = None, opts: Any = None,
                  listen: bool = True, **kwargs: Any) -> raet_event.SaltEvent:
        if node != "minion":
            raise ValueError(f"a raetsalt minion has no {node} bus")
        return _MinionBus(bus, listen=listen)

    def minion_event(opts: Any = None, listen: bool = True, **kwargs: Any
                     ) -> raet_event.SaltEvent:
        return _MinionBus(bus, listen=listen)

    class RoadAuth:
        """Salt's minion authentication for the functions that make one (``cp.push``):
        the road has authenticated this minion already; no ZeroMQ sign-in."""

        def __init__(self, opts: Any = None, io_loop: Any = None, **kwargs: Any) -> None:
            self.opts = opts

        def gen_token(self, clear_tok: bytes) -> bytes:
            return b""

    salt.crypt.SAuth = RoadAuth
    salt.channel.client.ReqChannel.factory = staticmethod(sync_factory)
    salt.channel.client.AsyncReqChannel.factory = classmethod(
        lambda cls, opts, **kwargs: async_factory(opts, **kwargs))
    salt.utils.event.get_event = get_event
    salt.utils.event.MinionEvent = minion_event


class SaltRuntime:
    """Salt's loader for one minion (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        import salt.version

        self.version = salt.version.__version__
        self.opts = salt_opts(config)
        _patch_salt(self.opts)
        self.functions: Any = None
        self.executors: Any = None
        self._returners: Any = None
        self.returns_always = list(config.get("return") or [])
        """The minion's ``return`` option: returners of every published job."""
        self.load()

    def load(self) -> None:
        """(Re)load grains, utils, execution modules and executors."""
        import salt.loader

        opts = self.opts
        opts["grains"] = salt.loader.grains(opts, force_refresh=True)
        opts.setdefault("pillar", {})
        utils = salt.loader.utils(opts)
        self.functions = salt.loader.minion_mods(opts, utils=utils)
        self.executors = salt.loader.executors(opts, self.functions)

    def returners(self) -> Any:
        """Salt's returner modules (loaded on first use, in the job that needs them)."""
        import salt.loader

        if self._returners is None:
            self._returners = salt.loader.returners(self.opts, self.functions)
        return self._returners

    def warm(self, name: str) -> None:
        """Import the module of function ``name`` now rather than in every job
        (``WARM``)."""
        try:
            self.functions[name]
        except KeyError:
            pass

    def grains(self) -> dict[str, Any]:
        return dict(self.opts["grains"])

    def local_pillar(self) -> dict[str, Any]:
        """This minion's pillar from its own ``pillar_roots`` (``file_client: local``)."""
        import salt.pillar

        pillar = salt.pillar.get_pillar(self.opts, self.opts["grains"], self.opts["id"])
        return dict(pillar.compile_pillar())

    # -- one job, in its own process -------------------------------------------------------

    def run(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Run the job of ``payload`` (``spec``, ``grains``, ``pillar``) here; returns
        its outcome (``JobOutcome`` wire shape)."""
        spec = payload["spec"]
        grains = dict(payload.get("grains") or {})
        pillar = dict(payload.get("pillar") or {})
        self.opts["grains"], self.opts["pillar"] = grains, pillar
        for loader in (self.functions, getattr(self.functions, "_dunder_salt", None)):
            if loader is not None and hasattr(loader, "pack"):
                loader.pack["__grains__"] = grains
                loader.pack["__pillar__"] = pillar
        data = {"jid": spec["jid"], "fun": spec["fun"], "arg": list(spec["arg"]),
                "tgt": spec.get("tgt", ""), "tgt_type": spec.get("tgt_type", "glob"),
                "user": spec.get("user", ""), "ret": spec.get("ret", "")}
        _REFRESHES.clear()
        try:
            if "," in data["fun"]:
                ret, missing = self._multi(data), False
            else:
                ret, missing = self._one(data["fun"], data["arg"], data)
            if (data["ret"] or self.returns_always) and spec.get("kind",
                                                                 "publish") == "publish":
                from raetsalt.drivers.jobchild import after_result

                job, opts = {**spec, "arg": data["arg"]}, {**self.opts,
                                                           "return": self.returns_always}
                after_result(partial(returners.deliver, opts, job, ret,
                                     fire_master=_fire_master(opts),
                                     salt_returners=self.returners))
        finally:
            channel.close_all()
        outcome: dict[str, Any] = {"ret": ret, "missing_fun": missing, "grains_set": {},
                                   "refresh_grains": False, "refresh": sorted(_REFRESHES)}
        if GRAIN_CHANGERS & {f.strip() for f in data["fun"].split(",")}:
            fresh = self.fresh_grains()
            if fresh is not None:
                outcome["grains_now"] = fresh
                outcome["refresh"] = sorted({*_REFRESHES, "modules"})
        return outcome

    def fresh_grains(self) -> dict[str, Any] | None:
        """The grains computed again now, custom ``_grains`` included (None when that
        fails: the zygote's reload will report them)."""
        import salt.loader

        try:
            return dict(salt.loader.grains(self.opts, force_refresh=True))
        except Exception:  # noqa: BLE001 - a broken custom grain must not fail the job
            log.warning("grains not computed again after the sync", exc_info=True)
            return None

    def _multi(self, data: dict[str, Any]) -> dict[str, Any]:
        funs = [f.strip() for f in data["fun"].split(",")]
        arg = data["arg"]
        groups = arg if len(arg) == len(funs) and all(isinstance(a, list) for a in arg) \
            else [[] for _ in funs]
        returns: dict[str, Any] = {}
        retcodes: dict[str, Any] = {}
        for fun, args in zip(funs, groups, strict=True):
            one, _missing = self._one(fun, args, {**data, "fun": fun, "arg": args})
            returns[fun] = one.get("return")
            retcodes[fun] = one.get("retcode", 0)
        return {"return": returns, "retcode": retcodes,
                "success": not any(retcodes.values())}

    def _one(self, fun: str, arg: list[Any], data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        import salt.defaults.exitcodes as codes
        import salt.exceptions as exc
        import salt.minion

        functions = self.functions
        if fun not in functions:
            return self._missing(fun), True
        func = functions[fun]
        failed = {"retcode": codes.EX_GENERIC, "success": False, "out": "nested"}
        why = unserved(fun)
        if why is not None:
            return {"return": f"ERROR executing '{fun}': {why}", **failed}, False
        try:
            args, kwargs = salt.minion.load_args_and_kwargs(func, arg, data)
            functions.pack["__context__"]["retcode"] = 0
            executors = self.opts.get("module_executors") or ["direct_call"]
            value = None
            for name in executors:
                value = self.executors[f"{name}.execute"](self.opts, data, func, args, kwargs)
                if value is not None:
                    break
            if isinstance(value, types.GeneratorType):
                value = _collect(value)
        except exc.CommandNotFoundError as err:
            return {"return": f"Command required for '{fun}' not found: {err}", **failed}, False
        except exc.CommandExecutionError as err:
            return {"return": f"ERROR: {err}", **failed}, False
        except (exc.SaltInvocationError, exc.SaltClientError) as err:
            return {"return": f"ERROR executing '{fun}': {err}", **failed}, False
        except TypeError as err:
            text = f"Passed invalid arguments to {fun}: {err}\n{func.__doc__ or ''}"
            return {"return": text, **failed}, False
        except Exception:  # noqa: BLE001 - any failure of the function is its return
            log.warning("The minion function caused an exception", exc_info=True)
            text = f"The minion function caused an exception: {traceback.format_exc()}"
            return {"return": text, **failed}, False
        retcode = functions.pack["__context__"].get("retcode", codes.EX_OK)
        if retcode == codes.EX_OK and isinstance(value, dict):
            try:
                if not all(value.get(key, True) for key in ("result", "success")):
                    retcode = codes.EX_GENERIC
            except Exception:  # noqa: BLE001 - Salt's own guard
                pass
        ret: dict[str, Any] = {"return": value, "retcode": retcode,
                               "success": retcode == codes.EX_OK}
        outputter = getattr(func, "__outputter__", None)
        if isinstance(outputter, str):
            ret["out"] = outputter
        return ret, False

    def _missing(self, fun: str) -> dict[str, Any]:
        """Salt's answer to an unknown function: the docs of similar ones, or why not."""
        functions = self.functions
        docs = functions["sys.doc"](f"{fun}*") if "sys.doc" in functions else {}
        if docs:
            docs[fun] = functions.missing_fun_string(fun)
            value: Any = docs
        else:
            value = functions.missing_fun_string(fun)
            reason = functions.missing_modules.get(fun.split(".")[0])
            if reason:
                value += f" Possible reasons: '{reason}'"
        return {"return": value, "retcode": 1, "success": False, "out": "nested"}


def salt_loader_returners(opts: Mapping[str, Any]) -> returners.SaltReturners:
    """Salt's returners for a raetsalt minion with ``opts``, built with Salt's loader when
    first asked (in a job's process); None without the salt extra."""

    def build() -> Mapping[str, Any] | None:
        try:
            import salt.loader  # noqa: F401 - only whether Salt is there
        except ImportError:
            return None
        config = {key: opts.get(key) for key in CONFIG_KEYS}
        config.update(returners.module_settings(opts))
        found: Mapping[str, Any] = SaltRuntime(config).returners()
        return found

    return build


def _fire_master(opts: Mapping[str, Any]) -> returners.FireMaster:
    def fire(tag: str, data: dict[str, Any]) -> bool:
        with raet_event.MinionEvent({"id": str(opts["id"]), "sock_dir": str(opts["sock_dir"])},
                                    listen=False) as bus:
            return bus.fire_master(data, tag)

    return fire


def _collect(values: types.GeneratorType[Any, None, None]) -> Any:
    """A generator's yields as Salt's minion joins them: dicts merged, else a list."""
    merged: Any = {}
    for single in values:
        if isinstance(single, dict) and isinstance(merged, dict):
            merged.update(single)
        else:
            merged = [merged] if isinstance(merged, dict) and merged else merged or []
            merged.append(single)
    return merged
