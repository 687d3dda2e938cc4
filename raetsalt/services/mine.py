"""The master's side of Salt's mine, sans-IO: what minions store with ``mine.send`` /
``mine.update`` and read with ``mine.get``.

A minion's mine functions reach the master as Salt's own request loads, whichever way
the minion runs them (Salt's ``mine`` module through the zygote, or raetsalt's native
``mine`` module): ``salt_req {rid, load}`` over the road, ``load`` one of

* ``{cmd: '_mine', data: {function: value}, clear}``: merge ``data`` into the sender's
  mine (``clear``: replace it);
* ``{cmd: '_mine_delete', fun}`` / ``{cmd: '_mine_flush'}``: forget one function / all;
* ``{cmd: '_mine_get', tgt, fun, tgt_type}``: the values of ``fun`` (a name, a
  comma-separated string or a list) of every minion ``tgt`` matches: ``{minion: value}``
  for one function, ``{function: {minion: value}}`` for several (Salt's shapes).

The answer is ``salt_ret {rid, ret}`` (``ret`` True for the writes) or
``salt_ret {rid, error}``.  Whose mine is written is the road's authenticated id, never
the load's ``id``.

The master's ``mine_get`` option (Salt's: minion-id regex -> list of function regexes,
matched at the start) limits what each minion may read; without the option every
minion may read everything, as in Salt.  Unlike Salt, which answers a refused read with
an empty ``{}``, a read that asks for a function the rules do not grant fails: the
minion's ``mine.get`` errors with the function and the reason, the master logs it
(warning, at most 20 lines a minute per minion) and fires
``raetsalt/mine_get/<id>/denied`` (``{id, fun, tgt, tgt_type, reason, _stamp}``).
Salt's minion-side ACL (``allow_tgt``/``allow_tgt_type`` in a mine function's
definition) is honoured: such an entry is only given to minions that target matches.

Bounds: a minion's whole mine is at most ``MAX_MINE_BYTES`` (msgpack) and
``MAX_FUNCTIONS`` entries; a write beyond is refused with the reason.  The store
(``MineStore``) keeps each minion's mine across master restarts; a write that the store
could not keep is answered with the error, never True.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from raetsalt import protocol as p
from raetsalt.errors import KeepError, LocalError, TargetError
from raetsalt.log import Throttle, clip
from raetsalt.timefmt import salt_stamp
from raetsalt.wire.body import encode_body
from raetsalt.wire.enums import BodyKind

from .master import Action, Fire, ToMinion

log = logging.getLogger(__name__)

COMMANDS = frozenset({"_mine", "_mine_get", "_mine_delete", "_mine_flush"})
MAX_MINE_BYTES = 1 << 20
"""The largest mine one minion may keep (msgpack bytes of all its functions)."""
MAX_FUNCTIONS = 512
"""The most functions one minion's mine may hold (and one ``mine.get`` may ask for)."""
ACL_ID = "__saltmine_acl__"
ACL_DATA = "__data__"


class MineStore(Protocol):
    """Where each minion's mine outlives a master restart
    (``raetsalt.daemon.datacache.MineCache``).  Writes raise ``OSError``/``KeepError``."""

    def load_all(self) -> dict[str, dict[str, Any]]: ...

    def save(self, minion: str, data: Mapping[str, Any]) -> None: ...

    def remove(self, minion: str) -> None: ...


class _Refused(Exception):
    pass


def is_mine_request(body: Mapping[str, Any]) -> bool:
    """Whether a ``salt_req`` body carries one of the mine's loads."""
    load = body.get("load")
    return isinstance(load, Mapping) and load.get("cmd") in COMMANDS


class MasterMine:
    """The mine of one master.

    :param opts: the master's options (``mine_get``).
    :param store: the persistent copy (None: memory only).
    :param targeted: the accepted minions a target matches (``MasterJobs.targeted``);
        raises ``TargetError`` for a bad target.
    """

    def __init__(self, opts: Mapping[str, Any], store: MineStore | None,
                 targeted: Callable[[Any, str], list[str]], *, estate: str | None = None,
                 utcnow: Callable[[], datetime] | None = None) -> None:
        self.opts = opts
        self.store = store
        self.targeted = targeted
        self.estate = estate
        self.utcnow = utcnow
        self.mines: dict[str, dict[str, Any]] = store.load_all() if store else {}
        self.stats: Counter[str] = Counter()
        self._denial_log = Throttle(60.0, burst=20)

    def on_request(self, minion: str, body: Mapping[str, Any], now: float) -> list[Action]:
        """A ``salt_req`` whose load is a mine command, from ``minion`` (the road's id)."""
        rid = body.get("rid")
        load = body.get("load")
        if not isinstance(rid, str) or len(rid) > 64 or not isinstance(load, Mapping):
            self.stats["mine_malformed"] += 1
            return []
        cmd = load.get("cmd")
        try:
            if cmd == "_mine":
                return [self._answer(minion, rid, ret=self._store(minion, load))]
            if cmd == "_mine_delete":
                return [self._answer(minion, rid, ret=self._delete(minion, load))]
            if cmd == "_mine_flush":
                return [self._answer(minion, rid, ret=self._flush(minion))]
            return self._get(minion, rid, load, now)
        except _Refused as exc:
            self.stats[f"mine_refused_{str(cmd).lstrip('_')}"[:40]] += 1
            return [self._answer(minion, rid, error=str(exc))]

    # -- writes -----------------------------------------------------------------------

    def _store(self, minion: str, load: Mapping[str, Any]) -> bool:
        data = load.get("data")
        if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
            raise _Refused("mine data must be a mapping of function names to values")
        mine = {} if load.get("clear") else dict(self.mines.get(minion, {}))
        mine.update(data)
        if len(mine) > MAX_FUNCTIONS:
            raise _Refused(f"the mine of {minion} would hold {len(mine)} functions; "
                           f"the master keeps at most {MAX_FUNCTIONS}")
        size = _packed_size(mine)
        if size is None:
            raise _Refused("mine data must be plain values (maps, lists, strings, numbers)")
        if size > MAX_MINE_BYTES:
            raise _Refused(f"the mine of {minion} would be {size} bytes; the master keeps "
                           f"at most {MAX_MINE_BYTES} per minion")
        self._keep(minion, mine)
        return True

    def _delete(self, minion: str, load: Mapping[str, Any]) -> bool:
        fun = load.get("fun")
        if not isinstance(fun, str):
            raise _Refused("mine.delete needs the name of a function")
        mine = self.mines.get(minion)
        if mine is None:
            return False  # Salt: no mine data at all
        if fun in mine:
            mine = {k: v for k, v in mine.items() if k != fun}
            self._keep(minion, mine)
        return True

    def _flush(self, minion: str) -> bool:
        if self.store is not None:
            try:
                self.store.remove(minion)
            except (OSError, KeepError) as exc:
                raise _Refused(f"the master could not flush the mine: {exc}") from None
        self.mines.pop(minion, None)
        return True

    def _keep(self, minion: str, mine: dict[str, Any]) -> None:
        if self.store is not None:
            try:
                self.store.save(minion, mine)
            except (OSError, KeepError) as exc:
                raise _Refused(f"the master could not store the mine: {exc}") from None
        self.mines[minion] = mine

    def forget(self, minion: str) -> None:
        """The minion's key was deleted: its mine goes too."""
        self.mines.pop(minion, None)
        if self.store is not None:
            try:
                self.store.remove(minion)
            except (OSError, KeepError) as exc:
                log.warning("the mine of %s not removed: %s", clip(minion), exc)

    # -- reads ------------------------------------------------------------------------

    def _get(self, minion: str, rid: str, load: Mapping[str, Any], now: float
             ) -> list[Action]:
        tgt = load.get("tgt")
        tgt_type = load.get("tgt_type") or load.get("expr_form") or "glob"
        functions, as_dict = _functions(load.get("fun"))
        if not isinstance(tgt, str | list) or not isinstance(tgt_type, str):
            raise _Refused("mine.get needs a target (tgt) and a target type")
        denied = self._denied(minion, functions)
        if denied:
            return self._deny(minion, rid, denied, tgt, tgt_type, now)
        return [self._answer(minion, rid, ret=self._collect(tgt, tgt_type, functions,
                                                            as_dict, minion))]

    def read(self, tgt: Any, fun: Any, tgt_type: str = "glob") -> dict[str, Any]:
        """The master's own read (the ``mine.get`` runner): no ``mine_get`` rules and no
        minion-side ACL; raises ``ValueError``/``TargetError`` for a bad call."""
        try:
            functions, as_dict = _functions(fun)
        except _Refused as exc:
            raise ValueError(str(exc)) from None
        return self._collect(tgt, tgt_type, functions, as_dict, None)

    def _collect(self, tgt: Any, tgt_type: str, functions: list[str], as_dict: bool,
                 requester: str | None) -> dict[str, Any]:
        try:
            minions = self.targeted(tgt, tgt_type)
        except TargetError as exc:
            if requester is None:
                raise
            raise _Refused(f"mine.get: {exc}") from None
        ret: dict[str, Any] = {}
        allowed_cache: dict[tuple[Any, str], bool] = {}
        for source in minions:
            mine = self.mines.get(source)
            if not mine:
                continue
            for function in functions:
                if function not in mine:
                    continue
                value = mine[function]
                if isinstance(value, dict) and ACL_ID in value:
                    if requester is not None and not self._acl_allows(value, requester,
                                                                      allowed_cache):
                        continue
                    value = value.get(ACL_DATA)
                if as_dict:
                    ret.setdefault(function, {})[source] = value
                else:
                    ret[source] = value
        return ret

    def _acl_allows(self, entry: Mapping[str, Any], requester: str,
                    cache: dict[tuple[Any, str], bool]) -> bool:
        allow_tgt = entry.get("allow_tgt")
        if not allow_tgt:
            return True
        allow_type = entry.get("allow_tgt_type") or "glob"
        key = (repr(allow_tgt), str(allow_type))
        if key not in cache:
            try:
                cache[key] = requester in self.targeted(allow_tgt, str(allow_type))
            except TargetError:
                cache[key] = False
        return cache[key]

    def _denied(self, minion: str, functions: list[str]) -> list[str]:
        """The functions the ``mine_get`` rules do not grant ``minion`` (none without
        rules)."""
        rules = self.opts.get("mine_get")
        if rules is None:
            return []
        grants: list[str] = []
        if isinstance(rules, Mapping):
            for pattern, perms in rules.items():
                if _match(str(pattern), minion) and isinstance(perms, list):
                    grants.extend(str(perm) for perm in perms)
        return [f for f in functions if not any(_match(g, f) for g in grants)]

    def _deny(self, minion: str, rid: str, denied: list[str], tgt: Any, tgt_type: str,
              now: float) -> list[Action]:
        names = ", ".join(clip(f) for f in denied[:5]) + (" ..." if len(denied) > 5 else "")
        reason = (f"the master's mine_get rules do not allow {minion} to read {names}")
        message = f"mine.get of {names} from {clip(tgt)} ({clip(tgt_type, bare=True)}) " \
                  f"denied: {reason}"
        self.stats["mine_get_denied"] += 1
        times = self._denial_log.note(minion, now)
        if times:
            log.warning("mine_get %s: %s%s", clip(minion), message,
                        f" [{times} denials since the last report]" if times > 1 else "")
        actions: list[Action] = [self._answer(minion, rid, error=message, denied=True)]
        if self.utcnow is not None:
            data = {"id": minion, "fun": [f[:200] for f in denied[:5]],
                    "tgt": tgt[:200] if isinstance(tgt, str) else [str(t)[:200] for t in tgt[:20]],
                    "tgt_type": tgt_type[:40], "reason": reason,
                    "_stamp": salt_stamp(self.utcnow())}
            actions.append(Fire(f"raetsalt/mine_get/{minion}/denied", data))
        return actions

    def _answer(self, minion: str, rid: str, **fields: Any) -> ToMinion:
        return ToMinion(minion, p.road_message(self.estate, None, p.SHARE_SALT_RET, rid=rid,
                                               **fields))


def _functions(fun: Any) -> tuple[list[str], bool]:
    """The functions a ``mine.get`` asks for, and whether the answer is keyed by function
    (several functions, or a list)."""
    if isinstance(fun, str):
        functions = list(dict.fromkeys(f for f in fun.split(",") if f))
        as_dict = len(functions) > 1
    elif isinstance(fun, list) and all(isinstance(f, str) for f in fun):
        functions, as_dict = list(dict.fromkeys(fun)), True
    else:
        raise _Refused("mine.get needs a function name, a comma-separated string or a "
                       "list of names")
    if len(functions) > MAX_FUNCTIONS:
        raise _Refused(f"mine.get asks for {len(functions)} functions; at most "
                       f"{MAX_FUNCTIONS}")
    return functions, as_dict


def _match(pattern: str, value: str) -> bool:
    """Salt's ``re.match`` (anchored at the start); a bad regex matches nothing."""
    try:
        return re.match(pattern, value) is not None
    except re.error:
        return False


def _packed_size(value: dict[str, Any]) -> int | None:
    """The msgpack size of a mine (what the road and the store carry)."""
    try:
        return len(encode_body(BodyKind.MSGPACK, value))
    except LocalError:
        return None
