"""Persistence of estates, roles and key acceptance (raet's "keep").

The engine never touches a keep: a driver reads it once (``Keep.load_state``) and writes
the engine's changes (``Keep.commit``).  Daemons and the key tool use :class:`FileKeep`,
engine tests :class:`MemoryKeep`.  The on-disk layout is documented in
:mod:`raetsalt.keep.store`, the acceptance policy (pure) in :mod:`raetsalt.keep.policy`.
"""

from __future__ import annotations

from raetsalt.keep.policy import MAX_DENIED_PER_ROLE, Action, KeyPolicy, operator_change
from raetsalt.keep.records import (
    MAX_NAME_LENGTH,
    Acceptance,
    AutoMode,
    Keep,
    KeepState,
    KeepWrite,
    KeyRef,
    KeyState,
    LocalRecord,
    RemoteRecord,
    RoleRecord,
    fingerprint,
    name_problem,
    normalize_fingerprint,
    validate_name,
)
from raetsalt.keep.store import FORMAT_VERSION, FileKeep, MemoryKeep

__all__ = [
    "Acceptance",
    "Action",
    "AutoMode",
    "FileKeep",
    "FORMAT_VERSION",
    "Keep",
    "KeepState",
    "KeepWrite",
    "KeyPolicy",
    "KeyRef",
    "KeyState",
    "LocalRecord",
    "MAX_DENIED_PER_ROLE",
    "MAX_NAME_LENGTH",
    "MemoryKeep",
    "RemoteRecord",
    "RoleRecord",
    "fingerprint",
    "name_problem",
    "normalize_fingerprint",
    "operator_change",
    "validate_name",
]
