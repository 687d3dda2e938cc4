"""eauth tokens kept on the master (``raetsalt -a EAUTH -T``).

A token is 32 random bytes in hex.  The master stores one JSON file per token under
``<cachedir>/tokens`` (directory 0700, files 0600), named by the SHA-256 of the token so
a listing of the directory does not reveal usable tokens.  A record holds the eauth user,
the backend, the groups, when it was made and when it expires (``token_expire``
seconds later; wall-clock time), and with ``keep_acl_in_token`` the user's rules as
they were at login.  An expired token is removed when it is next presented.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Any

_TOKEN = re.compile(r"[0-9a-f]{64}\Z")


class TokenStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)

    def _path(self, token: str) -> Path:
        return self.root / hashlib.sha256(token.encode()).hexdigest()

    def create(self, name: str, backend: str, groups: tuple[str, ...] | list[str],
               now: float, lifetime: float, acl: list[Any] | None = None) -> dict[str, Any]:
        """A new token for ``name``; returns its record (with ``token``)."""
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
        return {"token": token, **record}

    def get(self, token: Any, now: float) -> dict[str, Any] | None:
        """The record of a valid token, or None (unknown, malformed or expired)."""
        if not isinstance(token, str) or not _TOKEN.match(token):
            return None
        path = self._path(token)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or not isinstance(record.get("expire"), int | float):
            return None
        if record["expire"] <= now:
            path.unlink(missing_ok=True)
            return None
        return record

    def remove(self, token: str) -> None:
        if isinstance(token, str) and _TOKEN.match(token):
            self._path(token).unlink(missing_ok=True)

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
