"""Salt-style minion targeting, as pure functions over an in-memory minion table.

Two sides use this module, exactly as in Salt:

* the **master** expands a target into the set of minions it expects to answer and
  uses the same expansion for every ACL subset check (:func:`match_minions`,
  :func:`match_bounds`);
* every **minion** re-checks each publication against its own id and live grains
  before running it (:func:`match_self`).

Both sides run the *same* parser and evaluator here, so they cannot disagree the way
Salt's master (set algebra built as a string and ``eval``-ed) and minion (a boolean
expression ``eval``-ed) sometimes do.

The minion table maps minion id -> what the targets can see of it: a grains mapping,
or a :class:`MinionFacts` with its grains and its pillar.  ``None`` (or a ``None``
field of ``MinionFacts``) means "the master has no data for this minion" (see *Unknown
grains* below); a plain grains mapping leaves the pillar unknown.  ``ipcidr`` reads the
``ipv4`` / ``ipv6`` grains (lists of address strings).

Target types (``TARGET_TYPES``)
-------------------------------
``glob``
    :func:`fnmatch.fnmatchcase` on the minion id; case-sensitive, as Salt on POSIX.
``pcre``
    :func:`re.match` on the id: anchored at the start **only**.  ``web`` matches
    ``webserv1``; write ``web$`` for an exact match.
``list``
    exact membership; ``tgt`` is a comma string (empty items ignored) or a list.
``grain`` / ``grain_pcre``
    ``key:value`` matched with Salt's ``subdict_match`` rules: nested keys via the
    delimiter (deepest split tried first, so ``a:b:c`` tries ``grains[a][b]`` against
    ``c`` and then ``grains[a]`` against ``b:c``); lists match if any element matches;
    a dict matches if the pattern names one of its keys (``k:*`` = key exists);
    ``*:v`` tests every top-level value (list items too, nested dicts by key).
    Both the grain value and the pattern are lower-cased before matching, so glob
    grain matching is case-insensitive, and a ``grain_pcre`` pattern is *also*
    lower-cased: ``\\D``, ``\\S``, ``\\W`` silently become ``\\d``, ``\\s``, ``\\w``,
    exactly as in Salt.  Regexes are start-anchored.
``pillar`` / ``pillar_pcre``
    ``key:value`` matched against the minion's pillar with exactly the ``grain`` /
    ``grain_pcre`` rules (Salt's ``-I`` / ``-J``, compound ``I@`` / ``J@``).  The master
    matches the pillar it compiled for each minion; a minion matches its own.
``ipcidr``
    an address (equality with any ``ipv4``/``ipv6`` grain address) or a network
    (``in`` test).  Networks must not have host bits set (``10.0.0.1/24`` is
    rejected, as Python's strict parsing does in Salt).
``nodegroup``
    the name of a master ``nodegroups`` entry, expanded and evaluated as compound.
``compound``
    ``G@ P@ I@ J@ L@ E@ S@ N@`` matchers and bare globs joined by ``and``/``or``/``not`` and
    parentheses, all separated by whitespace (or given as a list of tokens).
    ``G``, ``P``, ``I`` and ``J`` accept a one-character custom delimiter:
    ``G|@kernel|release|6.*``.
    ``not`` binds tighter than ``and``, which binds tighter than ``or``; ``A not B``
    means ``A and not B``; ``not`` at the start means "every minion except".

``pillar_exact``, ``range`` (``R@``) and 3008's resource matchers (``T@``, ``M@``) are
not supported and raise :class:`~raetsalt.errors.TargetError` saying so.

Nodegroups
----------
A nodegroup is a compound string or a list of tokens.  As in Salt, a definition with
no operators, no ``*`` and no ``X@`` prefix is a list of names: plain names become an
exact ``L@`` list and names containing regex characters (``( [ { \\ ? } ]``) become
``E@`` regexes.  ``N@`` inside a definition expands recursively; a cycle is an error.

Errors and deliberate divergences from Salt 3008
------------------------------------------------
Salt logs most of these and quietly matches nothing (or, on the master, sometimes
guesses).  Here every one raises :class:`~raetsalt.errors.TargetError` with a message
naming the problem, on both sides, so a typo is never mistaken for "no minions":

* unbalanced parentheses (Salt's master auto-closes a missing ``)``; its minion fails
  to ``eval``: we reject on both sides), ``()``, a leading or dangling ``and``/``or``,
  ``and``/``or`` right after ``(``, two operands with no operator between them,
  ``not not``;
* an invalid regex (``pcre``, ``E@``, ``grain_pcre``/``P@``), an invalid address or
  CIDR, an empty pattern (``G@``), a ``grain`` target with no delimiter (Salt: no match);
* an unknown matcher letter such as ``X@foo`` (Salt takes the whole token as a glob
  literal) or a delimiter on a matcher that does not take one (``L|@a``).  A token
  only counts as a matcher when it starts with one upper-case letter, optionally one
  delimiter character, then ``@``; a minion id of that shape must be targeted with
  ``L@``;
* an unknown, empty or cyclic nodegroup, or ``N@`` with no nodegroups configured
  (Salt: logs and drops the group, which can leave a dangling operator);
* a ``grain_pcre`` pattern is checked at the top-level split only (the pattern after
  the first delimiter); Salt's deeper splits of the same text that are not valid
  regexes quietly do not match, as in Salt.

Other divergences, each chosen as the safe or the consistent option:

* a nodegroup expansion is **always** parenthesised, and a plain-list nodegroup is
  turned into ``L@``/``E@`` whether it is used directly or nested in another nodegroup
  (Salt only converts it at the top level, so a nested list group became invalid);
* the ``E@`` conversion of a plain-list nodegroup makes one ``E@`` per name, OR-ed,
  instead of Salt's single ``E@a,b`` regex (which never matches two names);
* an ``ipcidr`` grain given as one string is treated as a one-element list (Salt tests
  a *substring* of the string, so ``10.0.0.1`` would match ``10.0.0.12``); addresses
  are compared as parsed addresses, and unparsable grain addresses never match;
* **Unknown grains** (and pillar).  Salt 3008.3's master drops minions without cached data from
  ``grain`` targets but *keeps* them for ``ipcidr`` and for ``not`` (``not G@os:X``
  = every accepted minion minus the matches, including uncached ones).  Here a minion
  whose grains are ``None`` is *unknown* for ``G@``/``P@``/``S@`` and evaluation is
  three-valued (the same holds for ``I@``/``J@`` and an unknown pillar):
  :func:`match_bounds` returns the minions that *definitely* match and
  those that *possibly* match (``not unknown`` stays unknown).  :func:`match_minions`
  returns the definite set.  For ACL subset checks, :func:`target_within` decides
  an unknown minion by treating every grain/ipcidr term as an independent unknown
  and requiring "requested implies allowed" under *every* assignment, so
  ``G@os:Ubuntu`` stays inside ``G@os:Ubuntu`` but missing data can never let a
  request reach a minion the allowed expression might exclude.  When every minion
  has grains, both bounds are equal and this is plain set inclusion.

Nothing here performs I/O or reads a clock.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from raetsalt.errors import TargetError

__all__ = [
    "CLI_FLAGS",
    "TARGET_TYPES",
    "UNSUPPORTED_TARGET_TYPES",
    "MatchBounds",
    "MinionFacts",
    "MinionTable",
    "Nodegroups",
    "expand_nodegroup",
    "match_bounds",
    "match_minions",
    "match_self",
    "target_within",
    "tgt_type_from_flag",
    "validate_target",
]

Grains = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class MinionFacts:
    """What targets match for one minion: its ``grains`` and its ``pillar`` (None: not
    known).  A minion table may hold a plain grains mapping instead (pillar unknown)."""

    grains: Grains | None
    pillar: Mapping[str, Any] | None = None


MinionTable = Mapping[str, Grains | MinionFacts | None]
Nodegroups = Mapping[str, str | Sequence[str]]
Target = str | Sequence[str]

TARGET_TYPES: tuple[str, ...] = (
    "glob",
    "pcre",
    "list",
    "grain",
    "grain_pcre",
    "pillar",
    "pillar_pcre",
    "ipcidr",
    "nodegroup",
    "compound",
)
"""Target types this module evaluates."""

UNSUPPORTED_TARGET_TYPES: tuple[str, ...] = (
    "pillar_exact",
    "compound_pillar_exact",
    "range",
)
"""Salt target types that are recognised by name but refused with TargetError."""

CLI_FLAGS: Mapping[str, str] = {
    "-E": "pcre",
    "--pcre": "pcre",
    "-L": "list",
    "--list": "list",
    "-G": "grain",
    "--grain": "grain",
    "-P": "grain_pcre",
    "--grain-pcre": "grain_pcre",
    "-I": "pillar",
    "--pillar": "pillar",
    "-J": "pillar_pcre",
    "--pillar-pcre": "pillar_pcre",
    "-S": "ipcidr",
    "--ipcidr": "ipcidr",
    "-N": "nodegroup",
    "--nodegroup": "nodegroup",
    "-C": "compound",
    "--compound": "compound",
}
"""Salt CLI targeting flags -> tgt_type.  No flag means ``glob``."""

_UNSUPPORTED_FLAGS: Mapping[str, str] = {
    "-R": "range",
    "--range": "range",
}

_OPERATORS = frozenset({"and", "or", "not", "(", ")"})
_SUPPORTED_ENGINES = frozenset("GPIJLNSE")
_UNSUPPORTED_ENGINES: Mapping[str, str] = {
    "R": "range targeting (R@) is not supported",
    "T": "resource targeting (T@) is not supported",
    "M": "resource targeting (M@) is not supported",
}
_DELIMITED_ENGINES = frozenset("GPIJ")
# Engines that read minion data (grains or pillar) rather than the id.
_DATA_ENGINES = frozenset("GPSIJ")
_PILLAR_ENGINES = frozenset("IJ")
_REGEX_ENGINES = frozenset("PJ")
# One upper-case letter, an optional one-character delimiter, then '@'.  Anything of
# this shape is matcher syntax; everything else is a glob.
_MATCHER_RE = re.compile(r"(?P<engine>[A-Z])(?P<delim>[^@])?@(?P<pattern>.*)\Z", re.DOTALL)
_NODEGROUP_TYPE_RE = re.compile(r"[A-Z]@")
_NODEGROUP_REGEX_CHARS = frozenset("([{\\?}])")


def tgt_type_from_flag(flag: str | None) -> str:
    """Map a Salt CLI targeting flag (``-E``, ``--grain-pcre``, ...) to a tgt_type.

    ``None`` or ``""`` gives ``glob``.  Range flags raise TargetError (unsupported);
    anything else raises TargetError (unknown flag).
    """
    if not flag:
        return "glob"
    if flag in CLI_FLAGS:
        return CLI_FLAGS[flag]
    if flag in _UNSUPPORTED_FLAGS:
        raise TargetError(
            f"targeting flag {flag} ({_UNSUPPORTED_FLAGS[flag]}) is not supported by raetsalt"
        )
    raise TargetError(f"unknown targeting flag {flag!r}")


@dataclass(frozen=True, slots=True)
class MatchBounds:
    """The minions a target definitely matches and those it possibly matches.

    They differ only for minions whose grains are unknown (``None`` in the table).
    """

    definite: frozenset[str]
    possible: frozenset[str]


# ---------------------------------------------------------------------------
# Expression tree
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Atom:
    engine: str  # "" for a glob, else one of _SUPPORTED_ENGINES minus N
    pattern: str
    delimiter: str = ":"
    # Pre-parsed pattern data (regex, ip target, id list) so evaluation never fails.
    compiled: Any = None


@dataclass(frozen=True, slots=True)
class _Not:
    operand: _Node


@dataclass(frozen=True, slots=True)
class _And:
    left: _Node
    right: _Node


@dataclass(frozen=True, slots=True)
class _Or:
    left: _Node
    right: _Node


_Node = _Atom | _Not | _And | _Or


# ---------------------------------------------------------------------------
# Atoms
# ---------------------------------------------------------------------------


def _compile_regex(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise TargetError(f"invalid regular expression in {what} {pattern!r}: {exc}") from None


_IpTarget = (
    ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network | ipaddress.IPv6Network
)


def _parse_ip_target(pattern: str) -> _IpTarget:
    try:
        return ipaddress.ip_address(pattern)
    except ValueError:
        pass
    try:
        return ipaddress.ip_network(pattern)
    except ValueError as exc:
        raise TargetError(f"invalid IP address or CIDR {pattern!r}: {exc}") from None


def _make_atom(engine: str, pattern: str, delimiter: str = ":") -> _Atom:
    """Validate a pattern for ``engine`` and return its atom (engine "" = glob)."""
    if engine == "":
        return _Atom("", pattern)
    if pattern == "":
        raise TargetError(f"empty pattern after {engine}@")
    if engine == "E":
        return _Atom("E", pattern, compiled=_compile_regex(pattern, "E@/pcre target"))
    if engine == "L":
        return _Atom("L", pattern, compiled=frozenset(p for p in pattern.split(",") if p))
    if engine == "S":
        return _Atom("S", pattern, compiled=_parse_ip_target(pattern))
    if engine in ("G", "P", "I", "J"):
        kind = {"G": "grain", "P": "grain_pcre", "I": "pillar", "J": "pillar_pcre"}[engine]
        if delimiter not in pattern:
            raise TargetError(
                f"{kind} target {pattern!r} needs key{delimiter}value (no {delimiter!r} found)"
            )
        if engine in _REGEX_ENGINES:
            # Salt lower-cases the pattern before compiling it; check what will be used.
            value = pattern.split(delimiter, 1)[1].lower()
            _compile_regex(value, f"{kind} target")
        return _Atom(engine, pattern, delimiter)
    raise TargetError(f"internal: no atom for engine {engine!r}")  # pragma: no cover


def _parse_token(token: str) -> _Atom:
    """Turn one compound token (not an operator, not N@) into an atom."""
    m = _MATCHER_RE.match(token)
    if m is None:
        return _Atom("", token)
    engine, delim, pattern = m.group("engine"), m.group("delim"), m.group("pattern")
    if engine in _UNSUPPORTED_ENGINES:
        raise TargetError(f"{_UNSUPPORTED_ENGINES[engine]} (in {token!r})")
    if engine not in _SUPPORTED_ENGINES:
        raise TargetError(
            f"unknown matcher {engine}@ in {token!r} (known: G@ P@ I@ J@ L@ E@ S@ N@; "
            f"a bare word is a glob)"
        )
    if delim is not None and engine not in _DELIMITED_ENGINES:
        raise TargetError(f"matcher {engine}@ does not take a delimiter (in {token!r})")
    return _make_atom(engine, pattern, delim or ":")


# ---------------------------------------------------------------------------
# Grain matching (Salt's subdict_match rules)
# ---------------------------------------------------------------------------


def _value_match(value: Any, pattern: str, regex: bool) -> bool:
    text = str(value).lower()
    pat = pattern.lower()
    if regex:
        try:
            return re.match(pat, text) is not None
        except re.error:
            # Salt: a deeper split that is not a valid regex simply does not match.
            return False
    return fnmatch.fnmatchcase(text, pat)


_MISSING = object()
_INT_RE = re.compile(r"-?[0-9]+\Z")


def _traverse(data: Any, path: Sequence[str]) -> Any:
    """Walk dicts by key and lists by index or by key of an embedded dict."""
    ptr = data
    for key in path:
        if isinstance(ptr, list):
            if _INT_RE.match(key):
                try:
                    ptr = ptr[int(key)]
                except IndexError:
                    return _MISSING
                continue
            for item in ptr:
                if isinstance(item, Mapping) and key in item:
                    ptr = item[key]
                    break
            else:
                return _MISSING
        elif isinstance(ptr, Mapping):
            if key in ptr:
                ptr = ptr[key]
            elif _INT_RE.match(key) and int(key) in ptr:
                # Salt YAML-loads a missing key, so "1" finds an integer key 1.
                ptr = ptr[int(key)]
            else:
                return _MISSING
        else:
            return _MISSING
    return ptr


def _dict_match(target: Mapping[str, Any], pattern: str, delimiter: str, regex: bool) -> bool:
    wildcard = pattern.startswith("*" + delimiter)
    if wildcard:
        pattern = pattern[2:]
    if pattern == "*" or pattern in target:
        return True
    if _subdict_match(target, pattern, delimiter, regex):
        return True
    if wildcard:
        # "*:pattern" tests the values one level down: scalars and list items by
        # pattern, nested dicts by key (the wildcard does not recurse further).
        for value in target.values():
            if isinstance(value, Mapping):
                if _dict_match(value, pattern, delimiter, regex):
                    return True
            elif isinstance(value, list):
                if any(_value_match(item, pattern, regex) for item in value):
                    return True
            elif _value_match(value, pattern, regex):
                return True
    return False


def _subdict_match(data: Any, expr: str, delimiter: str, regex: bool) -> bool:
    splits = expr.split(delimiter)
    if len(splits) == 1:
        return False
    # Deepest key first: for a:b:c try data[a][b] ~ c, then data[a] ~ b:c.
    for idx in range(len(splits) - 1, 0, -1):
        key_parts = splits[:idx]
        if key_parts == ["*"]:
            match: Any = data
            pattern = expr
        else:
            match = _traverse(data, key_parts)
            pattern = delimiter.join(splits[idx:])
        if match is _MISSING or (isinstance(match, Mapping) and not match):
            continue
        if isinstance(match, Mapping):
            if _dict_match(match, pattern, delimiter, regex):
                return True
            continue
        if isinstance(match, (list, tuple)):
            for member in match:
                if isinstance(member, Mapping) and _dict_match(member, pattern, delimiter, regex):
                    return True
                if _value_match(member, pattern, regex):
                    return True
            continue
        if _value_match(match, pattern, regex):
            return True
    return False


def _ip_match(grains: Grains, target: _IpTarget) -> bool:
    proto = f"ipv{target.version}"
    values = grains.get(proto)
    if values is None:
        return False
    if isinstance(values, (str, bytes)):
        values = [values]
    if not isinstance(values, Iterable):
        return False
    for raw in values:
        try:
            addr = ipaddress.ip_address(str(raw))
        except ValueError:
            continue
        if isinstance(target, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            if addr == target:
                return True
        elif addr.version == target.version and addr in target:
            return True
    return False


# ---------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------


def _facts(value: Grains | MinionFacts | None) -> MinionFacts:
    if isinstance(value, MinionFacts):
        return value
    return MinionFacts(value, None)


class _Evaluator:
    def __init__(self, minions: MinionTable) -> None:
        self.facts = {mid: _facts(value) for mid, value in minions.items()}
        self.universe = frozenset(minions)

    def atom(self, atom: _Atom) -> tuple[frozenset[str], frozenset[str]]:
        engine = atom.engine
        if engine == "":
            hit = frozenset(m for m in self.universe if fnmatch.fnmatchcase(m, atom.pattern))
            return hit, hit
        if engine == "E":
            rx: re.Pattern[str] = atom.compiled
            hit = frozenset(m for m in self.universe if rx.match(m))
            return hit, hit
        if engine == "L":
            hit = self.universe & atom.compiled
            return hit, hit
        definite: set[str] = set()
        unknown: set[str] = set()
        pillar = engine in _PILLAR_ENGINES
        for mid, facts in self.facts.items():
            data = facts.pillar if pillar else facts.grains
            if data is None:
                unknown.add(mid)
                continue
            if engine == "S":
                ok = _ip_match(data, atom.compiled)
            else:
                ok = _subdict_match(data, atom.pattern, atom.delimiter,
                                    engine in _REGEX_ENGINES)
            if ok:
                definite.add(mid)
        return frozenset(definite), frozenset(definite | unknown)

    def eval(self, node: _Node) -> tuple[frozenset[str], frozenset[str]]:
        if isinstance(node, _Atom):
            return self.atom(node)
        if isinstance(node, _Not):
            d, p = self.eval(node.operand)
            return self.universe - p, self.universe - d
        ld, lp = self.eval(node.left)
        rd, rp = self.eval(node.right)
        if isinstance(node, _And):
            return ld & rd, lp & rp
        return ld | rd, lp | rp


# ---------------------------------------------------------------------------
# Compound parsing
# ---------------------------------------------------------------------------


def _tokens_of(tgt: Target) -> list[str]:
    if isinstance(tgt, str):
        return tgt.split()
    return [str(t) for t in tgt]


def expand_nodegroup(name: str, nodegroups: Nodegroups | None) -> list[str]:
    """Expand nodegroup ``name`` into compound tokens, recursively, in parentheses.

    Raises TargetError for an unknown, empty, malformed or cyclic nodegroup.
    """
    return _expand_group(name, nodegroups, ())


def _expand_group(name: str, nodegroups: Nodegroups | None, stack: tuple[str, ...]) -> list[str]:
    if not nodegroups or name not in nodegroups:
        if not nodegroups:
            raise TargetError(f"nodegroup {name!r} is not defined (no nodegroups configured)")
        raise TargetError(f"unknown nodegroup {name!r}")
    if name in stack:
        chain = " -> ".join((*stack, name))
        raise TargetError(f"nodegroup {name!r} includes itself ({chain})")
    value = nodegroups[name]
    if isinstance(value, str):
        words = value.split()
    elif isinstance(value, (list, tuple)):
        words = [str(w) for w in value]
    else:
        raise TargetError(
            f"nodegroup {name!r} must be a string or a list, not {type(value).__name__}"
        )
    if not words:
        raise TargetError(f"nodegroup {name!r} is empty")
    plain = not any(
        w in _OPERATORS or "*" in w or _NODEGROUP_TYPE_RE.match(w) for w in words
    )
    if plain:
        # A bare list of names (Salt's L@ / E@ conversion, one E@ per regex name).
        names = [w for w in words if not (_NODEGROUP_REGEX_CHARS & set(w))]
        regexes = [w for w in words if _NODEGROUP_REGEX_CHARS & set(w)]
        parts: list[str] = []
        if names:
            parts.append("L@" + ",".join(names))
        for rx in regexes:
            if parts:
                parts.append("or")
            parts.append("E@" + rx)
        return ["(", *parts, ")"]
    out: list[str] = ["("]
    for word in words:
        if word.startswith("N@") and word not in _OPERATORS:
            out.extend(_expand_group(word[2:], nodegroups, (*stack, name)))
        else:
            out.append(word)
    out.append(")")
    return out


def _expand_tokens(tokens: list[str], nodegroups: Nodegroups | None) -> list[str]:
    out: list[str] = []
    for tok in tokens:
        if tok.startswith("N@"):
            if len(tok) == 2:
                raise TargetError("empty pattern after N@")
            out.extend(_expand_group(tok[2:], nodegroups, ()))
        else:
            out.append(tok)
    return out


class _Parser:
    """Recursive descent over tokens: or_expr := and_expr ('or' and_expr)* ..."""

    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.text = text

    def _peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _fail(self, why: str) -> TargetError:
        return TargetError(f"invalid compound target {self.text!r}: {why}")

    def parse(self) -> _Node:
        if not self.tokens:
            raise self._fail("empty expression")
        node = self._or()
        tok = self._peek()
        if tok is not None:
            if tok == ")":
                raise self._fail("unexpected ')' without a matching '('")
            raise self._fail(f"missing 'and'/'or' before {tok!r}")
        return node

    def _or(self) -> _Node:
        node = self._and()
        while self._peek() == "or":
            self.pos += 1
            node = _Or(node, self._and())
        return node

    def _and(self) -> _Node:
        node = self._not()
        while True:
            tok = self._peek()
            if tok == "and":
                self.pos += 1
                node = _And(node, self._not())
            elif tok == "not":
                # "A not B" means "A and not B", as in Salt.
                node = _And(node, self._not())
            else:
                return node

    def _not(self) -> _Node:
        if self._peek() == "not":
            self.pos += 1
            if self._peek() == "not":
                raise self._fail("'not not' is not allowed")
            return _Not(self._primary("not"))
        return self._primary(self.tokens[self.pos - 1] if self.pos else None)

    def _primary(self, after: str | None) -> _Node:
        tok = self._peek()
        if tok is None:
            if after in ("and", "or", "not"):
                raise self._fail(f"expression ends after {after!r}")
            raise self._fail("expression ends where an operand was expected")
        if tok == "(":
            self.pos += 1
            nxt = self._peek()
            if nxt in ("and", "or"):
                raise self._fail(f"{nxt!r} right after '('")
            if nxt == ")":
                raise self._fail("empty parentheses '()'")
            if nxt is None:
                raise self._fail("unbalanced '(' (missing ')')")
            node = self._or()
            if self._peek() != ")":
                raise self._fail("unbalanced '(' (missing ')')")
            self.pos += 1
            return node
        if tok in ("and", "or"):
            if self.pos == 0:
                raise self._fail(f"expression starts with binary operator {tok!r}")
            raise self._fail(f"operator {tok!r} follows {after!r} with no operand between")
        if tok == ")":
            raise self._fail("unexpected ')'")
        self.pos += 1
        return _parse_token(tok)


def _build(tgt: Target, tgt_type: str, nodegroups: Nodegroups | None, delimiter: str) -> _Node:
    """Parse and validate any supported target into an expression tree."""
    if tgt_type in UNSUPPORTED_TARGET_TYPES:
        raise TargetError(f"target type {tgt_type!r} is not supported")
    if tgt_type not in TARGET_TYPES:
        raise TargetError(
            f"unknown target type {tgt_type!r}; expected one of {', '.join(TARGET_TYPES)}"
        )
    if tgt_type == "list":
        if isinstance(tgt, str):
            ids = frozenset(p for p in tgt.split(",") if p)
        else:
            ids = frozenset(str(p) for p in tgt)
        return _Atom("L", ",".join(sorted(ids)), compiled=ids)
    if tgt_type == "compound":
        tokens = _expand_tokens(_tokens_of(tgt), nodegroups)
        text = tgt if isinstance(tgt, str) else " ".join(str(t) for t in tgt)
        return _Parser(tokens, text).parse()
    if not isinstance(tgt, str):
        raise TargetError(f"a {tgt_type} target must be a string, not {type(tgt).__name__}")
    if tgt == "":
        raise TargetError(f"empty {tgt_type} target")
    if tgt_type == "nodegroup":
        return _Parser(_expand_group(tgt, nodegroups, ()), f"N@{tgt}").parse()
    if len(delimiter) != 1:
        raise TargetError(f"delimiter must be one character, not {delimiter!r}")
    engine = {"glob": "", "pcre": "E", "grain": "G", "grain_pcre": "P", "pillar": "I",
              "pillar_pcre": "J", "ipcidr": "S"}[tgt_type]
    return _make_atom(engine, tgt, delimiter)


def validate_target(
    tgt: Target,
    tgt_type: str = "glob",
    nodegroups: Nodegroups | None = None,
    *,
    delimiter: str = ":",
    check_nodegroups: bool = True,
) -> None:
    """Raise TargetError if ``tgt`` is not a valid target of ``tgt_type``.

    With ``check_nodegroups=False``, ``N@`` references are not resolved (for checking
    ACL target expressions before the nodegroups are known).
    """
    if not check_nodegroups and tgt_type == "compound":
        tokens = ["L@x" if t.startswith("N@") else t for t in _tokens_of(tgt)]
        _Parser(tokens, tgt if isinstance(tgt, str) else " ".join(tokens)).parse()
        for t in _tokens_of(tgt):
            if t == "N@":
                raise TargetError("empty pattern after N@")
        return
    _build(tgt, tgt_type, nodegroups, delimiter)


def match_bounds(
    tgt: Target,
    tgt_type: str,
    minions: MinionTable,
    nodegroups: Nodegroups | None = None,
    *,
    delimiter: str = ":",
) -> MatchBounds:
    """Minions that definitely / possibly match; they differ only for unknown grains.

    ACL code should require ``possible(requested) <= definite(allowed)``.
    """
    node = _build(tgt, tgt_type or "glob", nodegroups, delimiter)
    definite, possible = _Evaluator(minions).eval(node)
    return MatchBounds(definite, possible)


def _term_key(atom: _Atom) -> tuple[str, str, str]:
    """Identify a grain/ipcidr term so equivalent spellings count as one unknown."""
    if atom.engine == "S":
        return ("S", str(atom.compiled), "")
    key, sep, value = atom.pattern.partition(atom.delimiter)
    if atom.delimiter not in value:
        # One delimiter: the split is unambiguous and only the value is case-folded.
        return (atom.engine, key + sep + value.lower(), atom.delimiter)
    return (atom.engine, atom.pattern, atom.delimiter)


def _grain_atoms(node: _Node, out: dict[tuple[str, str, str], _Atom]) -> None:
    if isinstance(node, _Atom):
        if node.engine in _DATA_ENGINES:
            out[_term_key(node)] = node
    elif isinstance(node, _Not):
        _grain_atoms(node.operand, out)
    else:
        _grain_atoms(node.left, out)
        _grain_atoms(node.right, out)


def _eval_point(node: _Node, mid: str, assumed: Mapping[tuple[str, str, str], bool]) -> bool:
    """Evaluate for one minion whose grain terms take the ``assumed`` values."""
    if isinstance(node, _Atom):
        if node.engine in _DATA_ENGINES:
            return assumed[_term_key(node)]
        return mid in _Evaluator({mid: {}}).atom(node)[0]
    if isinstance(node, _Not):
        return not _eval_point(node.operand, mid, assumed)
    if isinstance(node, _And):
        return _eval_point(node.left, mid, assumed) and _eval_point(node.right, mid, assumed)
    return _eval_point(node.left, mid, assumed) or _eval_point(node.right, mid, assumed)


def target_within(
    tgt: Target,
    tgt_type: str,
    allowed: Target,
    minions: MinionTable,
    nodegroups: Nodegroups | None = None,
    *,
    delimiter: str = ":",
    max_unknown_terms: int = 10,
) -> bool:
    """Is every minion that ``tgt`` may reach inside the compound ``allowed`` expression?

    Minions whose grains (and pillar, when either expression has ``I@``/``J@`` terms)
    are known: plain set inclusion (an empty target is inside anything, as in Salt).
    Any other minion passes only if "requested implies allowed" holds for every
    true/false combination of the grain, pillar and ipcidr terms of both expressions;
    with more than ``max_unknown_terms`` distinct terms it does not pass.  Raises
    TargetError if either is malformed.
    """
    requested = _build(tgt, tgt_type or "glob", nodegroups, delimiter)
    permitted = _build(allowed, "compound", nodegroups, ":")
    terms: dict[tuple[str, str, str], _Atom] = {}
    _grain_atoms(requested, terms)
    _grain_atoms(permitted, terms)
    needs_pillar = any(atom.engine in _PILLAR_ENGINES for atom in terms.values())

    def is_known(facts: MinionFacts) -> bool:
        return facts.grains is not None and (not needs_pillar or facts.pillar is not None)

    facts = {m: _facts(value) for m, value in minions.items()}
    evaluator = _Evaluator({m: f for m, f in facts.items() if is_known(f)})
    if not evaluator.eval(requested)[0] <= evaluator.eval(permitted)[0]:
        return False
    unknown = [m for m, f in facts.items() if not is_known(f)]
    if not unknown:
        return True
    if len(terms) > max_unknown_terms:
        return False
    keys = list(terms)
    for mid in unknown:
        for values in itertools.product((False, True), repeat=len(keys)):
            assumed = dict(zip(keys, values, strict=True))
            if _eval_point(requested, mid, assumed) and not _eval_point(permitted, mid, assumed):
                return False
    return True


def match_minions(
    tgt: Target,
    tgt_type: str,
    minions: MinionTable,
    nodegroups: Nodegroups | None = None,
    *,
    delimiter: str = ":",
) -> set[str]:
    """The master-side expansion: ids in ``minions`` that ``tgt`` matches.

    ``minions`` maps id -> grains or ``MinionFacts`` (``None`` = no cached data; such
    minions never match grain, pillar or ipcidr terms).  ``delimiter`` applies to
    ``grain``/``grain_pcre``/``pillar``/``pillar_pcre`` targets (Salt's ``--delimiter``).
    Raises TargetError for a malformed or unsupported target.
    """
    return set(match_bounds(tgt, tgt_type, minions, nodegroups, delimiter=delimiter).definite)


def match_self(
    tgt: Target,
    tgt_type: str,
    minion_id: str,
    grains: Grains | None,
    nodegroups: Nodegroups | None = None,
    *,
    delimiter: str = ":",
    pillar: Mapping[str, Any] | None = None,
) -> bool:
    """The minion-side re-check: does this publication target ``minion_id``?

    Uses the same evaluator as the master, so both sides agree; ``pillar`` is the
    minion's own (``I@``/``J@``; None matches nothing).  Raises TargetError for a
    malformed or unsupported target (the caller should then ignore the job).
    """
    table = {minion_id: MinionFacts(grains if grains is not None else {},
                                    pillar if pillar is not None else {})}
    return minion_id in match_minions(tgt, tgt_type, table, nodegroups, delimiter=delimiter)
