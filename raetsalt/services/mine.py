"""The Salt mine on the master, sans-IO: what minions published (``_mine``,
``_mine_delete``, ``_mine_flush``) and what they may read of it (``_mine_get``).

Salt's ``mine`` module on a minion sends these loads through Salt's request channel
(raetsalt's, ``raetsalt.saltbridge``); the requester is always the road's authenticated
id, never the load's ``id``.  ``MineStore.get`` follows Salt's master:

* the master's ``mine_get`` rules (``{minion id regex: [function regexes]}``), when set,
  decide which functions a minion may read.  Salt answers a denial with ``{}`` (the same
  as "no data"); raetsalt raises ``MineDenied`` naming the functions, so the caller's
  ``mine.get`` fails saying why (a denial is loud, as with peer);
* the target (``tgt``, ``tgt_type``) is matched with raetsalt's targeting over the
  minions' grains and pillar;
* an item stored with a minion-side ACL (Salt's ``__saltmine_acl__`` wrapping with
  ``allow_tgt``/``allow_tgt_type``) is given only to minions its target matches;
* one function: ``{minion: data}``; several (a list or a comma list): ``{fun: {minion:
  data}}``.

Bounds: ``MAX_FUNCTIONS`` functions and ``MAX_MINION_BYTES`` (the size the caller
measures) per minion; a store beyond is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from raetsalt.errors import TargetError
from raetsalt.targeting import MinionFacts, match_bounds

ACL_ID = "__saltmine_acl__"
ACL_DATA = "__data__"
MAX_FUNCTIONS = 256
MAX_MINION_BYTES = 4 << 20
MAX_FUN_LENGTH = 256


class MineDenied(Exception):
    """A ``_mine_get`` the master's ``mine_get`` rules refuse (the text says why)."""


class MineRefused(Exception):
    """A malformed or too large mine load."""


class MineStore:
    """Every minion's mine data (``data[minion][function]``)."""

    def __init__(self, rules: Mapping[str, Any] | None,
                 size: Callable[[Any], int]) -> None:
        self.rules = rules
        self.size = size
        self.data: dict[str, dict[str, Any]] = {}

    def store(self, minion: str, load: Mapping[str, Any]) -> bool:
        data = load.get("data")
        if not isinstance(data, Mapping) or not all(
                isinstance(k, str) and 0 < len(k) <= MAX_FUN_LENGTH for k in data):
            raise MineRefused("mine data must map function names to values")
        merged = dict(data) if load.get("clear") else {**self.data.get(minion, {}), **data}
        if len(merged) > MAX_FUNCTIONS:
            raise MineRefused(f"more than {MAX_FUNCTIONS} mine functions")
        if self.size(merged) > MAX_MINION_BYTES:
            raise MineRefused(f"mine data larger than {MAX_MINION_BYTES} bytes")
        self.data[minion] = merged
        return True

    def delete(self, minion: str, load: Mapping[str, Any]) -> bool:
        fun = load.get("fun")
        if not isinstance(fun, str):
            raise MineRefused("_mine_delete names no function")
        self.data.get(minion, {}).pop(fun, None)
        return True

    def flush(self, minion: str) -> bool:
        self.data.pop(minion, None)
        return True

    def forget(self, minion: str) -> None:
        """The minion's key was deleted."""
        self.data.pop(minion, None)

    def get(self, requester: str, load: Mapping[str, Any], table: Mapping[str, MinionFacts],
            nodegroups: Mapping[str, Any]) -> dict[str, Any]:
        tgt = load.get("tgt")
        fun = load.get("fun")
        if isinstance(fun, str):
            functions = list(dict.fromkeys(f.strip() for f in fun.split(",") if f.strip()))
            keyed = len(functions) > 1
        elif isinstance(fun, list) and all(isinstance(f, str) for f in fun):
            functions, keyed = list(fun), True
        else:
            raise MineRefused("_mine_get needs fun (a name or a list)")
        if not isinstance(tgt, str | list):
            raise MineRefused("_mine_get needs tgt")
        tgt_type = load.get("tgt_type") or load.get("expr_form") or "glob"
        if not isinstance(tgt_type, str):
            raise MineRefused("tgt_type must be a string")
        allowed = self._allowed(requester, functions)
        try:
            minions = match_bounds(tgt, tgt_type, table, nodegroups).definite
        except TargetError as exc:
            raise MineRefused(f"invalid target: {exc}") from None
        out: dict[str, Any] = {}
        for minion in sorted(minions):
            stored = self.data.get(minion)
            if not stored:
                continue
            for function in allowed:
                if function not in stored:
                    continue
                value = stored[function]
                if isinstance(value, Mapping) and ACL_ID in value:
                    if not _acl_allows(value, requester, table, nodegroups):
                        continue
                    value = value.get(ACL_DATA)
                if keyed:
                    out.setdefault(function, {})[minion] = value
                else:
                    out[minion] = value
        return out

    def _allowed(self, requester: str, functions: list[str]) -> list[str]:
        if self.rules is None:
            return functions
        perms: list[str] = []
        for pattern, rules in self.rules.items():
            if _rx_match(str(pattern), requester) and isinstance(rules, list):
                perms.extend(str(r) for r in rules)
        allowed = [f for f in functions if any(_rx_match(rule, f) for rule in perms)]
        if not allowed:
            raise MineDenied(
                f"mine.get of {', '.join(functions)} by {requester} is denied by the "
                "master's mine_get rules" + ("" if perms else
                                             f" (no rule matches {requester})"))
        return allowed


def _rx_match(pattern: str, text: str) -> bool:
    try:
        return re.match(pattern, text) is not None
    except re.error:
        return False


def _acl_allows(item: Mapping[str, Any], requester: str, table: Mapping[str, MinionFacts],
                nodegroups: Mapping[str, Any]) -> bool:
    target = item.get("allow_tgt")
    if target is None:
        return True
    try:
        allowed = match_bounds(target, str(item.get("allow_tgt_type") or "glob"), table,
                               nodegroups).definite
    except TargetError:
        return False
    return requester in allowed
