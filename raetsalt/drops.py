"""Why the road drops a received datagram: one enum for wire, crypto and engine.

Every ``BadPacket`` raised while the road handles a datagram carries one of these as its
``trigger``; the engine counts it as ``drop_<value>`` in ``Road.stats`` and reports it in
a ``PacketDropped`` event.  Values are stable (counters and tests name them).  Other
layers have their own reasons (lane pages: ``raetsalt.lane.page.PageDropReason``).
"""

from __future__ import annotations

from enum import StrEnum


class DropReason(StrEnum):
    """Stable reasons for dropping a datagram (or a message found inside one)."""

    MALFORMED = "malformed"  # not a datagram of ours at all (e.g. a truncated native one)
    HEADER = "header"  # a raet head the wire parser refused
    LENGTH = "length"  # too large, or ``pl``/``hl`` disagree with the bytes
    FOOT = "foot"  # the foot does not fit its kind
    BROADCAST = "broadcast"
    UNSIGNED = "unsigned"  # a non-join packet without an Ed25519 foot
    SIGNATURE = "signature"  # the foot does not verify with the remote's key
    IDS = "ids"  # zero or inconsistent estate / session ids
    UNKNOWN_REMOTE = "unknown_remote"
    WRONG_ADDRESS = "wrong_address"  # a join reply from an address we did not join
    STALE = "stale"  # no transaction for it and it cannot start one
    DECRYPT = "decrypt"  # a box did not open
    BODY = "body"  # a body failed validation after decoding
    ROUTE = "bad_route"  # a message body without a usable route
    SIZE = "size"  # a frame over its size limit (command socket)
    NOT_MAIN = "not_main"  # a vacuous join sent to a stack that is not main
    REPLAY = "replay"  # an already delivered message
    REKEY_RATE = "rekey_rate"  # a native key offer sooner than the minimum gap
    OPTIMISTIC_ACK = "optimistic_ack"  # a native ack of a packet number never sent
    OVERLOAD = "overload"  # a limit on concurrent state was reached
    REFUSED = "refused"  # join state of the remote forbids it (rejected, name taken)
    # Bounded reassembly (engine/reassembly.py): a frame or segment not held, or a
    # stalled partial message discarded.
    REASSEMBLY_LIMIT = "reassembly_limit"  # it would exceed a reassembly cap
    REASSEMBLY_TIMEOUT = "reassembly_timeout"  # no progress within the time-out
    PENDING_LIMIT = "pending_limit"  # a new id while max_pending keys wait for an operator
    RATE_LIMIT = "rate_limit"  # too many new ids from one source address
    UNREADABLE_KEY = "unreadable_key"  # the keep's record of this role is corrupt
    FOREIGN_SOURCE = "foreign_source"  # not from an address an outbound-only estate dialed
    NOT_PEER = "not_peer"  # from an address the road does not admit (cluster_peers)
