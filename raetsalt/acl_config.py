"""Checking the access options when the master starts: ``peer``, ``peer_run``,
``publisher_acl`` (with ``publisher_acl_blacklist``) and ``external_auth``.

The grammar is described in :mod:`raetsalt.acl`, which applies the rules.  Every
``validate_*`` function raises ConfigError naming the option, the path inside it and
the problem (a regex that does not compile, a rule of the wrong shape, an argument
rule that is neither a regex, ``null`` nor a literal), and returns warnings for
regexes that look like exact names but are prefix matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raetsalt.errors import ConfigError, TargetError
from raetsalt.targeting import Nodegroups, validate_target

__all__ = [
    "validate_acl_config",
    "validate_eauth_config",
    "validate_master_access",
    "validate_peer_config",
    "validate_peer_run_config",
]

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
            args = one.get("args") or []
            if not isinstance(args, list):
                raise self.fail(f"{p}['args']", "must be a list of argument rules")
            for j, rule in enumerate(args):
                self.value_rule(f"{p}['args'][{j}]", rule)
            kwargs = one.get("kwargs") or {}
            if not isinstance(kwargs, Mapping):
                raise self.fail(f"{p}['kwargs']", "must be a mapping of name -> argument rule")
            for key, rule in kwargs.items():
                if not isinstance(key, str) or not key or key.startswith("__"):
                    raise self.fail(f"{p}['kwargs']", f"{key!r} cannot be a keyword argument "
                                    "name (names are text and never start with '__')")
                self.value_rule(f"{p}['kwargs'][{key!r}]", rule)

    def value_rule(self, path: str, rule: Any) -> None:
        """``null`` (any value), a regex (text values only) or a literal true/false/number."""
        if rule is None or isinstance(rule, bool | int | float):
            return
        if not isinstance(rule, str):
            raise self.fail(path, f"an argument rule is a regex, null (any value) or a "
                            f"literal true/false/number, not {type(rule).__name__} {rule!r}")
        self.regex(path, rule, "argument")

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
