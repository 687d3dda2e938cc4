"""Persistence of estates, roles and key acceptance (raet's "keep").

The engine sees only the :class:`Keep` protocol; daemons use :class:`FileKeep`, engine tests
:class:`MemoryKeep`.  The on-disk layout and the acceptance policy are documented in
:mod:`raetsalt.keep.store`.
"""

from __future__ import annotations

from raetsalt.keep.records import (
    MAX_NAME_LENGTH,
    Acceptance,
    AutoMode,
    Keep,
    LocalRecord,
    RemoteRecord,
    RoleRecord,
    fingerprint,
    normalize_fingerprint,
    validate_name,
)
from raetsalt.keep.store import FORMAT_VERSION, MAX_DENIED_PER_ROLE, FileKeep, MemoryKeep

__all__ = [
    "Acceptance",
    "AutoMode",
    "FileKeep",
    "FORMAT_VERSION",
    "Keep",
    "LocalRecord",
    "MAX_DENIED_PER_ROLE",
    "MAX_NAME_LENGTH",
    "MemoryKeep",
    "RemoteRecord",
    "RoleRecord",
    "fingerprint",
    "normalize_fingerprint",
    "validate_name",
]
