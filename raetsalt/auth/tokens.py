"""eauth tokens kept on the master (``raetsalt -a EAUTH -T``).

A token is 32 random bytes in hex.  The master stores one JSON file per token under
``<cachedir>/tokens`` (directory 0700, files 0600), named by the SHA-256 of the token so
a listing of the directory does not reveal usable tokens.  A record holds the eauth user,
the backend, the groups, when it was made and when it expires (``token_expire``
seconds later; wall-clock time), and with ``keep_acl_in_token`` the user's rules as
they were at login.  An expired token is removed when it is next presented.

In a cluster (``cluster_id`` with ``cluster_store``) the store is shared too
(``shared``: ``raetsalt.store.pgtokens``): a token made on one master is written to the
cluster's database under the same SHA-256, so every master (and its REST API) takes it,
and a logout on any master revokes it everywhere.  The files stay the master's own copy:
its tokens work while the database is away.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)
_TOKEN = re.compile(r"[0-9a-f]{64}\Z")
REVOKE_KEEP = 7 * 86400.0
"""Seconds a revocation of a token this master does not know is kept in the cluster."""


class Shared(Protocol):
    """The cluster's tokens (``raetsalt.store.pgtokens.ClusterTokens``)."""

    def lookup(self, digest: str, now: float) -> dict[str, Any] | None: ...
    def revoked(self, digest: str) -> bool: ...
    def put(self, digest: str, record: dict[str, Any], wait: float = 0.0) -> bool: ...
    def revoke(self, digest: str, expire: float, wait: float = 0.0) -> bool: ...
    def fetch(self, digest: str, timeout: float) -> None: ...
    def close(self) -> None: ...


def digest_of(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_store(opts: Mapping[str, Any], origin: str) -> TokenStore:
    """The master's token store, shared with its cluster when it has one."""
    store = TokenStore(os.path.join(str(opts["cachedir"]), "tokens"))
    if opts.get("cluster_id") and opts.get("cluster_store"):
        from raetsalt.store.pgconfig import cluster_params

        params = cluster_params(opts)
        from raetsalt.store.pgtokens import ClusterTokens

        store.shared = ClusterTokens(params, str(opts["cluster_id"]), origin,
                                     forget=store.forget)
    return store


class TokenStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.shared: Shared | None = None

    def _path(self, token: str) -> Path:
        return self.root / digest_of(token)

    def create(self, name: str, backend: str, groups: tuple[str, ...] | list[str],
               now: float, lifetime: float, acl: list[Any] | None = None,
               wait: float = 0.0) -> dict[str, Any]:
        """A new token for ``name``; returns its record (with ``token``, and in a cluster
        ``shared``: whether the cluster's database took it within ``wait`` seconds)."""
        token = secrets.token_hex(32)
        record: dict[str, Any] = {"name": name, "eauth": backend, "groups": list(groups),
                                  "start": now, "expire": now + lifetime}
        if acl is not None:
            record["auth_list"] = acl
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(record, handle)
            os.replace(tmp, self._path(token))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        if self.shared is not None:
            shared = self.shared.put(digest_of(token), record, wait)
            return {"token": token, **record, "shared": shared}
        return {"token": token, **record}

    def get(self, token: Any, now: float) -> dict[str, Any] | None:
        """The record of a valid token, or None (unknown, malformed or expired)."""
        if not isinstance(token, str) or not _TOKEN.match(token):
            return None
        path = self._path(token)
        if self.shared is not None and self.shared.revoked(path.name):
            path.unlink(missing_ok=True)
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None if self.shared is None else self.shared.lookup(path.name, now)
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("expire"), int | float):
            return None
        if record["expire"] <= now:
            path.unlink(missing_ok=True)
            return None
        return record

    def fetch(self, token: Any, now: float, timeout: float = 2.0) -> dict[str, Any] | None:
        """``get``, and in a cluster, for a token this master has not heard of yet, a
        read of the cluster's database (it waits: never call it on a loop)."""
        record = self.get(token, now)
        if record is None and self.shared is not None and isinstance(token, str) \
                and _TOKEN.match(token):
            self.shared.fetch(digest_of(token), timeout)
            record = self.get(token, now)
        return record

    def remove(self, token: str, now: float | None = None, wait: float = 0.0) -> None:
        """Log out ``token``: here, and in a cluster on every master (``wait``: how long
        to wait for the cluster's database to take it; never on a loop)."""
        if not isinstance(token, str) or not _TOKEN.match(token):
            return
        when = time.time() if now is None else now
        record = self.get(token, when)
        self._path(token).unlink(missing_ok=True)
        if self.shared is not None:
            expire = float(record["expire"]) if record is not None else when + REVOKE_KEEP
            if not self.shared.revoke(digest_of(token), expire, wait) and wait > 0:
                log.warning("eauth: a logout is not in the cluster's database yet: the "
                            "other masters take the token until it is")

    def forget(self, digest: str) -> None:
        """The cluster revoked this token: its file goes."""
        if _TOKEN.match(digest):
            (self.root / digest).unlink(missing_ok=True)

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()

    def clean(self, now: float) -> int:
        """Remove expired tokens; returns how many."""
        removed = 0
        for path in self.root.iterdir():
            if path.name.startswith("."):
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                expired = record["expire"] <= now
            except (OSError, ValueError, KeyError, TypeError):
                expired = True
            if expired:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
