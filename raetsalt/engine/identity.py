"""Who is who on the road: our own estate, and the identity a join body claims.

``LocalEstate`` holds our name, role, flags and long-term keys (the private ones too).
``JoinBody`` is what a join request or response says about its sender, validated by
``parse_join_body_untrusted``; names follow the keep's one rule
(``raetsalt.keep.records.name_problem``), so a name the join accepts can always be stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from raetsalt.crypto import KeyPair, Signer
from raetsalt.drops import DropReason
from raetsalt.errors import BadPacket, LocalError
from raetsalt.keep.records import LocalRecord, name_problem
from raetsalt.log import clip
from raetsalt.wire.body import decode_body_untrusted
from raetsalt.wire.enums import BodyKind

if TYPE_CHECKING:
    from raetsalt.wire.packet import Packet

_HEX64 = re.compile(r"[0-9a-fA-F]{64}\Z")


def valid_name(name: object) -> bool:
    """Estate names and roles follow the keep's one rule (``name_problem``)."""
    return name_problem(name) is None


@dataclass(frozen=True, slots=True)
class LocalEstate:
    """Our estate: name, role, main flag, kind and long-term keys."""

    name: str
    role: str
    main: bool
    kind: int
    signer: Signer
    """Ed25519: signs every packet but joins."""
    long_keys: KeyPair
    """Curve25519: the allow handshake's long-term pair."""

    def join_body(self, *, uid: int | None = None) -> dict[str, Any]:
        """Our side of a join body, in raet's key order (``uid`` in responses only)."""
        body: dict[str, Any] = {"name": self.name, "mode": 1 if self.main else 0}
        body["kind"] = self.kind
        if uid is not None:
            body["uid"] = uid
        body["verhex"] = self.signer.verify_key.hex()
        body["pubhex"] = self.long_keys.public.hex()
        body["role"] = self.role
        return body


def open_estate(
    record: LocalRecord | None,
    *,
    name: str,
    role: str,
    main: bool,
    kind: int,
    ha: tuple[str, int],
    epoch: int = 0,
) -> tuple[LocalRecord, LocalEstate]:
    """Our estate from its keep record, or a new one with fresh keys: (the record to
    save at once, estate).  ``main`` and ``kind`` come from the caller (the daemon's
    role), the rest from the record; the record's ``epoch`` becomes one more than the
    later of its own and ``epoch`` (the latest a remote's record holds): this start's
    session-id reservation (``raetsalt.engine.remote.SID_BLOCK``)."""
    if record is None:
        if not valid_name(name):
            raise LocalError(f"a new road needs a valid estate name, got {clip(name)}")
        signer, long_keys = Signer.generate(), KeyPair.generate()
        record = LocalRecord(
            name=name,
            role=role or name,
            main=main,
            kind=kind,
            sighex=signer.seed.hex(),
            prihex=long_keys.secret.hex(),
            ha=ha,
            puid=1,
        )
    elif name and name != record.name:
        raise LocalError(f"the keep belongs to estate {record.name!r}, not {name!r}")
    record = replace(record, epoch=max(record.epoch, epoch) + 1)
    estate = LocalEstate(
        name=record.name,
        role=record.role,
        main=main,
        kind=kind,
        signer=Signer(bytes.fromhex(record.sighex)),
        long_keys=KeyPair(bytes.fromhex(record.prihex)),
    )
    return record, estate


@dataclass(frozen=True, slots=True)
class JoinBody:
    """The validated contents of a join request or response body."""

    name: str
    main: bool
    kind: int
    verhex: str
    pubhex: str
    role: str
    uid: int = 0  # responses only: the correspondent's id for the initiator

    def same_keys(self, verify_key: bytes, long_public: bytes) -> bool:
        return (self.verhex, self.pubhex) == (verify_key.hex(), long_public.hex())


def parse_join_body_untrusted(packet: Packet, *, response: bool) -> JoinBody:
    body: Any = decode_body_untrusted(BodyKind(packet.header.body_kind), packet.coat)
    if not isinstance(body, dict):
        raise BadPacket("join body is not a mapping", DropReason.BODY)
    name, role = body.get("name"), body.get("role")
    mode, kind = body.get("mode"), body.get("kind")
    verhex, pubhex = body.get("verhex"), body.get("pubhex")
    if not valid_name(name) or not valid_name(role):
        raise BadPacket("join body has an invalid name or role", DropReason.BODY)
    if not _is_byte(mode) or not _is_byte(kind):
        raise BadPacket("join body has an invalid mode or kind", DropReason.BODY)
    if not (isinstance(verhex, str) and _HEX64.match(verhex)):
        raise BadPacket("join body has an invalid verhex", DropReason.BODY)
    if not (isinstance(pubhex, str) and _HEX64.match(pubhex)):
        raise BadPacket("join body has an invalid pubhex", DropReason.BODY)
    uid = 0
    if response:
        claimed = body.get("uid")
        if not isinstance(claimed, int) or isinstance(claimed, bool) or not 0 < claimed < 1 << 32:
            raise BadPacket("join response has an invalid uid", DropReason.BODY)
        uid = claimed
    return JoinBody(
        name=name,  # type: ignore[arg-type]
        main=bool(mode & 1),  # type: ignore[operator]
        kind=kind,  # type: ignore[arg-type]
        verhex=verhex.lower(),
        pubhex=pubhex.lower(),
        role=role,  # type: ignore[arg-type]
        uid=uid,
    )


def _is_byte(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255
