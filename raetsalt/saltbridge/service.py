"""The master's side of the Salt bridge, sans-IO: Salt's file server and pillar requests
from minions, and each minion's pillar.

A Salt job on a minion talks to "the master" through Salt's request channel; raetsalt
puts its own channel under Salt (``raetsalt.saltbridge.channel``), whose loads reach the
master over the road as ``salt_req {rid, load}`` (relayed by the minion daemon,
``raetsalt.services.peer``).  ``SaltRequests`` decides everything about them:

* only the commands in ``COMMANDS`` are served (Salt's fileclient and pillar commands);
  anything else is refused by name;
* every field is checked before use: ``saltenv`` names, paths (``paths.clean_relpath``:
  relative, no ``..``), offsets, gzip levels, prefixes, a pillar override's size
  (``MAX_OVERRIDE_BYTES``);
* work that touches the disk or renders templates becomes a ``ToWorker`` action (the
  daemon's worker processes do it: ``raetsalt.saltbridge.worker``) and its result comes
  back through ``on_result``; a minion may have ``MAX_INFLIGHT_PER_MINION`` such requests
  in flight (``MAX_PILLAR_PER_MINION`` pillar compiles), the master ``MAX_INFLIGHT``; a
  late worker is restarted (``RestartWorker``) and its requests fail;
* the requester is the road's authenticated id, never a field of the load: a minion
  gets its own pillar and nobody else's.

Pillar: after every hello (grains reported) and on ``pillar_refresh`` from a minion, the
master compiles that minion's pillar and pushes it (road ``pillar``); it keeps the last
one per minion in ``pillars`` for ``-I``/``I@`` targeting.  Drops and refusals are
counted in ``stats`` under ``SaltRequestDrop`` names and logged at most once per
``LOG_EVERY`` seconds per reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from raetsalt import protocol as p
from raetsalt.services.master import ToMinion

from .paths import PathRefused, clean_relpath, valid_saltenv

log = logging.getLogger(__name__)

MAX_INFLIGHT_PER_MINION = 16
MAX_PILLAR_PER_MINION = 2
"""Pillar compiles a minion may have in flight (they are the expensive requests)."""
MAX_INFLIGHT = 1024
MAX_PILLAR_BYTES = 4 << 20
"""Largest pillar (msgpack bytes) the master sends."""
MAX_OVERRIDE_BYTES = 64 << 10
"""Largest ``pillar_override`` a minion may send (requests in flight stay small)."""
MAX_LOC = 1 << 62
FILE_TIMEOUT = 30.0
PILLAR_TIMEOUT = 120.0
LOG_EVERY = 60.0

FILE_COMMANDS: dict[str, str] = {
    "_file_hash": "hash",
    "_file_hash_and_stat": "hash",
    "_file_find": "find",
    "_serve_file": "serve",
    "_file_list": "files",
    "_dir_list": "dirs",
    "_file_list_emptydirs": "empty_dirs",
}
"""Salt fileclient commands -> what the file worker does for them."""
COMMANDS = frozenset({*FILE_COMMANDS, "_symlink_list", "_file_envs", "_master_opts",
                      "_master_tops", "_ext_nodes", "_pillar", "_file_recv"})


class SaltRequestDrop(StrEnum):
    """Why a minion's Salt request was dropped or refused (``SaltRequests.stats``)."""

    NOT_A_REQUEST = "salt_not_a_request"  # no rid / not a mapping: dropped unanswered
    BAD_LOAD = "salt_bad_load"  # a field of the load is missing or of the wrong kind
    UNKNOWN_COMMAND = "salt_unknown_command"
    REFUSED_PATH = "salt_refused_path"  # leaves file_roots (.., absolute, symlink out)
    BUSY = "salt_busy"  # too many requests in flight (per minion or in all)
    TOO_LARGE = "salt_too_large"  # pillar or override above MAX_PILLAR_BYTES
    WORKER_FAILED = "salt_worker_failed"  # the worker failed, died or was late


@dataclass(frozen=True, slots=True)
class ToWorker:
    """Ask the ``kind`` worker (``'files'``/``'pillar'``) to run ``op``; answer with
    ``on_result(op_id, ...)``."""

    kind: str
    op_id: int
    op: str
    args: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RestartWorker:
    """The ``kind`` worker is late: kill it (``on_worker_lost`` follows)."""

    kind: str


Action = ToMinion | ToWorker | RestartWorker


class _Refusal(Exception):
    def __init__(self, reason: SaltRequestDrop, text: str) -> None:
        super().__init__(text)
        self.reason = reason


@dataclass(slots=True)
class _Op:
    minion: str
    kind: str
    deadline: float
    rid: str | None = None
    """The relay id of the request it answers; None for a pillar push."""
    form: str = ""


@dataclass(slots=True)
class _PillarState:
    busy: bool = False
    again: bool = False


class SaltRequests:
    """The Salt requests of one master (``opts``: its config; ``estate``: its road name)."""

    def __init__(self, opts: Mapping[str, Any], *, estate: str | None = None) -> None:
        self.opts = opts
        self.estate = estate
        self.pillars: dict[str, dict[str, Any]] = {}
        """Minion id -> the pillar last compiled for it (for pillar targeting)."""
        self.pillar_changed: Callable[[str, dict[str, Any]], None] = lambda m, p: None
        """Told of each pillar compiled (a cluster shares it with the other masters)."""
        self.stats: Counter[str] = Counter()
        self._ops: dict[int, _Op] = {}
        self._next_id = 0
        self._pillar: dict[str, _PillarState] = {}
        self._logged: dict[str, float] = {}

    # -- minions ------------------------------------------------------------------------

    def on_request(self, minion: str, body: Mapping[str, Any], now: float,
                   grains: Mapping[str, Any] | None = None) -> list[Action]:
        """Road ``salt_req`` from ``minion`` (the road's id); ``grains`` are the ones it
        last reported (for ``_pillar``)."""
        rid = body.get("rid")
        load = body.get("load")
        if not isinstance(rid, str) or len(rid) > 64 or not isinstance(load, Mapping):
            self._count(SaltRequestDrop.NOT_A_REQUEST, now, f"malformed request from {minion}")
            return []
        try:
            return self._dispatch(minion, rid, load, now, grains or {})
        except _Refusal as exc:
            self._count(exc.reason, now, f"{minion}: {exc}")
            return [self._answer(minion, rid, error=str(exc),
                                 refused=exc.reason is SaltRequestDrop.REFUSED_PATH)]

    def on_hello(self, minion: str, grains: Mapping[str, Any], now: float,
                 roots_exist: bool) -> list[Action]:
        """A minion reported its grains: compile its pillar and push it.  Without any
        ``pillar_roots`` directory (``roots_exist`` false) its pillar is empty."""
        return self._refresh(minion, grains, now, roots_exist)

    def on_pillar_refresh(self, minion: str, grains: Mapping[str, Any], now: float,
                          roots_exist: bool) -> list[Action]:
        """Road ``pillar_refresh`` (``saltutil.refresh_pillar`` on the minion)."""
        return self._refresh(minion, grains, now, roots_exist)

    # -- workers --------------------------------------------------------------------------

    def on_result(self, op_id: int, result: Mapping[str, Any], now: float,
                  grains: Mapping[str, Any] | None = None) -> list[Action]:
        """A worker answered op ``op_id``: ``{ret}``, ``{refused}`` or ``{error}``."""
        op = self._ops.pop(op_id, None)
        if op is None:
            return []  # answered after its time-out
        if op.rid is None:
            return self._pushed(op.minion, result, now, grains)
        if "ret" in result:
            ret = result["ret"]
            if op.form == "pillar" and (not isinstance(ret, dict) or _too_large(ret)):
                self._count(SaltRequestDrop.TOO_LARGE, now, f"pillar of {op.minion}")
                return [self._answer(op.minion, op.rid,
                                     error=f"the pillar is larger than {MAX_PILLAR_BYTES} bytes")]
            return [self._answer(op.minion, op.rid, ret=ret)]
        if "refused" in result:
            self._count(SaltRequestDrop.REFUSED_PATH, now, f"{op.minion}: {result['refused']}")
            return [self._answer(op.minion, op.rid, error=str(result["refused"]), refused=True)]
        self._count(SaltRequestDrop.WORKER_FAILED, now, f"{op.kind} worker: {result.get('error')}")
        return [self._answer(op.minion, op.rid, error=f"the master failed to serve the request: "
                                                      f"{result.get('error')}")]

    def on_worker_lost(self, kind: str, now: float) -> list[Action]:
        """The ``kind`` worker died (or was killed): its requests fail."""
        actions: list[Action] = []
        for op_id in [i for i, op in self._ops.items() if op.kind == kind]:
            actions.extend(self.on_result(op_id, {"error": f"the {kind} worker stopped"}, now))
        return actions

    def get_timer(self) -> float | None:
        return min((op.deadline for op in self._ops.values()), default=None)

    def handle_timer(self, now: float) -> list[Action]:
        late = {op.kind for op in self._ops.values() if op.deadline <= now}
        return [RestartWorker(kind) for kind in sorted(late)]

    def op_minion(self, op_id: int) -> str | None:
        """The minion op ``op_id`` works for (None once answered)."""
        op = self._ops.get(op_id)
        return None if op is None else op.minion

    def inflight(self, minion: str | None = None) -> int:
        return sum(1 for op in self._ops.values() if minion is None or op.minion == minion)

    # -- internals ------------------------------------------------------------------------

    def _dispatch(self, minion: str, rid: str, load: Mapping[str, Any], now: float,
                  grains: Mapping[str, Any]) -> list[Action]:
        cmd = load.get("cmd")
        if cmd is None:
            raise _Refusal(SaltRequestDrop.UNKNOWN_COMMAND, "the request names no command")
        if not isinstance(cmd, str) or cmd not in COMMANDS:
            shown = cmd[:64] if isinstance(cmd, str) else type(cmd).__name__
            raise _Refusal(SaltRequestDrop.UNKNOWN_COMMAND,
                           f"{shown!r} is not a command the raetsalt master serves")
        if cmd == "_file_envs":
            return [self._answer(minion, rid, ret=sorted(self._file_roots()))]
        if cmd == "_master_opts":
            return [self._answer(minion, rid, ret=self.master_opts(bool(load.get("env_only"))))]
        if cmd in ("_master_tops", "_ext_nodes", "_symlink_list"):
            return [self._answer(minion, rid, ret={})]
        if cmd == "_file_recv":
            # cp.push: Salt's master with file_recv off (raetsalt has no file_recv) answers
            # False, and cp.push returns it.
            return [self._answer(minion, rid, ret=False)]
        if cmd == "_pillar":
            return self._pillar_request(minion, rid, load, now, grains)
        form = FILE_COMMANDS[cmd]
        saltenv = _field(load, "saltenv", valid_saltenv, "base")
        if form in ("files", "dirs", "empty_dirs"):
            prefix = _field(load, "prefix", _prefix, "")
            args: dict[str, Any] = {"saltenv": saltenv, "prefix": prefix, "form": form}
            op = "list"
        else:
            if load.get("path") is None:
                raise _Refusal(SaltRequestDrop.BAD_LOAD, "the request names no path")
            args = {"saltenv": saltenv, "path": _field(load, "path", clean_relpath, "")}
            op = form
            if form == "serve":
                args["loc"] = _field(load, "loc", _offset, 0)
                args["gzip"] = _field(load, "gzip", _gzip_level, None)
        if saltenv not in self._file_roots():
            return [self._answer(minion, rid, ret=_EMPTY[form])]  # Salt: nothing there
        return self._start(minion, rid, "files", op, args, now, FILE_TIMEOUT, form)

    def _pillar_request(self, minion: str, rid: str, load: Mapping[str, Any], now: float,
                        grains: Mapping[str, Any]) -> list[Action]:
        override = load.get("pillar_override") or {}
        if not isinstance(override, Mapping):
            raise _Refusal(SaltRequestDrop.BAD_LOAD, "pillar_override must be a mapping")
        if _too_large(override, MAX_OVERRIDE_BYTES):
            raise _Refusal(SaltRequestDrop.TOO_LARGE,
                           f"pillar_override is larger than {MAX_OVERRIDE_BYTES} bytes")
        pillarenv = _field(load, "pillarenv", valid_saltenv, None)
        args = {"minion": minion, "grains": dict(grains), "pillarenv": pillarenv,
                "override": dict(override)}
        return self._start(minion, rid, "pillar", "pillar", args, now, PILLAR_TIMEOUT, "pillar")

    def _start(self, minion: str, rid: str | None, kind: str, op: str, args: dict[str, Any],
               now: float, timeout: float, form: str) -> list[Action]:
        pillar_ops = sum(1 for o in self._ops.values()
                         if o.minion == minion and o.kind == "pillar" and o.rid is not None)
        if rid is not None and (self.inflight(minion) >= MAX_INFLIGHT_PER_MINION
                                or len(self._ops) >= MAX_INFLIGHT
                                or (kind == "pillar" and pillar_ops >= MAX_PILLAR_PER_MINION)):
            raise _Refusal(SaltRequestDrop.BUSY, "the master is busy: too many requests "
                                                 "in flight, try again")
        self._next_id += 1
        self._ops[self._next_id] = _Op(minion, kind, now + timeout, rid, form)
        return [ToWorker(kind, self._next_id, op, args)]

    def _refresh(self, minion: str, grains: Mapping[str, Any], now: float,
                 roots_exist: bool) -> list[Action]:
        state = self._pillar.setdefault(minion, _PillarState())
        if state.busy:
            state.again = True
            return []
        if not roots_exist:
            self.pillars[minion] = {}
            self.pillar_changed(minion, {})
            return [self._push(minion, {})]
        state.busy = True
        args = {"minion": minion, "grains": dict(grains), "pillarenv": None, "override": {}}
        return self._start(minion, None, "pillar", "pillar", args, now, PILLAR_TIMEOUT,
                           "pillar")

    def _pushed(self, minion: str, result: Mapping[str, Any], now: float,
                grains: Mapping[str, Any] | None) -> list[Action]:
        state = self._pillar.setdefault(minion, _PillarState())
        state.busy = False
        actions: list[Action] = []
        ret = result.get("ret")
        if isinstance(ret, dict) and not _too_large(ret):
            self.pillars[minion] = ret
            self.pillar_changed(minion, ret)
            actions.append(self._push(minion, ret))
        else:
            reason = (SaltRequestDrop.TOO_LARGE if isinstance(ret, dict)
                      else SaltRequestDrop.WORKER_FAILED)
            self._count(reason, now, f"pillar of {minion} not compiled: "
                                      f"{result.get('error') or result.get('refused') or 'size'}")
        if state.again:
            state.again = False
            actions.extend(self._refresh(minion, grains or {}, now, True))
        return actions

    def master_opts(self, env_only: bool = False) -> dict[str, Any]:
        """What Salt's ``_master_opts`` tells a minion (saltenv names, not directories)."""
        opts = self.opts
        mopts: dict[str, Any] = {
            "file_roots": {env: [] for env in sorted(self._file_roots())},
            "top_file_merging_strategy": "merge", "env_order": [], "default_top": "base",
        }
        if env_only:
            return mopts
        top = str(opts.get("state_top", "top.sls"))
        mopts.update({
            "renderer": opts.get("renderer", "jinja|yaml"), "failhard": False,
            "state_top": top if top.startswith("salt://") else f"salt://{top.lstrip('/')}",
            "state_top_saltenv": None, "nodegroups": dict(opts.get("nodegroups") or {}),
            "state_auto_order": True, "state_events": False, "state_aggregate": False,
            "jinja_env": {}, "jinja_sls_env": {}, "jinja_lstrip_blocks": False,
            "jinja_trim_blocks": False,
        })
        return mopts

    def _file_roots(self) -> Mapping[str, Any]:
        roots = self.opts.get("file_roots") or {}
        return roots if isinstance(roots, Mapping) else {}

    def _answer(self, minion: str, rid: str, **fields: Any) -> ToMinion:
        return ToMinion(minion, p.road_message(self.estate, None, p.SHARE_SALT_RET, rid=rid,
                                               **fields))

    def _push(self, minion: str, pillar: dict[str, Any]) -> ToMinion:
        return ToMinion(minion, p.road_message(self.estate, None, p.SHARE_PILLAR,
                                               pillar=pillar))

    def _count(self, reason: SaltRequestDrop, now: float, detail: str) -> None:
        self.stats[reason.value] += 1
        last = self._logged.get(reason.value)
        if last is None or now - last >= LOG_EVERY:
            self._logged[reason.value] = now
            log.warning("salt request %s (%s; %d so far)", reason.value.removeprefix("salt_"),
                        detail[:200], self.stats[reason.value])


_EMPTY: dict[str, Any] = {"hash": {}, "find": {"path": "", "rel": ""},
                          "serve": {"data": b"", "dest": ""}, "files": [], "dirs": [],
                          "empty_dirs": []}


def _field(load: Mapping[str, Any], key: str, check: Any, default: Any) -> Any:
    value = load.get(key)
    if value is None:
        return default
    try:
        return check(value)
    except PathRefused as exc:
        reason = SaltRequestDrop.REFUSED_PATH if key == "path" else SaltRequestDrop.BAD_LOAD
        raise _Refusal(reason, str(exc)) from None


def _prefix(value: Any) -> str:
    clean_relpath(value, allow_empty=True)  # a prefix is only a filter, but a sane one
    return str(value)


def _offset(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_LOC:
        raise PathRefused("loc must be a byte offset")
    return value


def _gzip_level(value: Any) -> int | None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 9:
        raise PathRefused("gzip must be a level from 0 to 9")
    return value or None


def _too_large(value: Any, limit: int = MAX_PILLAR_BYTES) -> bool:
    try:
        return len(msgpack.packb(value)) > limit
    except (TypeError, ValueError, OverflowError):
        return True
