"""Pure data of the keep: records, enums, the ``Keep`` protocol and small pure helpers.

Nothing here touches the file system or the clock; ``raetsalt.keep.store`` holds the two
implementations (``FileKeep``, ``MemoryKeep``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from raetsalt.errors import KeepError, LocalError

__all__ = [
    "Acceptance",
    "AutoMode",
    "LocalRecord",
    "RemoteRecord",
    "RoleRecord",
    "Keep",
    "KeepState",
    "KeepWrite",
    "KeyRef",
    "KeyState",
    "MAX_NAME_LENGTH",
    "validate_name",
    "name_problem",
    "fingerprint",
    "normalize_fingerprint",
]


# (str, Enum) rather than StrEnum: the contract fixes it, and str() of a member stays
# "Acceptance.ACCEPTED" for logs while ``.value`` is what is stored.
class Acceptance(str, Enum):  # noqa: UP042
    """Acceptance state of a role's keys (salt-key's accepted / unaccepted / rejected)."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class AutoMode(str, Enum):  # noqa: UP042
    """How keys of a role seen for the first time are treated.

    NEVER pends them for an operator; ONCE and ALWAYS accept them.  Unlike raet, ALWAYS never
    overrides a stored decision (see ``raetsalt.keep.store``), so ONCE and ALWAYS behave the
    same; ALWAYS is kept so raet/salt configurations (``open_mode``) still parse.
    """

    NEVER = "never"
    ONCE = "once"
    ALWAYS = "always"


@dataclass
class LocalRecord:
    """Our own estate, including its PRIVATE keys (``sighex`` Ed25519 seed, ``prihex``
    Curve25519 secret, both hex).  ``puid`` is the next uid to hand out to a new remote."""

    name: str
    role: str
    main: bool
    kind: int
    sighex: str
    prihex: str
    ha: tuple[str, int]
    puid: int
    epoch: int = 0


@dataclass
class RemoteRecord:
    """A remote estate as seen from here: ``uid`` is our id for it (raet ``nuid``), ``fuid``
    its id for us, ``sid`` our session id towards it, reserved in our start ``epoch``.
    Keys live in its role's record."""

    name: str
    role: str
    uid: int
    fuid: int
    ha: tuple[str, int]
    sid: int
    main: bool
    kind: int
    joined: bool
    epoch: int = 0
    signs_joins: bool = False
    """The remote is a raetsalt estate (an authenticated allow showed it): its join
    packets to us must be signed with its key (``raetsalt.engine.join``)."""


@dataclass
class RoleRecord:
    """Long-term public keys of a role and their acceptance; all estates sharing a role
    share this one record (raet semantics)."""

    role: str
    acceptance: Acceptance
    verhex: str
    pubhex: str


class KeyState(str, Enum):  # noqa: UP042 - same reason as Acceptance
    """The four states salt-key shows: a role's record, or one of its denied pairs."""

    ACCEPTED = "accepted"
    PENDING = "pending"
    REJECTED = "rejected"
    DENIED = "denied"

    @classmethod
    def of(cls, acceptance: Acceptance) -> KeyState:
        return cls(acceptance.value)


@dataclass(frozen=True, slots=True)
class KeyRef:
    """One stored key as an operator saw it listed: an operator action applies only if
    the key is still stored exactly so (same state and keys)."""

    role: str
    state: KeyState
    verhex: str
    pubhex: str


DeniedPairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class KeepWrite:
    """One document to write (``value``) or remove (``value`` None) in a keep.

    ``kind`` is ``local``, ``remote``, ``role`` or ``denied``; ``key`` the name, role or
    ``estate`` (the local record).  An empty denied list removes the document.
    """

    kind: str
    key: str
    value: LocalRecord | RemoteRecord | RoleRecord | DeniedPairs | None

    @classmethod
    def local(cls, record: LocalRecord) -> KeepWrite:
        return cls("local", "estate", record)

    @classmethod
    def remote(cls, record: RemoteRecord) -> KeepWrite:
        return cls("remote", record.name, record)

    @classmethod
    def remove_remote(cls, name: str) -> KeepWrite:
        return cls("remote", name, None)

    @classmethod
    def role(cls, record: RoleRecord) -> KeepWrite:
        return cls("role", record.role, record)

    @classmethod
    def remove_role(cls, role: str) -> KeepWrite:
        return cls("role", role, None)

    @classmethod
    def denied(cls, role: str, pairs: DeniedPairs) -> KeepWrite:
        return cls("denied", role, pairs or None)


@dataclass
class KeepState:
    """Everything a keep holds, read once when a road starts.

    A document that cannot be read does not stop the others: it is named in
    ``problems``; a role whose record is unreadable is listed in ``broken`` (role ->
    problem) so that its joins are refused until an operator fixes or deletes the file,
    rather than taken for a first sight.
    """

    local: LocalRecord | None = None
    remotes: list[RemoteRecord] = field(default_factory=list)
    roles: list[RoleRecord] = field(default_factory=list)
    denied: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@runtime_checkable
class Keep(Protocol):
    """What the engine needs from persistence.  Implementations: ``FileKeep``, ``MemoryKeep``.

    Loaders return ``None`` (or empty collections) when nothing is stored and raise
    ``KeepError`` when stored data is corrupt.  Removers are idempotent.  Names and roles
    must pass :func:`validate_name`, otherwise ``KeepError``.
    """

    def load_local(self) -> LocalRecord | None: ...

    def save_local(self, record: LocalRecord) -> None: ...

    def load_remotes(self) -> list[RemoteRecord]: ...

    def save_remote(self, record: RemoteRecord) -> None: ...

    def remove_remote(self, name: str) -> None: ...

    def load_role(self, role: str) -> RoleRecord | None: ...

    def save_role(self, record: RoleRecord) -> None: ...

    def remove_role(self, role: str) -> None: ...

    def list_roles(self) -> list[RoleRecord]: ...

    def status_role(self, role: str, verhex: str, pubhex: str, auto: AutoMode) -> Acceptance:
        """Decide (and persist) the acceptance of ``role`` presenting these keys."""
        ...

    def list_denied(self) -> dict[str, list[tuple[str, str]]]:
        """role -> [(verhex, pubhex)] of key pairs refused because they differ from the
        stored keys of an accepted or pending role (oldest first)."""
        ...

    def remove_denied(self, role: str) -> None: ...

    def load_state(self) -> KeepState:
        """Everything at once, for a road's start; tolerant of unreadable documents."""
        ...

    def commit(self, writes: list[KeepWrite]) -> None:
        """Apply ``writes`` in order (the last write of a document wins), atomically per
        document, durably as one group."""
        ...


# Names and roles become file names in FileKeep, so the same rule applies everywhere (the
# MemoryKeep enforces it too, so engine tests catch names a real keep would refuse).  The
# alphabet covers host names, FQDNs and salt ids such as ``web1_minion``; 200 leaves room for
# the ".json" suffix and temp-file decorations under the usual 255-byte file name limit while
# still admitting any DNS name (253).
MAX_NAME_LENGTH = 200
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+=~-]*")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be an estate name or role, or None if it can.

    The one rule for names, shared by the join parser (a name from the network) and the
    keep (a name that becomes a file name): 1..200 characters from
    ``A-Z a-z 0-9 _ . @ + = ~ -``, not starting with ``.``, ``-``, ``@``, ``+``, ``=`` or
    ``~``, and never containing ``..``.  The text never echoes a long name in full.
    """
    if not isinstance(name, str):
        return "not a string"
    if not name:
        return "empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"longer than {MAX_NAME_LENGTH}"
    if ".." in name:
        return "contains '..'"
    if not _NAME_RE.fullmatch(name):
        return (
            "only letters, digits and _.@+=~- are allowed (first character a letter, digit"
            " or _)"
        )
    return None


def validate_name(name: object, what: str = "name") -> str:
    """Return ``name`` if :func:`name_problem` finds nothing, else raise KeepError."""
    problem = name_problem(name)
    if problem is None:
        return name  # type: ignore[return-value]  # name_problem checked it is a str
    shown = repr(name[:40]) + "..." if isinstance(name, str) and len(name) > 40 else repr(name)
    raise KeepError(f"invalid {what} {shown}: {problem}")


_HASH_TYPES = frozenset({"sha256", "sha512", "sha384", "sha224", "sha1", "md5", "blake2b"})


def fingerprint(hexkey: str, hash_type: str = "sha256") -> str:
    """Fingerprint of one hex-encoded NaCl key, in salt-key's format.

    Salt's ``salt-key -f`` shows a hash (``hash_type``, default sha256) of the DER key as
    colon-separated lowercase hex pairs.  RAET keys have no DER form, so we hash the raw key
    bytes (the 32 bytes behind ``verhex`` or ``pubhex``) instead.  RAET-era salt hashed a
    ``"pub: ...\\nverify: ..."`` text blob (and crashed on Python 3);
    a per-key fingerprint lets an operator compare it with what the minion prints for its
    own public key.  Raises LocalError for a non-hex key or an unknown hash type.
    """
    if hash_type not in _HASH_TYPES:
        raise LocalError(f"unknown hash type {hash_type!r}")
    try:
        raw = bytes.fromhex(hexkey)
    except (TypeError, ValueError) as exc:
        raise LocalError(f"key is not hex: {hexkey!r}") from exc
    import hashlib  # on first use: OpenSSL's load is a listing's start-up cost

    digest = hashlib.new(hash_type, raw).hexdigest()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def normalize_fingerprint(text: str) -> str:
    """Canonical form of a user-typed fingerprint: lowercase, colon-separated pairs.

    Accepts the colons or not, and either case, so ``AB:cd`` and ``abcd`` are equal.
    """
    bare = text.strip().replace(":", "").lower()
    return ":".join(bare[i : i + 2] for i in range(0, len(bare), 2))
