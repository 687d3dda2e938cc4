"""Who an HTTP request is: its token (``X-Auth-Token``, a ``token`` in the lowstate, or
the ``session_id`` cookie on ``GET /events`` only), or eauth credentials in the lowstate.

Tokens are the master's eauth tokens (``raetsalt.auth.tokens``): ``POST /login`` asks
the master for one, exactly as ``raetsalt -a EAUTH -T`` does, so they expire after the
master's ``token_expire`` and a token made by the CLI works here too.  A token is looked
up by the SHA-256 of its text (the store's file name): no secret is ever compared
character by character, so response times say nothing about how much of a guess was
right.  In a cluster the store is the cluster's (``raetsalt.auth.tokens``): a token made
on any master works here, and a logout here ends it everywhere; a token this API has not
heard of yet is read from the cluster's database in the request's own thread.

Permissions: the master decides for everything it runs (publications, runners).  The
wheel functions, which the API serves itself over the master's key commands, are
decided here with the same rules (``raetsalt.acl.check_eauth``, kind ``wheel``, after
the ``publisher_acl_blacklist``), from the token's user, groups and backend.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raetsalt import acl
from raetsalt.auth.tokens import token_store

TOKEN_RE = re.compile(r"[0-9a-f]{64}\Z")
COOKIE = "session_id"
LOGOUT_WAIT = 3.0
"""Seconds a logout in a cluster waits for the cluster's database to take it (in the
request's thread), so the other masters refuse the token once it is answered."""


@dataclass(frozen=True, slots=True)
class TokenInfo:
    token: str
    name: str
    eauth: str
    groups: tuple[str, ...]
    start: float
    expire: float
    auth_list: tuple[Any, ...] | None


class Tokens:
    """The master's token store, read by the API (it runs as the master's user)."""

    def __init__(self, opts: Mapping[str, Any]) -> None:
        self.opts = opts
        self.store = token_store(opts, f"{opts.get('id') or ''}/api")

    def get(self, token: Any) -> TokenInfo | None:
        """The valid token's record, or None (malformed, unknown or expired)."""
        if not isinstance(token, str) or not TOKEN_RE.match(token):
            return None
        record = self.store.fetch(token, time.time())
        if record is None:
            return None
        try:
            groups = tuple(str(g) for g in record.get("groups") or ())
            auth_list = record.get("auth_list")
            return TokenInfo(token, str(record["name"]), str(record["eauth"]), groups,
                             float(record.get("start", 0.0)), float(record["expire"]),
                             tuple(auth_list) if isinstance(auth_list, list) else None)
        except (KeyError, TypeError, ValueError):
            return None

    def remove(self, token: str) -> None:
        if TOKEN_RE.match(token):
            self.store.remove(token, wait=LOGOUT_WAIT)

    # -- permissions ----------------------------------------------------------------------

    def _eauth_config(self, info: TokenInfo) -> Mapping[str, Any]:
        if info.auth_list is not None:
            return {info.eauth: {info.name: list(info.auth_list)}}
        config = self.opts.get("external_auth") or {}
        return config if isinstance(config, Mapping) else {}

    def perms(self, info: TokenInfo) -> list[Any]:
        """The user's rules (Salt's ``perms`` in the login answer)."""
        section = self._eauth_config(info).get(info.eauth) or {}
        if not isinstance(section, Mapping):
            return []
        return acl.fill_auth_list(section, f"external_auth[{info.eauth!r}]", info.name,
                                  info.groups, permissive=bool(self.opts.get("permissive_acl")))

    def check_runner(self, info: TokenInfo, fun: str, arg: list[Any]) -> acl.Decision:
        """The master's decision on a runner for an eauth user (``arg`` as on the
        lane); the master decides again when it runs it."""
        listed = acl.check_blacklist(self.opts.get("publisher_acl_blacklist"), info.name)
        if listed is not None:
            return listed
        return acl.check_eauth(self._eauth_config(info), info.eauth, info.name, info.groups,
                               fun, arg, kind="runner",
                               permissive=bool(self.opts.get("permissive_acl")))

    def check_wheel(self, info: TokenInfo, fun: str, arg: list[Any],
                    kwarg: Mapping[str, Any]) -> acl.Decision:
        listed = acl.check_blacklist(self.opts.get("publisher_acl_blacklist"), info.name)
        if listed is not None:
            return listed
        return acl.check_eauth(self._eauth_config(info), info.eauth, info.name, info.groups,
                               fun, arg, kind="wheel", kwarg=kwarg,
                               permissive=bool(self.opts.get("permissive_acl")))
