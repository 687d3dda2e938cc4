"""Access-control decisions for peer publishing, peer runners, publisher_acl and eauth.

Pure functions: configuration, identity and the minion table come in as arguments,
a :class:`Decision` comes out.  Nothing here reads files, users or clocks, so the
master, ``raetsalt-run acl.explain`` and the tests all get the same answer.

The grammar (Salt 3008, shared by ``peer``, ``publisher_acl`` and ``external_auth``)
-----------------------------------------------------------------------------------
A rule list holds entries of two shapes::

    - 'test.*'                      # function regex: any target
    - 'web* and G@os:Ubuntu':       # target expression (compound) ...
        - 'pkg.*'                   #   ... function regex
        - 'cmd.run':                #   ... function regex with argument rules
            args: ['ls', null]      #   positional: regex per position, null = any
            kwargs: {cwd: '/tmp'}   #   named: regex per key, null = any

* Every regex is applied with :func:`re.match`: **anchored at the start only**.
  ``test.*`` also allows ``testfoo.x``, ``network.ip_addrs`` also allows
  ``network.ip_addrs6``, an id key ``web`` matches ``webserv1`` and an argument rule
  ``ls`` allows ``ls; rm -rf /``.  Add ``$`` for an exact match, or pass
  ``strict=True`` to make every regex a full match.  The ``validate_*`` functions
  return a warning for each regex that looks like an exact name but is not anchored.
* ``peer``: ``{minion-id regex: [entries]}``; the lists of every key that matches the
  requesting minion's id are concatenated, in order.  ``peer_run``:
  ``{minion-id regex: [runner regex | {runner regex: {args, kwargs}}]}``.
* A target key is any compound expression (``*`` = everything); the **whole**
  requested target set must fall inside the key's set.  A target that matches no
  minion passes (empty subset), as in Salt.  ``minions`` must therefore hold every
  accepted minion (id -> cached grains, ``None`` when unknown).  For a minion with
  unknown grains the request must imply the key under every value its grain terms
  could take (:func:`raetsalt.targeting.target_within`), so unknown grains can only
  deny.
* Positional rule ``i`` requires argument ``i`` to exist; arguments beyond the rules
  are not restricted.  Each kwargs rule requires that key; extra kwargs are free.
  A spec may be a list of ``{args, kwargs}`` dicts; any one may match.
* ``publisher_acl`` / ``external_auth`` user keys are globs or full-match regexes;
  ``name%`` keys match a group; the lists of every matching key are concatenated and
  the ``*`` key is used only when no user key matched (unless ``permissive``).  A
  ``publisher_acl_blacklist`` (``users``: glob or full-match regex, ``modules``:
  regex) is checked first, for every user.  Unrestricted users (``root`` and the
  master's own user; the caller passes them) then skip the ACL.
* ``external_auth`` runner/wheel entries: ``@runner``/``@runners`` (``@wheel``...)
  allow every function of that client; ``@<module>`` (e.g. ``@jobs``, ``@manage``)
  every function of that module; ``{'@runner': [regex on module.func | {regex:
  spec}]}`` and ``{'@<module>': [regex on the function name only]}``.

Deliberate divergences from Salt 3008 (all on the safe side)
------------------------------------------------------------
* **Every function of a comma multi-function command must be allowed.**  Salt stops
  at the first allowed function, so ``test.ping,cmd.run`` passed whenever
  ``test.ping`` was allowed, and for eauth/publisher_acl a command *starting* with the
  whitelisted ``saltutil.find_job`` passed with any ACL.  Here the
  ``saltutil.find_job`` whitelist (publisher_acl and eauth only, never peer) applies
  to that one function only and never authorises its neighbours.
* ``fun`` may be a comma string or a list; ``publisher_acl_blacklist`` modules are
  checked against every function of it (Salt matched the blacklist regex against the
  whole comma string, so ``test.ping,cmd.run`` escaped a ``cmd.*`` blacklist).
* **Arguments are parsed before they are checked**: ``k=v`` strings become kwargs
  (Salt's argument parsing rule: an identifier, ``=``, a value) and a trailing
  ``{'__kwarg__': True, ...}`` dict is merged into kwargs.  Salt's peer path checked
  before parsing, so a kwargs rule could never be met by ``publish.publish ... k=v``.
  Values are matched as ``str(value)``; strings are not YAML-typed first.
* ``peer_run`` takes the same ``{runner regex: {args, kwargs}}`` entries as peer
  (Salt crashed on any dict entry); a runner name must have exactly one dot.
* The recursion guard denies any function starting with ``publish.`` (Salt 3008);
  Salt's older ``re.match('publish.*')`` also caught ``publishX``: not reproduced.
* A regex that does not compile never matches (Salt: logs, or the whole request
  fails); ``validate_*`` reports it at start instead.
* Optional ``strict=True``: every regex (ids, functions, arguments) must match fully.

Denial reasons name the requester, the function and what failed (no rule for the id,
no function rule, target outside the allowed expression, arguments not allowed),
never the rules themselves or other minions' permissions, so they can be returned to
the requester.  ``Decision.rule`` names the config rule that decided, for operators
(``raetsalt-run acl.explain``); do not send it to a peer.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raetsalt.errors import ConfigError, TargetError
from raetsalt.targeting import (
    MinionTable,
    Nodegroups,
    target_within,
    validate_target,
)

__all__ = [
    "FIND_JOB_WHITELIST",
    "Decision",
    "check_blacklist",
    "check_eauth",
    "check_peer",
    "check_peer_run",
    "check_publisher_acl",
    "check_publisher_acl_runner",
    "fill_auth_list",
    "normalized_arg",
    "parse_args",
    "split_functions",
    "validate_acl_config",
    "validate_eauth_config",
    "validate_master_access",
    "validate_peer_config",
    "validate_peer_run_config",
]

FIND_JOB_WHITELIST: tuple[str, ...] = ("saltutil.find_job",)
"""Functions publisher_acl/eauth users may always run (the CLI polls jobs with it)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one access check.

    ``reason`` is safe to show the requester.  ``rule`` is the config rule that
    decided (for operators only), or ``None`` when no single rule did.
    """

    allowed: bool
    reason: str
    rule: str | None = None

    def __bool__(self) -> bool:
        return self.allowed


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def _rx(pattern: Any, text: str, strict: bool) -> bool:
    """re.match (or fullmatch), treating a non-string or broken pattern as no match."""
    if not isinstance(pattern, str):
        return False
    try:
        if strict:
            return re.fullmatch(pattern, text) is not None
        return re.match(pattern, text) is not None
    except re.error:
        return False


def _user_match(pattern: str, user: str) -> bool:
    if fnmatch.fnmatchcase(user, pattern):
        return True
    try:
        return re.fullmatch(pattern, user) is not None
    except re.error:
        return False


def split_functions(fun: str | Sequence[str]) -> list[str]:
    """``'a.b,c.d'`` or ``['a.b', 'c.d']`` -> ``['a.b', 'c.d']`` (whitespace stripped)."""
    if isinstance(fun, str):
        parts = fun.split(",")
    else:
        parts = [str(f) for f in fun]
    return [p.strip() for p in parts]


_KWARG_RE = re.compile(r"([^\d\W][\w.-]*)=(?!=)(.*)\Z", re.DOTALL)


def parse_args(
    arg: Any, kwarg: Mapping[str, Any] | None = None
) -> tuple[list[Any], dict[str, Any]]:
    """Split a call's arguments into positional args and kwargs, as Salt parses them.

    ``'name=value'`` strings (``name`` an identifier) become kwargs, a dict carrying
    ``__kwarg__: True`` is merged into kwargs, and ``kwarg`` is merged last.  A single
    string or scalar ``arg`` is one argument; ``None`` is none.
    """
    if arg is None:
        items: list[Any] = []
    elif isinstance(arg, (str, bytes)) or not isinstance(arg, Sequence):
        items = [arg]
    else:
        items = list(arg)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for item in items:
        if isinstance(item, Mapping) and item.get("__kwarg__") is True:
            kwargs.update({k: v for k, v in item.items() if k != "__kwarg__"})
            continue
        if isinstance(item, str):
            m = _KWARG_RE.match(item)
            if m:
                kwargs[m.group(1)] = m.group(2)
                continue
        args.append(item)
    if kwarg:
        kwargs.update(kwarg)
    return args, kwargs


def _per_function_args(
    funs: list[str], arg: Any, kwarg: Mapping[str, Any] | None
) -> list[tuple[list[Any], dict[str, Any]]]:
    """One (args, kwargs) per function.

    A single function takes ``arg`` as its argument list.  A multi-function command
    takes one entry per function: a list, or a string split on whitespace (Salt's
    peer form); missing entries mean no arguments.
    """
    if len(funs) == 1:
        return [parse_args(arg, kwarg)]
    groups: list[Any] = list(arg) if isinstance(arg, Sequence) and not isinstance(arg, str) else []
    out = []
    for i in range(len(funs)):
        group = groups[i] if i < len(groups) else []
        if isinstance(group, str):
            group = group.split()
        out.append(parse_args(group, None))
    return out


def _packed(args: list[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    return [*args, {"__kwarg__": True, **kwargs}] if kwargs else list(args)


def normalized_arg(fun: str | Sequence[str], arg: Any) -> list[Any]:
    """The publication ``arg`` exactly as the checks saw it: positional values, then the
    keyword arguments as one ``{'__kwarg__': True, ...}`` mapping (per function, as a list
    of such lists, for a comma command).  Publishing this instead of the raw request
    means a ``k=v`` string can never be a keyword argument to the check and a positional
    one to the function."""
    funs = split_functions(fun)
    groups = [_packed(a, k) for a, k in _per_function_args(funs, arg, None)]
    return groups[0] if len(funs) == 1 else groups


def _show(value: Any) -> str:
    return repr(value)


# ---------------------------------------------------------------------------
# The shared auth_check core
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Entry:
    """One ACL entry and where it came from (for Decision.rule)."""

    value: Any
    origin: str  # e.g. "peer['.*example.com']"


@dataclass(slots=True)
class _Outcome:
    allowed: bool
    rule: str | None = None
    # How far a denied function got: 0 no function rule, 1 target outside, 2 args.
    stage: int = 0
    near_rule: str | None = None


def _spec_allows(spec: Any, args: list[Any], kwargs: Mapping[str, Any], strict: bool) -> bool:
    specs = spec if isinstance(spec, list) else [spec]
    for cond in specs:
        if not isinstance(cond, Mapping):
            continue
        ok = True
        cond_args = cond.get("args") or []
        for i, rule in enumerate(cond_args):
            if i >= len(args):
                ok = False
                break
            if rule is not None and not _rx(rule, str(args[i]), strict):
                ok = False
                break
        if not ok:
            continue
        cond_kwargs = cond.get("kwargs") or {}
        if not isinstance(cond_kwargs, Mapping):
            continue
        for key, rule in cond_kwargs.items():
            if key not in kwargs:
                ok = False
                break
            if rule is not None and not _rx(rule, str(kwargs[key]), strict):
                ok = False
                break
        if ok:
            return True
    return False


def _fun_allows(
    conds: Any, fun: str, args: list[Any], kwargs: Mapping[str, Any], strict: bool
) -> tuple[int, Any]:
    """(2, cond) allowed; (1, cond) function matched but arguments did not; (0, None)."""
    best: tuple[int, Any] = (0, None)
    for cond in conds if isinstance(conds, list) else [conds]:
        if isinstance(cond, str):
            if _rx(cond, fun, strict):
                return 2, cond
        elif isinstance(cond, Mapping) and len(cond) == 1:
            fun_rx, spec = next(iter(cond.items()))
            if _rx(fun_rx, fun, strict):
                if _spec_allows(spec, args, kwargs, strict):
                    return 2, cond
                best = (1, cond)
    return best


class _TargetSets:
    """Caches, for one request, whether its target lies inside each ACL target key."""

    def __init__(
        self, tgt: Any, tgt_type: str, minions: MinionTable, nodegroups: Nodegroups | None
    ) -> None:
        self.tgt = tgt
        self.tgt_type = tgt_type
        self.minions = minions
        self.nodegroups = nodegroups
        self.cache: dict[str, bool] = {}

    def inside(self, expr: str) -> bool:
        if expr == "*":
            return True
        if expr not in self.cache:
            try:
                self.cache[expr] = target_within(
                    self.tgt, self.tgt_type, expr, self.minions, self.nodegroups
                )
            except TargetError:
                self.cache[expr] = False  # a broken rule grants nothing
        return self.cache[expr]


def _check_function(
    entries: list[_Entry],
    fun: str,
    args: list[Any],
    kwargs: Mapping[str, Any],
    targets: _TargetSets,
    strict: bool,
) -> _Outcome:
    """Scan entries in order for one function (Salt's auth_check inner loop)."""
    out = _Outcome(False)
    for entry in entries:
        ind = entry.value
        if isinstance(ind, str):
            if ind.startswith("@"):
                continue
            if _rx(ind, fun, strict):
                return _Outcome(True, f"{entry.origin} -> {_show(ind)}")
        elif isinstance(ind, Mapping) and len(ind) == 1:
            tgt_key, conds = next(iter(ind.items()))
            if not isinstance(tgt_key, str) or tgt_key.startswith("@"):
                continue
            stage, cond = _fun_allows(conds, fun, args, kwargs, strict)
            if stage == 0:
                continue
            rule = f"{entry.origin} -> {_show(tgt_key)} -> {_show(cond)}"
            if not targets.inside(tgt_key):
                if out.stage < 1:
                    out = _Outcome(False, None, 1, rule)
                continue
            if stage == 2:
                return _Outcome(True, rule)
            if out.stage < 2:
                out = _Outcome(False, None, 2, rule)
    return out


def _deny_text(who: str, fun: str, stage: int, tgt: Any, tgt_type: str) -> str:
    if stage == 2:
        return f"{who} may not run {fun!r} with these arguments: the matching rule restricts them"
    if stage == 1:
        return (
            f"{who} may not run {fun!r} on target {tgt!r} ({tgt_type}): "
            f"the target is outside the allowed expression"
        )
    return f"{who} may not run {fun!r}: no function rule allows it"


def _auth_check(
    entries: list[_Entry],
    who: str,
    fun: str | Sequence[str],
    arg: Any,
    kwarg: Mapping[str, Any] | None,
    tgt: Any,
    tgt_type: str | None,
    minions: MinionTable,
    nodegroups: Nodegroups | None,
    whitelist: Collection[str],
    strict: bool,
) -> Decision:
    funs = split_functions(fun)
    if not funs or any(not f for f in funs):
        return Decision(False, f"{who}: empty function name in {fun!r}")
    tgt_type = tgt_type or "glob"
    try:
        validate_target(tgt, tgt_type, nodegroups)
    except TargetError as exc:
        return Decision(False, f"{who}: invalid target: {exc}")
    targets = _TargetSets(tgt, tgt_type, minions, nodegroups)
    rules: list[str] = []
    for f, (args, kwargs) in zip(funs, _per_function_args(funs, arg, kwarg), strict=True):
        if f in whitelist:
            rules.append(f"whitelist -> {f!r}")
            continue
        outcome = _check_function(entries, f, args, kwargs, targets, strict)
        if not outcome.allowed:
            text = _deny_text(who, f, outcome.stage, tgt, tgt_type)
            return Decision(False, text, outcome.near_rule)
        if outcome.rule not in rules:
            rules.append(outcome.rule or "")
    names = ", ".join(repr(f) for f in funs)
    return Decision(True, f"{who} may run {names} on target {tgt!r} ({tgt_type})", "; ".join(rules))


# ---------------------------------------------------------------------------
# peer / peer_run
# ---------------------------------------------------------------------------


def _id_entries(
    config: Mapping[Any, Any], section: str, minion_id: str, strict: bool
) -> list[_Entry]:
    entries: list[_Entry] = []
    for key, value in config.items():
        if not _rx(key, minion_id, strict):
            continue
        if not isinstance(value, list):
            continue  # Salt ignores non-list values silently; validate_* reports them
        entries.extend(_Entry(v, f"{section}[{key!r}]") for v in value)
    return entries


def check_peer(
    peer: Mapping[str, Any] | None,
    minion_id: str,
    fun: str | Sequence[str],
    arg: Any,
    tgt: Any,
    tgt_type: str | None,
    minions: MinionTable,
    nodegroups: Nodegroups | None = None,
    *,
    kwarg: Mapping[str, Any] | None = None,
    strict: bool = False,
) -> Decision:
    """May minion ``minion_id`` publish ``fun`` to ``tgt`` (Salt's ``peer`` option)?

    ``minion_id`` must come from the authenticated transport, never from the payload.
    ``minions`` maps every accepted minion id to its cached grains (``None`` = none).
    ``arg`` is the argument list (per-function lists for a comma command).
    """
    who = f"minion {minion_id!r}"
    if not isinstance(peer, Mapping) or not peer:
        return Decision(False, "peer publishing is disabled on this master")
    for f in split_functions(fun):
        if f.startswith("publish."):
            return Decision(False, f"{who} may not run {f!r}: publish.* cannot be peer-published")
    entries = _id_entries(peer, "peer", minion_id, strict)
    if not entries:
        return Decision(False, f"no peer rule matches minion id {minion_id!r}")
    return _auth_check(
        entries, who, fun, arg, kwarg, tgt, tgt_type, minions, nodegroups, (), strict
    )


def check_peer_run(
    peer_run: Mapping[str, Any] | None,
    minion_id: str,
    fun: str | Sequence[str],
    *,
    arg: Any = None,
    kwarg: Mapping[str, Any] | None = None,
    strict: bool = False,
) -> Decision:
    """May minion ``minion_id`` run runner ``fun`` on the master (``peer_run``)?"""
    who = f"minion {minion_id!r}"
    if not isinstance(peer_run, Mapping) or not peer_run:
        return Decision(False, "peer_run is disabled on this master")
    funs = split_functions(fun)
    for f in funs:
        if f.count(".") != 1 or not all(f.split(".")):
            return Decision(False, f"{who}: {f!r} is not a runner function (module.function)")
    entries = _id_entries(peer_run, "peer_run", minion_id, strict)
    if not entries:
        return Decision(False, f"no peer_run rule matches minion id {minion_id!r}")
    rules: list[str] = []
    for f, (args, kwargs) in zip(funs, _per_function_args(funs, arg, kwarg), strict=True):
        stage = 0
        near: str | None = None
        for entry in entries:
            got, cond = _fun_allows([entry.value], f, args, kwargs, strict)
            if got == 2:
                rule = f"{entry.origin} -> {_show(cond)}"
                if rule not in rules:
                    rules.append(rule)
                break
            if got == 1 and stage < 2:
                stage, near = 2, f"{entry.origin} -> {_show(cond)}"
        else:
            text = _deny_text(who, f, stage, None, "runner")
            return Decision(False, text.replace("no function rule", "no runner rule"), near)
    names = ", ".join(repr(f) for f in funs)
    return Decision(True, f"{who} may run runner {names}", "; ".join(rules))


# ---------------------------------------------------------------------------
# publisher_acl / external_auth
# ---------------------------------------------------------------------------


def fill_auth_list(
    config: Mapping[str, Any],
    section: str,
    user: str,
    groups: Iterable[str] = (),
    *,
    permissive: bool = False,
) -> list[Any]:
    """The ACL entries that apply to ``user`` (with origins kept internally).

    User keys are globs or full-match regexes; ``name%`` keys match groups; ``*`` is a
    fallback used only when no user key matched, unless ``permissive``.
    """
    return [e.value for e in _user_entries(config, section, user, groups, permissive)]


def _user_entries(
    config: Mapping[str, Any], section: str, user: str, groups: Iterable[str], permissive: bool
) -> list[_Entry]:
    group_set = set(groups)
    entries: list[_Entry] = []
    name_matched = False
    for key, value in config.items():
        if not isinstance(key, str) or not isinstance(value, list):
            continue
        if key == "*" and not permissive:
            continue
        if key.endswith("%"):
            if key[:-1] in group_set:
                entries.extend(_Entry(v, f"{section}[{key!r}]") for v in value)
        elif _user_match(key, user):
            name_matched = True
            entries.extend(_Entry(v, f"{section}[{key!r}]") for v in value)
    if not permissive and not name_matched and isinstance(config.get("*"), list):
        entries.extend(_Entry(v, f"{section}['*']") for v in config["*"])
    return entries


def check_blacklist(
    blacklist: Mapping[str, Any] | None,
    user: str,
    fun: str | Sequence[str] | None = None,
    *,
    strict: bool = False,
) -> Decision | None:
    """``publisher_acl_blacklist`` alone: a denying Decision when ``user`` or any function
    of ``fun`` is blacklisted, else None.  Applies to publisher_acl and eauth users."""
    who = f"user {user!r}"
    bl = blacklist or {}
    for i, pattern in enumerate(bl.get("users") or []):
        if isinstance(pattern, str) and _user_match(pattern, user):
            return Decision(
                False, f"{who} is blacklisted by publisher_acl_blacklist",
                f"publisher_acl_blacklist['users'][{i}] -> {pattern!r}",
            )
    for f in split_functions(fun) if fun is not None else []:
        for i, pattern in enumerate(bl.get("modules") or []):
            if _rx(pattern, f, strict):
                return Decision(
                    False, f"{who} may not run {f!r}: the function is blacklisted",
                    f"publisher_acl_blacklist['modules'][{i}] -> {pattern!r}",
                )
    return None


def _publisher_entries(
    acl: Mapping[str, Any] | None,
    user: str,
    groups: Iterable[str],
    blacklist: Mapping[str, Any] | None,
    unrestricted: Collection[str],
    permissive: bool,
    funs: Sequence[str],
    strict: bool,
) -> Decision | list[_Entry]:
    """The local user's ``publisher_acl`` entries, or the decision that ends the check
    before them: a blacklisted user, a blacklisted function among ``funs``, an
    unrestricted user, or no entry at all."""
    who = f"user {user!r}"
    bl = blacklist or {}
    for i, pattern in enumerate(bl.get("users") or []):
        if isinstance(pattern, str) and _user_match(pattern, user):
            return Decision(
                False, f"{who} is blacklisted by publisher_acl_blacklist",
                f"publisher_acl_blacklist['users'][{i}] -> {pattern!r}",
            )
    for f in funs:
        for i, pattern in enumerate(bl.get("modules") or []):
            if _rx(pattern, f, strict):
                return Decision(
                    False, f"{who} may not run {f!r}: the function is blacklisted",
                    f"publisher_acl_blacklist['modules'][{i}] -> {pattern!r}",
                )
    if user in unrestricted:
        return Decision(True, f"{who} is unrestricted", None)
    entries = _user_entries(acl or {}, "publisher_acl", user, groups, permissive)
    if not entries:
        return Decision(False, f"{who} has no publisher_acl entry")
    return entries


def check_publisher_acl(
    acl: Mapping[str, Any] | None,
    user: str,
    groups: Iterable[str],
    fun: str | Sequence[str],
    arg: Any,
    tgt: Any,
    tgt_type: str | None,
    minions: MinionTable,
    blacklist: Mapping[str, Any] | None = None,
    *,
    unrestricted: Collection[str] = ("root",),
    nodegroups: Nodegroups | None = None,
    kwarg: Mapping[str, Any] | None = None,
    permissive: bool = False,
    strict: bool = False,
    whitelist: Collection[str] = FIND_JOB_WHITELIST,
) -> Decision:
    """May local user ``user`` publish ``fun`` to ``tgt`` with the ``salt`` CLI?

    ``unrestricted`` lists the users that skip the ACL: pass ``root`` and the user the
    master runs as (a sudo caller should be passed as its sudo user).  The blacklist
    (``publisher_acl_blacklist``) applies to everyone, unrestricted users included.
    """
    who = f"user {user!r}"
    entries = _publisher_entries(
        acl, user, groups, blacklist, unrestricted, permissive, split_functions(fun), strict
    )
    if isinstance(entries, Decision):
        return entries
    return _auth_check(
        entries, who, fun, arg, kwarg, tgt, tgt_type, minions, nodegroups, whitelist, strict
    )


def check_publisher_acl_runner(
    acl: Mapping[str, Any] | None,
    user: str,
    groups: Iterable[str],
    fun: str | Sequence[str],
    arg: Any = None,
    blacklist: Mapping[str, Any] | None = None,
    *,
    unrestricted: Collection[str] = ("root",),
    kwarg: Mapping[str, Any] | None = None,
    permissive: bool = False,
    strict: bool = False,
) -> Decision:
    """May local user ``user`` run runner ``fun`` with ``raetsalt-run``?

    Salt 3008 does not check runners for local users at all (any user with a key runs
    any runner).  Here a non-unrestricted user needs an ``external_auth``-style runner
    entry in ``publisher_acl``: ``'@runner'``, ``'@<module>'``, ``{'@runner': [regex]}``
    or ``{'@<module>': [regex on the function name]}``.  The blacklist's ``users`` apply.
    """
    who = f"user {user!r}"
    entries = _publisher_entries(acl, user, groups, blacklist, unrestricted, permissive, [], strict)
    if isinstance(entries, Decision):
        return entries
    return _spec_check(entries, who, fun, arg, kwarg, "runner", strict)


def check_eauth(
    eauth_config: Mapping[str, Any] | None,
    backend: str,
    user: str,
    groups: Iterable[str],
    fun: str | Sequence[str],
    arg: Any = None,
    tgt: Any = None,
    tgt_type: str | None = "glob",
    minions: MinionTable | None = None,
    kind: str = "publish",
    *,
    nodegroups: Nodegroups | None = None,
    kwarg: Mapping[str, Any] | None = None,
    permissive: bool = False,
    strict: bool = False,
    whitelist: Collection[str] = FIND_JOB_WHITELIST,
) -> Decision:
    """May eauth user ``user`` (already authenticated by ``backend``) make this call?

    ``eauth_config`` is the whole ``external_auth`` option.  ``kind`` is ``publish``
    (target and function check, like publisher_acl), ``runner`` or ``wheel`` (the
    ``@runner``/``@wheel``/``@<module>`` entries; target arguments are ignored).
    """
    who = f"user {user!r}"
    if kind not in ("publish", "runner", "wheel"):
        raise ValueError(f"kind must be 'publish', 'runner' or 'wheel', not {kind!r}")
    section_cfg = (eauth_config or {}).get(backend)
    if not isinstance(section_cfg, Mapping):
        return Decision(False, f"external_auth has no {backend!r} backend")
    section = f"external_auth[{backend!r}]"
    entries = _user_entries(section_cfg, section, user, groups, permissive)
    if not entries:
        return Decision(False, f"{who} has no external_auth entry for {backend!r}")
    if kind == "publish":
        return _auth_check(
            entries, who, fun, arg, kwarg, tgt, tgt_type, minions or {}, nodegroups,
            whitelist, strict,
        )
    return _spec_check(entries, who, fun, arg, kwarg, kind, strict)


def _spec_check(
    entries: list[_Entry],
    who: str,
    fun: str | Sequence[str],
    arg: Any,
    kwarg: Mapping[str, Any] | None,
    kind: str,
    strict: bool,
) -> Decision:
    funs = split_functions(fun)
    rules: list[str] = []
    for f, (args, kwargs) in zip(funs, _per_function_args(funs, arg, kwarg), strict=True):
        comps = f.split(".")
        if len(comps) != 2 or not all(comps):
            return Decision(
                False, f"{who}: A command invocation error occurred: Check syntax ({f!r})."
            )
        mod, name = comps
        decided: str | None = None
        stage = 0
        near: str | None = None
        for entry in entries:
            ind = entry.value
            if isinstance(ind, str) and ind.startswith("@"):
                if ind[1:] in (mod, kind) or ind == f"@{kind}s":
                    decided = f"{entry.origin} -> {_show(ind)}"
                    break
            elif isinstance(ind, Mapping) and len(ind) == 1:
                key, conds = next(iter(ind.items()))
                if not isinstance(key, str) or not key.startswith("@"):
                    continue
                candidates = []
                if key[1:] == mod:
                    candidates.append(name)
                if key[1:] == kind or key == f"@{kind}s":
                    candidates.append(f)
                for text in candidates:
                    got, cond = _fun_allows(conds, text, args, kwargs, strict)
                    if got == 2:
                        decided = f"{entry.origin} -> {_show(key)} -> {_show(cond)}"
                        break
                    if got == 1:
                        stage, near = 2, f"{entry.origin} -> {_show(key)} -> {_show(cond)}"
                if decided:
                    break
        if decided is None:
            text = _deny_text(who, f, stage, None, kind)
            return Decision(False, text.replace("no function rule", f"no {kind} rule"), near)
        if decided not in rules:
            rules.append(decided)
    names = ", ".join(repr(f) for f in funs)
    return Decision(True, f"{who} may run {kind} {names}", "; ".join(rules))


# ---------------------------------------------------------------------------
# Config validation (called once at master start)
# ---------------------------------------------------------------------------

_PLAIN_NAME = re.compile(r"[\w.\-]+\Z")


@dataclass(slots=True)
class _Validator:
    section: str
    nodegroups: Nodegroups | None = None
    warnings: list[str] = field(default_factory=list)

    def fail(self, path: str, why: str) -> ConfigError:
        return ConfigError(f"{self.section}{path}: {why}")

    def regex(self, path: str, pattern: Any, what: str, *, warn_as: str | None = None) -> None:
        if not isinstance(pattern, str):
            kind = type(pattern).__name__
            raise self.fail(path, f"{what} must be a string (quote it), not {kind} {pattern!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise self.fail(path, f"invalid {what} regex {pattern!r}: {exc}") from None
        plain = _PLAIN_NAME.match(pattern) is not None
        if (warn_as == "function" and plain and "." in pattern) or (warn_as == "id" and plain):
            self.warnings.append(
                f"{self.section}{path}: {pattern!r} is a prefix match and also allows "
                f"any {warn_as} starting with it; write {pattern + '$'!r} for an exact match"
            )

    def spec(self, path: str, spec: Any) -> None:
        specs = spec if isinstance(spec, list) else [spec]
        if not specs:
            raise self.fail(path, "argument spec list is empty")
        for i, one in enumerate(specs):
            p = f"{path}[{i}]" if isinstance(spec, list) else path
            if not isinstance(one, Mapping):
                raise self.fail(p, f"argument spec must be a mapping with args/kwargs, not {one!r}")
            extra = set(one) - {"args", "kwargs"}
            if extra:
                keys = sorted(map(str, extra))
                raise self.fail(p, f"unknown argument spec key(s) {keys}; use args/kwargs")
            args = one.get("args", [])
            if args is None:
                args = []
            if not isinstance(args, list):
                raise self.fail(f"{p}['args']", "must be a list of regexes (null = any)")
            for j, a in enumerate(args):
                if a is not None:
                    self.regex(f"{p}['args'][{j}]", a, "argument")
            kwargs = one.get("kwargs", {})
            if kwargs is None:
                kwargs = {}
            if not isinstance(kwargs, Mapping):
                raise self.fail(f"{p}['kwargs']", "must be a mapping of name -> regex (null = any)")
            for k, v in kwargs.items():
                if v is not None:
                    self.regex(f"{p}['kwargs'][{k!r}]", v, "argument")

    def fun_conds(self, path: str, conds: Any) -> None:
        items = conds if isinstance(conds, list) else [conds]
        if isinstance(conds, list) and not conds:
            raise self.fail(path, "function list is empty")
        for i, cond in enumerate(items):
            p = f"{path}[{i}]" if isinstance(conds, list) else path
            if isinstance(cond, str):
                self.regex(p, cond, "function", warn_as="function")
            elif isinstance(cond, Mapping):
                if len(cond) != 1:
                    raise self.fail(p, "a function entry with arguments must have exactly one key")
                fun_rx, spec = next(iter(cond.items()))
                self.regex(p, fun_rx, "function", warn_as="function")
                self.spec(f"{p}[{fun_rx!r}]", spec)
            else:
                raise self.fail(
                    p, f"function entry must be a regex or {{regex: {{args, kwargs}}}}, "
                    f"not {cond!r}")

    def target(self, path: str, expr: Any) -> None:
        if not isinstance(expr, str):
            raise self.fail(path, f"target key must be a string, not {expr!r}")
        if expr == "*":
            return
        try:
            validate_target(expr, "compound", self.nodegroups,
                            check_nodegroups=self.nodegroups is not None)
        except TargetError as exc:
            raise self.fail(path, f"invalid target expression {expr!r}: {exc}") from None

    def entries(self, path: str, value: Any, *, allow_at: bool, allow_targets: bool = True) -> None:
        if not isinstance(value, list):
            raise self.fail(path, f"must be a list of rules, not {type(value).__name__} {value!r}")
        for i, entry in enumerate(value):
            p = f"{path}[{i}]"
            if isinstance(entry, str):
                if entry.startswith("@"):
                    if not allow_at:
                        raise self.fail(p, f"{entry!r}: @ entries belong in external_auth")
                    if len(entry) == 1:
                        raise self.fail(p, "'@' needs a client or module name")
                    continue
                self.regex(p, entry, "function", warn_as="function")
            elif isinstance(entry, Mapping):
                if len(entry) != 1:
                    raise self.fail(p, "a rule mapping must have exactly one key")
                key, conds = next(iter(entry.items()))
                kp = f"{p}[{key!r}]"
                if isinstance(key, str) and key.startswith("@"):
                    if not allow_at:
                        raise self.fail(p, f"{key!r}: @ entries belong in external_auth")
                    self.fun_conds(kp, conds)
                elif allow_targets:
                    self.target(p, key)
                    self.fun_conds(kp, conds)
                else:
                    self.regex(p, key, "function", warn_as="function")
                    self.spec(kp, conds)
            else:
                raise self.fail(p, f"rule must be a regex or a one-key mapping, not {entry!r}")

    def by_id(self, config: Any, *, allow_targets: bool) -> None:
        if config is None:
            return
        if not isinstance(config, Mapping):
            kind = type(config).__name__
            raise self.fail("", f"must be a mapping of minion-id regex -> list, not {kind}")
        for key, value in config.items():
            self.regex(f"[{key!r}]", key, "minion id", warn_as="id")
            self.entries(f"[{key!r}]", value, allow_at=False, allow_targets=allow_targets)

    def by_user(self, config: Any, *, allow_at: bool) -> None:
        if config is None:
            return
        if not isinstance(config, Mapping):
            raise self.fail("", f"must be a mapping of user -> list, not {type(config).__name__}")
        for key, value in config.items():
            if not isinstance(key, str) or not key:
                raise self.fail(f"[{key!r}]", "user key must be a non-empty string")
            self.entries(f"[{key!r}]", value, allow_at=allow_at)


def validate_peer_config(peer: Any, *, nodegroups: Nodegroups | None = None) -> list[str]:
    """Check a ``peer`` option; raise ConfigError naming the bad key/regex/shape.

    Returns warnings for regexes that look exact but are prefix matches.  Nodegroups
    in target keys are resolved only when ``nodegroups`` is given.
    """
    v = _Validator("peer", nodegroups)
    v.by_id(peer, allow_targets=True)
    return v.warnings


def validate_peer_run_config(peer_run: Any) -> list[str]:
    """Check a ``peer_run`` option (``{id regex: [runner regex | {regex: spec}]}``)."""
    v = _Validator("peer_run")
    v.by_id(peer_run, allow_targets=False)
    return v.warnings


def validate_acl_config(
    acl: Any,
    blacklist: Any = None,
    *,
    nodegroups: Nodegroups | None = None,
) -> list[str]:
    """Check ``publisher_acl`` (and ``publisher_acl_blacklist`` if given)."""
    v = _Validator("publisher_acl", nodegroups)
    v.by_user(acl, allow_at=True)
    if blacklist is not None:
        b = _Validator("publisher_acl_blacklist")
        if not isinstance(blacklist, Mapping):
            raise b.fail("", "must be a mapping with 'users' and/or 'modules' lists")
        extra = set(blacklist) - {"users", "modules"}
        if extra:
            raise b.fail("", f"unknown key(s) {sorted(map(str, extra))}; use users/modules")
        for name in ("users", "modules"):
            items = blacklist.get(name) or []
            if not isinstance(items, list):
                raise b.fail(f"[{name!r}]", "must be a list")
            for i, item in enumerate(items):
                if not isinstance(item, str):
                    raise b.fail(f"[{name!r}][{i}]", f"must be a string, not {item!r}")
                if name == "modules":
                    b.regex(f"[{name!r}][{i}]", item, "module")
    return v.warnings


def validate_eauth_config(eauth: Any, *, nodegroups: Nodegroups | None = None) -> list[str]:
    """Check an ``external_auth`` option: ``{backend: {user: [entries incl. @...]}}``."""
    v = _Validator("external_auth", nodegroups)
    if eauth is None:
        return []
    if not isinstance(eauth, Mapping):
        raise v.fail("", "must be a mapping of backend -> {user: list}")
    for backend, users in eauth.items():
        sub = _Validator(f"external_auth[{backend!r}]", nodegroups)
        if isinstance(users, Mapping):
            # ``^name`` keys are the backend's own settings (``^filename`` of ``file``).
            users = {k: v for k, v in users.items() if not str(k).startswith("^")}
        sub.by_user(users, allow_at=True)
        v.warnings.extend(sub.warnings)
    return v.warnings


def validate_master_access(opts: Mapping[str, Any]) -> list[str]:
    """Check every access option of a master's opts (``peer``, ``peer_run``,
    ``publisher_acl`` with its blacklist, ``external_auth``) with its nodegroups; raise
    ConfigError naming the first problem, return the warnings.  The master calls this
    when it starts."""
    nodegroups = opts.get("nodegroups") or {}
    warnings = validate_peer_config(opts.get("peer"), nodegroups=nodegroups)
    warnings += validate_peer_run_config(opts.get("peer_run"))
    warnings += validate_acl_config(opts.get("publisher_acl"),
                                    opts.get("publisher_acl_blacklist") or None,
                                    nodegroups=nodegroups)
    warnings += validate_eauth_config(opts.get("external_auth"), nodegroups=nodegroups)
    return warnings
