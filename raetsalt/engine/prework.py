"""What a datagram will make the road compute: its handshake crypto, as jobs a driver can
do before the road receives it (``raetsalt.engine.precrypt`` holds the answers)."""

from __future__ import annotations

from collections.abc import Mapping

from raetsalt.crypto import SessionBox
from raetsalt.crypto.jobs import Agree, CryptoJob, Verify
from raetsalt.engine.allow import AllowCorrespondent, AllowInitiator
from raetsalt.engine.busy import Admission
from raetsalt.engine.identity import LocalEstate
from raetsalt.engine.native.frames import is_native
from raetsalt.engine.remote import Address, Remote
from raetsalt.errors import BadPacket
from raetsalt.wire import allow as layout
from raetsalt.wire.enums import Flag, FootKind, PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted

__all__ = ["jobs_for"]


def jobs_for(
    data: bytes,
    address: Address,
    *,
    remotes: Mapping[int, Remote],
    local: LocalEstate,
    long_boxes: Mapping[bytes, SessionBox],
    admission: Admission,
    max_size: int,
) -> list[CryptoJob]:
    """The signature checks and key agreements receiving ``data`` would do on the road's
    loop as it is now (what ``Road._dispatch`` and the allow correspondent compute);
    nothing for what is not a signed handshake packet of a known remote.  Reads only."""
    if is_native(data):
        return []
    try:
        packet = parse_packet_untrusted(data, max_size=max_size)
    except BadPacket:
        return []
    header = packet.header
    kind = header.transaction_kind
    if kind not in (TransactionKind.ALLOW, TransactionKind.ALIVE) or (
        header.foot_kind != FootKind.NACL
    ):
        # A join request is unsigned; messages go on native channels once allowed.
        return []
    remote = remotes.get(header.destination_uid)
    if remote is None or remote.verifier is None:
        return []
    if (header.packet_kind == PacketKind.HELLO and not header.flags & Flag.CF
            and admission.loaded and address not in admission.reserved):
        # The road will answer it "busy" before any key work: none is done ahead
        # either (a flood of hellos must not cost more crypto than it did).
        return []
    jobs: list[CryptoJob] = [Verify(remote.verify_key, packet.signed_bytes(), packet.foot)]
    if kind != TransactionKind.ALLOW:
        return jobs
    secret = local.long_keys.secret
    ours = bool(header.flags & Flag.CF)
    txn = remote.transactions.get((ours, header.session_id, header.transaction_id))
    try:
        if ours:
            if header.packet_kind == PacketKind.COOKIE and isinstance(txn, AllowInitiator):
                if remote.long_public and remote.long_public not in long_boxes:
                    jobs.append(Agree(secret, remote.long_public))  # for the vouch
                jobs.append(Agree(txn.short.secret, txn.open_cookie(packet).short_public))
        elif header.packet_kind == PacketKind.HELLO:
            jobs.append(Agree(secret, layout.unpack_hello_untrusted(packet.coat).short_public))
        elif header.packet_kind == PacketKind.INITIATE:
            if remote.long_public and remote.long_public not in long_boxes:
                jobs.append(Agree(secret, remote.long_public))
            if isinstance(txn, AllowCorrespondent) and txn.their_short:
                jobs.append(Agree(txn.short.secret, txn.their_short))
    except BadPacket:
        pass
    return jobs
