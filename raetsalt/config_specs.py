"""The value specs of the config schema: what one key accepts.

A ``Spec`` checks (and may normalise) one value; it raises ``SpecMismatch`` when the
value does not fit, and its ``describe`` text completes "key 'x' must be ...".  The
factories below (``string()``, ``integer(lo, hi)``, ``choice(values)``, ...) make the
specs the rows of ``raetsalt.config_schema`` use.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raetsalt.errors import KeepError
from raetsalt.keep.records import validate_name

__all__ = [
    "MAX_ID_LENGTH",
    "SALTENV_RE",
    "Spec",
    "SpecMismatch",
    "blacklist",
    "boolean",
    "choice",
    "external_auth",
    "id_problem",
    "integer",
    "ip_address",
    "mapping",
    "minion_id",
    "nodegroups",
    "number",
    "reactor_map",
    "roots",
    "rule_mapping",
    "string",
    "string_list",
    "string_or_list",
]


class SpecMismatch(Exception):
    """A value does not fit its spec; ``detail`` optionally says more than the spec text."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Spec:
    """What a key accepts.  ``describe`` completes "key 'x' must be ..."."""

    describe: str
    check: Callable[[Any], Any]


def _is_int(value: Any) -> bool:
    # bool is a subclass of int; ``raet_port: yes`` must not pass as 1.
    return isinstance(value, int) and not isinstance(value, bool)


def string(*, nonempty: bool = False, nullable: bool = False) -> Spec:
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise SpecMismatch()
        if nonempty and not value.strip():
            raise SpecMismatch("an empty string is not allowed")
        return value

    describe = "a non-empty string" if nonempty else "a string"
    if nullable:
        describe += " or null"
    return Spec(describe, check)


def integer(lo: int | None = None, hi: int | None = None) -> Spec:
    def check(value: Any) -> Any:
        if not _is_int(value):
            raise SpecMismatch()
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise SpecMismatch()
        return value

    if lo is not None and hi is not None:
        describe = f"an integer from {lo} to {hi}"
    elif lo is not None:
        describe = f"an integer >= {lo}"
    else:
        describe = "an integer"
    return Spec(describe, check)


def number(lo: float = 0.0) -> Spec:
    def check(value: Any) -> Any:
        if not (_is_int(value) or isinstance(value, float)) or value < lo:
            raise SpecMismatch()
        if not math.isfinite(value):  # YAML's .inf and .nan
            raise SpecMismatch("it is not a finite number")
        return float(value)

    return Spec(f"a number >= {lo:g}", check)


def boolean() -> Spec:
    def check(value: Any) -> Any:
        if not isinstance(value, bool):
            raise SpecMismatch()
        return value

    return Spec("true or false", check)


def choice(values: tuple[str, ...], *, why: str = "", nullable: bool = False) -> Spec:
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if value not in values:
            raise SpecMismatch(why)
        return value

    shown = ", ".join(repr(v) for v in values)
    describe = shown if len(values) == 1 else f"one of {shown}"
    if nullable:
        describe += " or null"
    return Spec(describe, check)


def string_list() -> Spec:
    def check(value: Any) -> Any:
        # ``key:`` followed only by comments parses as null; read it as "empty".
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SpecMismatch()
        return list(value)

    return Spec("a list of strings", check)


def string_or_list() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise SpecMismatch()

    return Spec("a string or a list of strings", check)


def mapping() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        return value

    return Spec("a mapping", check)


def rule_mapping(*, nullable: bool = False) -> Spec:
    """``peer``/``peer_run``/``publisher_acl``: name or regex -> list of rules
    (``nullable``: null stays null, "not configured", as ``mine_get`` needs)."""

    def check(value: Any) -> Any:
        if value is None:
            return None if nullable else {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        for name, rules in value.items():
            if not isinstance(name, str):
                raise SpecMismatch(f"entry {name!r} is not a string")
            if not isinstance(rules, list):
                raise SpecMismatch(f"the rules of {name!r} are not a list")
        return value

    return Spec("a mapping of names or regexes to lists of rules", check)


def optional_rule_mapping() -> Spec:
    """``mine_get``: like ``rule_mapping``, but unset (None) means "no rules at all"."""
    rules = rule_mapping()

    def check(value: Any) -> Any:
        return None if value is None else rules.check(value)

    return Spec("a mapping of names or regexes to lists of rules, or nothing", check)


def external_auth() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        for backend, users in value.items():
            if not isinstance(backend, str) or not isinstance(users, dict):
                raise SpecMismatch(f"backend {backend!r} must map to a mapping of users")
            for user, rules in users.items():
                if isinstance(user, str) and user.startswith("^"):
                    continue  # a backend setting (^filename...), checked at master start
                if not isinstance(rules, list):
                    raise SpecMismatch(f"the rules of {backend}:{user} are not a list")
        return value

    return Spec("a mapping of auth backends to mappings of users", check)


def blacklist() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        for name, items in value.items():
            if name not in ("users", "modules"):
                raise SpecMismatch(f"unknown entry {name!r} (allowed: 'users', 'modules')")
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise SpecMismatch(f"{name!r} must be a list of strings")
        return value

    return Spec("a mapping with 'users' and/or 'modules' lists", check)


def nodegroups() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        for name, target in value.items():
            ok = isinstance(target, str) or (
                isinstance(target, list) and all(isinstance(t, str) for t in target)
            )
            if not isinstance(name, str) or not ok:
                raise SpecMismatch(f"group {name!r} must map to a target string or list")
        return value

    return Spec("a mapping of group names to compound targets", check)


def reactor_map() -> Spec:
    """Salt's ``reactor:``: a list of one-key mappings, tag glob -> file(s)."""
    from raetsalt.services.reactor import ReactorConfigError, ReactorMap

    def check(value: Any) -> Any:
        if value is None:
            return []
        try:
            ReactorMap.from_config(value)
        except ReactorConfigError as exc:
            raise SpecMismatch(str(exc)) from None
        return value

    return Spec("a list of one-key mappings of tag globs to SLS files", check)


def engines_list() -> Spec:
    """Salt's ``engines:``: names, or one-key mappings name -> options (a mapping of
    names -> options is taken too, as Salt does)."""

    def check(value: Any) -> Any:
        if value is None:
            return []
        items = [{k: v} for k, v in value.items()] if isinstance(value, dict) else value
        if not isinstance(items, list):
            raise SpecMismatch("not a list")
        for item in items:
            if isinstance(item, str) and item:
                continue
            if (isinstance(item, dict) and len(item) == 1
                    and isinstance(next(iter(item)), str)
                    and isinstance(next(iter(item.values())), dict | None)):
                continue
            raise SpecMismatch(f"{item!r} is neither a name nor a one-key mapping of a "
                               "name to its options")
        return items

    return Spec("a list of engine names or one-key mappings name -> options", check)


def ip_address(*, nullable: bool = False) -> Spec:
    def check(value: Any) -> Any:
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise SpecMismatch()
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise SpecMismatch("it is not an IP address") from None
        return value

    return Spec("an IPv4 or IPv6 address" + (" or null" if nullable else ""), check)


def minion_id() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return None
        # Salt turns a numeric id (``id: 123``) into its string form.
        if _is_int(value) or isinstance(value, float):
            value = str(value)
        if not isinstance(value, str):
            raise SpecMismatch()
        problem = id_problem(value)
        if problem:
            raise SpecMismatch(problem)
        return value

    return Spec("a valid id string", check)


MAX_ID_LENGTH = 128
"""The longest estate name the road carries (RAET's)."""


def id_problem(value: str) -> str:
    """Why ``value`` cannot be a node id, or "".

    The id names the node's key files in the keep and its estate on the road, so it must
    be a name both accept (Salt's own rule, no '/', '\\' or NUL, is looser: Salt allows
    spaces, which the road cannot carry)."""
    if not value.strip():
        return "it is empty"
    if any(c in value for c in "/\\\0"):
        return "it contains '/', '\\' or a NUL"
    if value in (".", ".."):
        return "it is '.' or '..'"
    if value != value.strip():
        return "it has leading or trailing white space"
    if len(value) > MAX_ID_LENGTH:
        return f"it is longer than {MAX_ID_LENGTH} characters"
    try:
        validate_name(value, "id")
        if "~" in value:  # the keep takes it, the road does not
            raise KeepError(value)
    except KeepError:
        return ("only letters, digits and _.@+=- are allowed, the first a letter, digit or _, "
                "and no '..'")
    return ""



SALTENV_RE = re.compile(r"(?!\.+\Z)[A-Za-z0-9_.@+-]{1,64}\Z")
"""A saltenv (file_roots/pillar_roots key) as raetsalt accepts it, from a config file or
a minion's request: no '/', not only dots, at most 64 characters."""


def roots() -> Spec:
    def check(value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise SpecMismatch()
        for env, dirs in value.items():
            if not isinstance(env, str) or not SALTENV_RE.match(env):
                raise SpecMismatch(f"saltenv {env!r} must match {SALTENV_RE.pattern}")
            if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
                raise SpecMismatch(f"saltenv {env!r} must map to a list of directories")
        return value

    return Spec("a mapping of saltenvs to lists of directories", check)
