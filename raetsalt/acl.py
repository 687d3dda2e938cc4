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
            args: ['ls', null]      #   exactly two positional arguments
            kwargs: {cwd: '/tmp$'}  #   exactly one keyword argument, cwd

* Every regex is applied with :func:`re.match`: **anchored at the start only**.
  ``test.*`` also allows ``testfoo.x``, ``network.ip_addrs`` also allows
  ``network.ip_addrs6``, an id key ``web`` matches ``webserv1`` and an argument rule
  ``ls`` allows ``ls; rm -rf /``.  Add ``$`` for an exact match, or pass
  ``strict=True`` to make every regex a full match.  The ``validate_*`` functions
  (:mod:`raetsalt.acl_config`, run when the master starts) warn about each regex that
  looks like an exact name but is not anchored.
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
* **Argument rules restrict the whole call** (``{fun regex: {args, kwargs}}``): the call
  must have exactly one positional argument per ``args`` rule and exactly the keyword
  arguments ``kwargs`` names (each one present, no other).  A spec that lists ``args``
  and no ``kwargs`` allows no keyword argument at all; one with only ``kwargs`` allows
  no positional argument.  Each value rule is ``null`` (any value, of any type), a regex
  (matched with ``re.match`` against **text values only**: a number, bool, list, mapping
  or null argument never matches a regex) or a literal ``true``/``false``/number (only
  that value, of that type).  A spec may be a list of such specs; any one may match.
* A restricted caller (every caller these rules apply to) never passes a keyword
  argument whose name is not text or starts with ``__`` (``__pub_*``, ``__kwarg__``...):
  those are the master's and minion's own plumbing.
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
* **Argument rules restrict every argument** (see above).  Salt leaves extra positional
  arguments and every keyword argument not named in a rule free, so a rule such as
  ``{'cmd.run': {args: ['echo [a-z]+$']}}`` let ``python_shell=False
  env={'PATH': '/home/me/bin'}`` run the caller's own ``echo`` as root; Salt 3008 has
  that hole.  Non-text values never match a regex (Salt matched ``str(value)``).
* **Arguments are parsed before they are checked**: ``k=v`` strings become kwargs
  (Salt's argument parsing rule: an identifier, ``=``, a value) and a trailing
  ``{'__kwarg__': True, ...}`` dict is merged into kwargs.  Salt's peer path checked
  before parsing, so a kwargs rule could never be met by ``publish.publish ... k=v``.
  The master then publishes the arguments exactly as checked (:func:`normalized_arg`);
  strings are not YAML-typed on the way.
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
from dataclasses import dataclass
from typing import Any

from raetsalt.errors import TargetError
from raetsalt.log import clip
from raetsalt.protocol import KWARG_MARK, pack_args
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
        if isinstance(item, Mapping) and item.get(KWARG_MARK) is True:
            kwargs.update({k: v for k, v in item.items() if k != KWARG_MARK})
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


def normalized_arg(fun: str | Sequence[str], arg: Any) -> list[Any]:
    """The publication ``arg`` exactly as the checks saw it: positional values, then the
    keyword arguments as one ``{'__kwarg__': True, ...}`` mapping (per function, as a list
    of such lists, for a comma command).  Publishing this instead of the raw request
    means a ``k=v`` string can never be a keyword argument to the check and a positional
    one to the function."""
    funs = split_functions(fun)
    groups = [pack_args(a, k) for a, k in _per_function_args(funs, arg, None)]
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
    why: str = ""  # stage 2: what about the arguments does not fit


def _type_word(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", list: "a list",
            dict: "a mapping"}.get(type(value), type(value).__name__)


def _value_misfit(what: str, rule: Any, value: Any, strict: bool) -> str | None:
    """Why ``value`` does not fit one argument rule (None: it fits).  ``None`` accepts
    anything, a regex only text it matches, a literal only itself (same type)."""
    if rule is None:
        return None
    if isinstance(rule, str):
        if not isinstance(value, str):
            return f"{what} is {_type_word(value)}, and argument rules match only text"
        return None if _rx(rule, value, strict) else f"{what} ({clip(value)}) does not match"
    if isinstance(rule, bool | int | float) and type(value) is type(rule) and value == rule:
        return None
    return f"{what} ({clip(value)}) does not match"


def _spec_misfit(cond: Any, args: list[Any], kwargs: Mapping[str, Any], strict: bool
                 ) -> str | None:
    """Why a call does not fit one ``{args, kwargs}`` spec (None: it fits).  The texts
    name the caller's own arguments, never the rule's regexes or keyword names."""
    if not isinstance(cond, Mapping):
        return "the matching rule is malformed"
    arg_rules = cond.get("args") or []
    kwarg_rules = cond.get("kwargs") or {}
    if not isinstance(arg_rules, list) or not isinstance(kwarg_rules, Mapping):
        return "the matching rule is malformed"
    for i, value in enumerate(args):
        if i >= len(arg_rules):
            return f"positional argument {i + 1} ({clip(value)}) is not allowed"
        why = _value_misfit(f"positional argument {i + 1}", arg_rules[i], value, strict)
        if why:
            return why
    if len(args) < len(arg_rules):
        return f"positional argument {len(args) + 1} is missing"
    for key, value in kwargs.items():
        if key not in kwarg_rules:
            return f"keyword argument {clip(key)} is not allowed"
        why = _value_misfit(f"keyword argument {clip(key)}", kwarg_rules[key], value, strict)
        if why:
            return why
    if any(key not in kwargs for key in kwarg_rules):
        return "a keyword argument the matching rule requires is missing"
    return None


def _args_misfit(spec: Any, args: list[Any], kwargs: Mapping[str, Any], strict: bool
                 ) -> str | None:
    """Why a call fits none of the specs of a ``{fun regex: spec}`` entry (None: one fits)."""
    specs = spec if isinstance(spec, list) else [spec]
    reasons = []
    for cond in specs:
        why = _spec_misfit(cond, args, kwargs, strict)
        if why is None:
            return None
        reasons.append(why)
    if not reasons:
        return "the matching rule is malformed"
    if len(reasons) == 1:
        return reasons[0]
    return f"{reasons[0]} (nor does any of the rule's other {len(reasons) - 1} argument specs fit)"


def _reserved_misfit(kwargs: Mapping[Any, Any]) -> str | None:
    """Keyword names a restricted caller may never use: non-text ones and ``__*``."""
    for key in kwargs:
        if not isinstance(key, str):
            return f"keyword argument names must be text, not {_type_word(key)}"
        if key.startswith("__"):
            return f"keyword argument {clip(key)} is reserved"
    return None


@dataclass(frozen=True, slots=True)
class _FunMatch:
    """How far one function entry list got for a call: ``stage`` 2 allowed, 1 the
    function matched but ``why`` the arguments did not, 0 no function matched."""

    stage: int
    cond: Any = None
    why: str = ""


def _fun_allows(
    conds: Any, fun: str, args: list[Any], kwargs: Mapping[str, Any], strict: bool
) -> _FunMatch:
    best = _FunMatch(0)
    for cond in conds if isinstance(conds, list) else [conds]:
        if isinstance(cond, str):
            if _rx(cond, fun, strict):
                return _FunMatch(2, cond)
        elif isinstance(cond, Mapping) and len(cond) == 1:
            fun_rx, spec = next(iter(cond.items()))
            if _rx(fun_rx, fun, strict):
                why = _args_misfit(spec, args, kwargs, strict)
                if why is None:
                    return _FunMatch(2, cond)
                if best.stage == 0:
                    best = _FunMatch(1, cond, why)
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
            match = _fun_allows(conds, fun, args, kwargs, strict)
            if match.stage == 0:
                continue
            rule = f"{entry.origin} -> {_show(tgt_key)} -> {_show(match.cond)}"
            if not targets.inside(tgt_key):
                if out.stage < 1:
                    out = _Outcome(False, None, 1, rule)
                continue
            if match.stage == 2:
                return _Outcome(True, rule)
            if out.stage < 2:
                out = _Outcome(False, None, 2, rule, match.why)
    return out


def _deny_text(who: str, fun: str, outcome: _Outcome, kind: str = "function",
               tgt: Any = None, tgt_type: str = "") -> str:
    if outcome.stage == 2:
        return f"{who} may not run {clip(fun)} with these arguments: {outcome.why}"
    if outcome.stage == 1:
        return (
            f"{who} may not run {clip(fun)} on target {clip(tgt)} ({tgt_type}): "
            f"the target is outside the allowed expression"
        )
    return f"{who} may not run {clip(fun)}: no {kind} rule allows it"


_Call = tuple[str, list[Any], dict[str, Any]]


def _calls(who: str, fun: str | Sequence[str], arg: Any, kwarg: Mapping[str, Any] | None
           ) -> Decision | list[_Call]:
    """``(function, args, kwargs)`` for every function of ``fun``, or the refusal of a
    call that no rule may allow: an empty function name or a reserved keyword."""
    funs = split_functions(fun)
    if not funs or any(not f for f in funs):
        return Decision(False, f"{who}: empty function name in {clip(fun)}")
    calls: list[_Call] = []
    for f, (args, kwargs) in zip(funs, _per_function_args(funs, arg, kwarg), strict=True):
        why = _reserved_misfit(kwargs)
        if why:
            return Decision(False, f"{who} may not run {clip(f)} with these arguments: {why}")
        calls.append((f, args, kwargs))
    return calls


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
    calls = _calls(who, fun, arg, kwarg)
    if isinstance(calls, Decision):
        return calls
    tgt_type = tgt_type or "glob"
    try:
        validate_target(tgt, tgt_type, nodegroups)
    except TargetError as exc:
        return Decision(False, f"{who}: invalid target: {clip(str(exc), 200, bare=True)}")
    targets = _TargetSets(tgt, tgt_type, minions, nodegroups)
    rules: list[str] = []
    for f, args, kwargs in calls:
        if f in whitelist:
            rules.append(f"whitelist -> {f!r}")
            continue
        outcome = _check_function(entries, f, args, kwargs, targets, strict)
        if not outcome.allowed:
            text = _deny_text(who, f, outcome, tgt=tgt, tgt_type=tgt_type)
            return Decision(False, text, outcome.near_rule)
        if outcome.rule not in rules:
            rules.append(outcome.rule or "")
    names = ", ".join(repr(f) for f, _, _ in calls)
    return Decision(True, f"{who} may run {names} on target {clip(tgt)} ({tgt_type})",
                    "; ".join(rules))


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
    who = f"minion {clip(minion_id)}"
    if not isinstance(peer, Mapping) or not peer:
        return Decision(False, "peer publishing is disabled on this master")
    for f in split_functions(fun):
        if f.startswith("publish."):
            return Decision(False, f"{who} may not run {clip(f)}: publish.* cannot be "
                            "peer-published")
    entries = _id_entries(peer, "peer", minion_id, strict)
    if not entries:
        return Decision(False, f"no peer rule matches minion id {clip(minion_id)}")
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
    who = f"minion {clip(minion_id)}"
    if not isinstance(peer_run, Mapping) or not peer_run:
        return Decision(False, "peer_run is disabled on this master")
    for f in split_functions(fun):
        if f.count(".") != 1 or not all(f.split(".")):
            return Decision(False, f"{who}: {clip(f)} is not a runner function "
                            "(module.function)")
    entries = _id_entries(peer_run, "peer_run", minion_id, strict)
    if not entries:
        return Decision(False, f"no peer_run rule matches minion id {clip(minion_id)}")
    calls = _calls(who, fun, arg, kwarg)
    if isinstance(calls, Decision):
        return calls
    rules: list[str] = []
    for f, args, kwargs in calls:
        near = _Outcome(False)
        for entry in entries:
            match = _fun_allows([entry.value], f, args, kwargs, strict)
            if match.stage == 2:
                rule = f"{entry.origin} -> {_show(match.cond)}"
                if rule not in rules:
                    rules.append(rule)
                break
            if match.stage == 1 and near.stage < 2:
                near = _Outcome(False, None, 2, f"{entry.origin} -> {_show(match.cond)}",
                                match.why)
        else:
            return Decision(False, _deny_text(who, f, near, "runner"), near.near_rule)
    names = ", ".join(repr(f) for f, _, _ in calls)
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
    who = f"user {clip(user)}"
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
                    False, f"{who} may not run {clip(f)}: the function is blacklisted",
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
    who = f"user {clip(user)}"
    listed = check_blacklist(blacklist, user, funs, strict=strict)
    if listed is not None:
        return listed
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
    who = f"user {clip(user)}"
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
    who = f"user {clip(user)}"
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
    who = f"user {clip(user)}"
    if kind not in ("publish", "runner", "wheel"):
        raise ValueError(f"kind must be 'publish', 'runner' or 'wheel', not {kind!r}")
    section_cfg = (eauth_config or {}).get(backend)
    if not isinstance(section_cfg, Mapping):
        return Decision(False, f"external_auth has no {clip(backend)} backend")
    section = f"external_auth[{backend!r}]"
    entries = _user_entries(section_cfg, section, user, groups, permissive)
    if not entries:
        return Decision(False, f"{who} has no external_auth entry for {clip(backend)}")
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
    calls = _calls(who, fun, arg, kwarg)
    if isinstance(calls, Decision):
        return calls
    rules: list[str] = []
    for f, args, kwargs in calls:
        comps = f.split(".")
        if len(comps) != 2 or not all(comps):
            return Decision(
                False, f"{who}: A command invocation error occurred: Check syntax ({clip(f)})."
            )
        mod, name = comps
        decided: str | None = None
        near = _Outcome(False)
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
                    match = _fun_allows(conds, text, args, kwargs, strict)
                    rule = f"{entry.origin} -> {_show(key)} -> {_show(match.cond)}"
                    if match.stage == 2:
                        decided = rule
                        break
                    if match.stage == 1 and near.stage < 2:
                        near = _Outcome(False, None, 2, rule, match.why)
                if decided:
                    break
        if decided is None:
            return Decision(False, _deny_text(who, f, near, kind), near.near_rule)
        if decided not in rules:
            rules.append(decided)
    names = ", ".join(repr(f) for f, _, _ in calls)
    return Decision(True, f"{who} may run {kind} {names}", "; ".join(rules))
