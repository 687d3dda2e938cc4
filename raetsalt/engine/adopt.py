"""Adoption: an allow with no join before it, between estates of one cluster.

The masters of a cluster share one long-term identity (the cluster's Ed25519 and
Curve25519 keys, ``raetsalt.daemon.clusterpki``) and one store of key decisions.  A
minion joined with one of them already holds that identity, and the others can read its
accepted key from the store, so when it moves to another master the join has nothing
left to prove: it starts with the allow handshake directly.

Wire (native profile only; raet 0.6.8 never sends or receives it):

* the initiator (``Remote.adopt``, set by ``Road.connect(..., like=uid)``) has no id of
  ours there yet, so its hello carries ``de = 0``, and in the hello's 64-byte ``plain``
  field (raet's fixed padding) its own Ed25519 verify key in hex;
* the correspondent (``Road.adopt_key`` set: a cluster master) looks that key up among
  the keys its cluster accepted (``adopt_key``: the role and Curve25519 key, or None),
  checks the hello's signature with it, and that its own records do not hold the role
  otherwise (rejected, pending, denied or other keys: refused), then makes the remote
  and answers with the cookie, which carries our new id for the initiator inside the
  box only the cluster's Curve25519 secret makes;
* the rest is the ordinary allow: the initiate's vouch proves the initiator holds the
  Curve25519 secret of the accepted key, the native marks must be on both sides, and
  the remote counts as joined only when the handshake completes (a remote an adoption
  made is forgotten if its allow fails: ``Road.on_adoption_failed``).

Refusals are counted (``adopt_<why>``) and reported as drops, never answered with more
than a header: a key the cluster accepted but this master holds otherwise (rejected,
pending, denied, other keys under the name) is told ``unjoined`` once the hello's
signature verified (the minion then joins, and its join meets the ordinary key policy);
an unknown key and a hello that does not verify get nothing.  An
initiator whose adoption did not complete (time-out, ``unjoined``, refused) joins next.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from raetsalt.crypto import Verifier
from raetsalt.drops import DropReason
from raetsalt.engine.remote import sid_valid
from raetsalt.errors import BadPacket
from raetsalt.keep.records import Acceptance
from raetsalt.wire import allow as layout
from raetsalt.wire.enums import Flag, PacketKind, TransactionKind

if TYPE_CHECKING:
    from raetsalt.engine.config import RoadConfig
    from raetsalt.engine.keybook import KeyBook
    from raetsalt.engine.precrypt import Precomputed
    from raetsalt.engine.remote import Address, Remote
    from raetsalt.wire.header import Header
    from raetsalt.wire.packet import Packet

AdoptKey = Callable[[str], "tuple[str, str] | None"]
"""verify key (hex) -> (role, Curve25519 public key hex) of a key the cluster accepted."""

_HEX = re.compile(rb"[0-9a-f]{64}\Z")


class Host(Protocol):
    """What an adoption needs of the road (``Road`` is one; the imports run one way)."""

    config: RoadConfig
    keys: KeyBook
    remotes_by_name: dict[str, Remote]
    precomputed: Precomputed
    stats: Counter[str]

    def drop(self, reason: DropReason, address: Address, detail: str) -> None: ...

    def reply_stale(self, packet: Packet, address: Address,
                    kind: PacketKind = PacketKind.NACK, *, copy_wait: bool = False) -> None: ...

    def new_remote(self, name: str, ha: Address) -> Remote: ...


def is_adoption_hello(packet: Packet) -> bool:
    """An allow hello that names no estate of ours (``de = 0``): an adoption, if any."""
    header = packet.header
    return (header.transaction_kind == TransactionKind.ALLOW
            and header.packet_kind == PacketKind.HELLO
            and header.destination_uid == 0
            and not header.flags & Flag.CF
            and bool(header.source_uid and header.session_id))


def is_adoption_refusal(header: Header) -> bool:
    """The ``unjoined`` answer to an adoption hello (its ``se`` mirrors the hello's 0)."""
    return (header.transaction_kind == TransactionKind.ALLOW
            and header.packet_kind == PacketKind.UNJOINED
            and header.source_uid == 0
            and bool(header.flags & Flag.CF))


def _refuse(road: Host, why: str, packet: Packet, address: Address, *,
            answer: bool) -> None:
    road.stats[f"adopt_{why}"] += 1
    road.drop(DropReason.REFUSED, address, f"adoption refused: {why}")
    if answer:
        road.reply_stale(packet, address, PacketKind.UNJOINED)


def adoption_remote(road: Host, adopt_key: AdoptKey, packet: Packet,
                    address: Address) -> Remote | None:
    """The remote an adoption hello authenticates (made now if new), or None (refused:
    counted, and answered as the module docstring says)."""
    if not road.config.native:
        raise BadPacket("adoption hello on a raet road", DropReason.IDS)
    plain = layout.unpack_hello_untrusted(packet.coat).plain
    if not _HEX.match(plain):
        raise BadPacket("adoption hello without a verify key", DropReason.BODY)
    verhex = plain.decode("ascii")
    found = adopt_key(verhex)
    if found is None:  # nothing proves who sent it: not answered (the initiator joins)
        _refuse(road, "unknown_key", packet, address, answer=False)
        return None
    role, pubhex = found
    if not road.precomputed.verify(Verifier(bytes.fromhex(verhex)), packet.signed_bytes(),
                                   packet.foot):
        raise BadPacket("adoption hello signature does not verify", DropReason.SIGNATURE)
    if any(pair == (verhex, pubhex) for pair in road.keys.denied.get(role, ())):
        _refuse(road, "denied_here", packet, address, answer=True)
        return None
    stored = road.keys.roles.get(role)
    if stored is None:
        decision = road.keys.decide(role, verhex, pubhex)  # recorded here (``shared``)
        accepted = decision is not None and decision.acceptance is Acceptance.ACCEPTED
    else:
        accepted = (stored.acceptance is Acceptance.ACCEPTED
                    and (stored.verhex, stored.pubhex) == (verhex, pubhex))
    if not accepted:
        _refuse(road, "not_accepted_here", packet, address, answer=True)
        return None
    remote = road.remotes_by_name.get(role)
    if remote is not None:
        if remote.role != role or (remote.verify_key.hex(), remote.long_public.hex()) != (
                verhex, pubhex):
            _refuse(road, "name_taken", packet, address, answer=True)
            return None
        if remote.allowed and not sid_valid(packet.header.session_id, remote.rsid):
            _refuse(road, "stale_session", packet, address, answer=True)
            return None
        return remote
    remote = road.new_remote(role, address)
    remote.role, remote.main, remote.kind = role, False, 0
    remote.set_keys(bytes.fromhex(verhex), bytes.fromhex(pubhex))
    remote.adopted = True
    road.stats["adopt_started"] += 1
    return remote
