"""eauth tokens shared by the masters of a cluster (pure: rows and notifications).

A token is stored under the SHA-256 of its text, exactly as the file store names its
files (``raetsalt.auth.tokens``): the database (its backups, its other users, the
dashboards reading it) never holds a usable token, and a 256-bit random token needs no
salt or slow hash for that (there is no dictionary to try).  A row holds the hash, the
token's record as JSON text (user, backend, groups, start, expiry, the rules with
``keep_acl_in_token``), its expiry (wall-clock seconds) and whether it was revoked
(logged out).  A revocation is a row too, kept until the token would have expired, so a
master that was away learns of it when it is back.

Every value read from the database is checked here like any other input: a row or
notification that is not what a master writes gives None (the caller counts it).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

HASH = re.compile(r"[0-9a-f]{64}\Z")
MAX_RECORD = 64 * 1024
"""Characters of a token's record read at most (a longer one is not even fetched)."""
MAX_PAYLOAD = 1000
"""Characters of a notification read at most (a master writes about 150)."""
MAX_GROUPS = 1000
MAX_NAME = 255
OPS = ("put", "revoke")


@dataclass(frozen=True, slots=True)
class SharedToken:
    """A token of the cluster: its hash, record (None: revoked) and expiry."""

    digest: str
    record: dict[str, Any] | None
    expire: float


def record_text(record: dict[str, Any]) -> str:
    """The record as stored (the token itself is never part of it)."""
    return json.dumps({k: v for k, v in record.items() if k != "token"},
                      separators=(",", ":"), default=str)


def parse_record(text: Any) -> dict[str, Any] | None:
    """A stored record, or None if it is not one a master writes."""
    if not isinstance(text, str) or len(text) > MAX_RECORD:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    name, backend, groups = record.get("name"), record.get("eauth"), record.get("groups", [])
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        return None
    if not isinstance(backend, str) or not 0 < len(backend) <= MAX_NAME:
        return None
    if not isinstance(groups, list) or len(groups) > MAX_GROUPS \
            or not all(isinstance(g, str) and len(g) <= MAX_NAME for g in groups):
        return None
    for when in ("start", "expire"):
        value = record.get(when)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            return None
    if "auth_list" in record and not isinstance(record["auth_list"], list):
        return None
    return record


def from_row(digest: Any, text: Any, expire: Any, revoked: Any) -> SharedToken | None:
    """A stored row (``text`` is None when the row's record was too long to fetch)."""
    if not isinstance(digest, str) or not HASH.match(digest):
        return None
    if isinstance(expire, bool) or not isinstance(expire, int | float) \
            or not math.isfinite(expire):
        return None
    if revoked is True:
        return SharedToken(digest, None, float(expire))
    if revoked is not False:
        return None
    record = parse_record(text)
    if record is None or float(record["expire"]) != float(expire):
        return None
    return SharedToken(digest, record, float(expire))


def to_payload(cluster_id: str, op: str, digest: str) -> str:
    return json.dumps({"cluster": cluster_id, "op": op, "hash": digest},
                      separators=(",", ":"))


def from_payload(cluster_id: str, text: Any) -> tuple[str, str] | None | bool:
    """A notification: ``(op, hash)`` for this cluster, False for another cluster's
    (well formed), None for anything malformed."""
    if not isinstance(text, str) or len(text) > MAX_PAYLOAD:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("cluster"), str):
        return None
    if data["cluster"] != cluster_id:
        return False if len(data["cluster"]) <= MAX_NAME else None
    op, digest = data.get("op"), data.get("hash")
    if op not in OPS or not isinstance(digest, str) or not HASH.match(digest):
        return None
    return op, digest
