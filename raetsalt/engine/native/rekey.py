"""Rotating a native session's key inside the session, without pausing it.

The allow handshake gives a native channel its first key (epoch 0): the box of the two
ends' short-term keys.  After ``RoadConfig.native_rekey_interval`` seconds, or once
``RoadConfig.native_rekey_packets`` datagrams were sealed under it, either end starts a
rotation, a fresh Diffie-Hellman exchange carried in frames inside the session
(layouts in ``native/frames.py``): ``KEY_OFFER`` and ``KEY_ACCEPT`` carry an epoch and
the sender's fresh public key, ``KEY_CONFIRM`` an epoch ("I seal with this epoch's key;
answer under it").

1. The offerer makes a fresh key pair and sends KEY_OFFER (again every probe time-out
   until the answer comes; it keeps sending under the current key meanwhile).
2. The accepter makes its own fresh pair, computes the next key from its secret and the
   offer, forgets its secret at once and answers KEY_ACCEPT (again for every repeated
   offer: the answer is kept, its secret is not).  It keeps sending under the current
   key and holds the next one for receiving.
3. The offerer computes the next key, forgets its secret and switches at once: every
   datagram it seals from then on (retransmissions too) uses the next key, and it sends
   KEY_CONFIRM (again every probe time-out until a datagram of the other end opens under
   the new key), so the switch completes on an idle session too.
4. The accepter switches as soon as a datagram opens under the next key, and answers a
   KEY_CONFIRM of its epoch with a datagram without frames (sealed under the new key).

A receiver tries the current key first and the other one it holds (the previous, or
the next) if that fails, so datagrams sealed before a switch and arriving after it
(reordered, in flight) still open: nothing is lost, duplicated or held up by a
rotation (packet counters, acknowledgements and streams do not change with the key).
The previous key is dropped three probe time-outs after the other end was seen using
the new one (RFC 9001's rule for QUIC key updates), so both ends hold at most two keys.

When both ends offer the same epoch at once, the offer of the allow handshake's
initiator wins; the other end drops its own offer (and its secret) and accepts.

**Limits.**  Key frames are small datagrams a path can single out: an attacker who drops
only them would keep the session on its first key forever.  So a key is refused for
sealing and opening once it is ``RoadConfig.native_reject_after`` seconds old or sealed
``native_reject_packets`` datagrams (``expired``; at least 1.5 times the rotation's own
limits): the channel then ends the session and the road handshakes a new one
(WireGuard's REJECT_AFTER_TIME and REJECT_AFTER_MESSAGES).  The other way round, a peer
may not make us rotate as often as it likes (each rotation costs a key pair and a
Diffie-Hellman): an offer of the next epoch is taken only once the current key is
``native_rekey_min_gap`` seconds old (at most half the rotation interval) or sealed half
of ``native_rekey_packets``; a sooner one is a counted drop (``rekey_rate``), not
answered (the peer offers again, and is answered once the gap has passed).

**Forward secrecy.**  Every epoch's key comes from two key pairs made for it and
forgotten once it is computed, and keys are not derived from one another: a key stolen
from a running process opens only the traffic of its own epoch (and of the previous
one while it is still held, at most three probe time-outs); earlier epochs stay closed
once their keys are dropped, and later ones close again after the next rotation, as
an attacker who only listens cannot compute them (WireGuard's property).  Long-term
keys sign and vouch in the allow handshake only, so stealing them opens no session.
Dropping a key means forgetting every reference to it; Python cannot promise that the
memory is overwritten before it is reused (the libsodium buffers hold it until then).
"""

from __future__ import annotations

from raetsalt.crypto import KeyPair, SessionBox
from raetsalt.drops import DropReason
from raetsalt.engine.native.frames import (
    CONFIRM_FRAME,
    KEY_ACCEPT_FRAME,
    KEY_CONFIRM_FRAME,
    KEY_FRAME,
    KEY_OFFER_FRAME,
)
from raetsalt.errors import BadPacket, LocalError

RETIRE_PTOS = 3
"""Probe time-outs after the other end's switch for which the previous key is kept."""
MIN_OFFER_GAP = 0.05
"""Seconds between repeated offers at least."""


class KeyRing:
    """The keys of one native channel: ``box`` (current, for sealing), and at most one
    other for opening (``previous`` after a switch, or ``next`` before the accepter's)."""

    __slots__ = (
        "box",
        "epoch",
        "installed_at",
        "sealed",
        "interval",
        "packets",
        "initiator",
        "previous",
        "retire_at",
        "next",
        "answer",
        "_offer",
        "offer_at",
        "rotations",
        "reject_after",
        "reject_packets",
        "min_gap",
    )

    def __init__(
        self,
        box: SessionBox,
        now: float,
        *,
        interval: float,
        packets: int,
        initiator: bool,
        reject_after: float = float("inf"),
        reject_packets: int = 1 << 62,
        min_gap: float = 0.0,
    ) -> None:
        self.box = box
        self.epoch = 0
        self.installed_at = now
        self.sealed = 0
        """Datagrams sealed under ``box`` (the channel counts them)."""
        self.interval = interval
        self.packets = packets
        self.initiator = initiator
        self.previous: SessionBox | None = None
        self.retire_at: float | None = None
        """When ``previous`` is dropped (None: the other end has not switched yet)."""
        self.next: SessionBox | None = None
        self.answer = b""
        """Our KEY_ACCEPT for ``epoch + 1`` while we wait for the other end to switch."""
        self._offer: KeyPair | None = None
        self.offer_at = 0.0
        self.rotations = 0
        self.reject_after = max(reject_after, 1.5 * interval)
        """Seconds after which the current key is refused (``expired``)."""
        self.reject_packets = max(reject_packets, packets + packets // 2)
        self.min_gap = min(min_gap, interval / 2)
        """Seconds the current key is used at least before a peer's offer is taken."""

    # -- when ---------------------------------------------------------------------------

    def due(self, now: float) -> bool:
        """Time to offer the next key (not while a rotation is under way)."""
        if self._offer is not None or self.next is not None or self.previous is not None:
            return False
        # (as get_timer names the instant: ``now - installed_at`` may round below it)
        return now >= self.installed_at + self.interval or self.sealed >= self.packets

    def expired(self, now: float) -> bool:
        """No rotation completed in time: the current key must not be used any more."""
        return now >= self.installed_at + self.reject_after or self.sealed >= self.reject_packets

    def get_timer(self, pto: float) -> float | None:
        """When ``on_timer`` has something to do: repeat an offer, drop the previous key,
        or start the next rotation."""
        if self._offer is not None:
            return self.offer_at + max(pto, MIN_OFFER_GAP)
        if self.previous is not None:
            if self.retire_at is None:  # the other end has not switched yet: confirm
                return self.offer_at + max(pto, MIN_OFFER_GAP)
            return self.retire_at
        if self.next is not None:  # the offerer's turn; the key expires if it never comes
            return self.installed_at + self.reject_after
        return self.installed_at + self.interval

    def on_timer(self, now: float, pto: float) -> bytes | None:
        """A frame to send now, if any: an offer (new or repeated) or a confirmation."""
        if self.previous is not None:
            if self.retire_at is None:
                if now >= self.offer_at + max(pto, MIN_OFFER_GAP):
                    self.offer_at = now
                    return CONFIRM_FRAME.pack(KEY_CONFIRM_FRAME, self.epoch)
                return None
            if now >= self.retire_at:
                self.previous = self.retire_at = None  # the previous key is dropped
        if self._offer is not None:
            if now >= self.offer_at + max(pto, MIN_OFFER_GAP):
                self.offer_at = now
                return KEY_FRAME.pack(KEY_OFFER_FRAME, self.epoch + 1, self._offer.public)
            return None
        if self.due(now):
            self._offer = KeyPair.generate()
            self.offer_at = now
            return KEY_FRAME.pack(KEY_OFFER_FRAME, self.epoch + 1, self._offer.public)
        return None

    # -- frames -------------------------------------------------------------------------

    def on_offer(self, epoch: int, public: bytes, now: float) -> bytes | None:
        """The other end offers ``epoch``: our KEY_ACCEPT, or None (not answered).
        Raises ``BadPacket`` (``rekey_rate``) for an offer sooner than ``min_gap``."""
        if epoch != self.epoch + 1:
            if epoch <= self.epoch:
                return None  # a repeated offer of an epoch we already switched to
            raise BadPacket("key offer skips an epoch", DropReason.BODY)
        if self.next is not None:
            return self.answer  # repeated: the same answer (the other end missed it)
        if now - self.installed_at < self.min_gap and self.sealed < self.packets // 2:
            raise BadPacket("key offer sooner than the minimum gap", DropReason.REKEY_RATE)
        if self._offer is not None:
            if self.initiator:
                return None  # both offered: ours wins, the other end will accept it
            self._offer = None  # theirs wins: our secret is dropped unused
        ours = KeyPair.generate()
        self.next = _box(ours.secret, public)
        self.previous = self.retire_at = None  # at most two keys: the epoch before goes
        # Our secret goes out of scope here: only the key computed from it remains.
        self.answer = KEY_FRAME.pack(KEY_ACCEPT_FRAME, epoch, ours.public)
        return self.answer

    def on_accept(self, epoch: int, public: bytes, now: float) -> bool:
        """The answer to our offer: switch to the next key.  False if it answers no
        offer of ours (late or repeated)."""
        offer = self._offer
        if offer is None or epoch != self.epoch + 1:
            return False
        self._switch(_box(offer.secret, public), now)
        self._offer = None
        self.offer_at = -MIN_OFFER_GAP  # KEY_CONFIRM at the next timer, at once
        return True

    def on_confirm(self, epoch: int) -> bool:
        """The other end seals with ``epoch``: answer (under our key) if that is ours."""
        return epoch == self.epoch and self.next is None

    # -- opening ------------------------------------------------------------------------

    def other(self) -> SessionBox | None:
        """The key tried when ``box`` does not open a datagram."""
        return self.next if self.next is not None else self.previous

    def opened_with_other(self, now: float, pto: float) -> None:
        """A datagram opened with ``other()``: if that is the next key, the other end
        switched, so we do too."""
        if self.next is not None:
            self._switch(self.next, now)
            self.next = None
            self.answer = b""
            self.retire_at = now + RETIRE_PTOS * pto

    def opened_with_current(self, now: float, pto: float) -> None:
        """A datagram opened with ``box``: after our switch, the other end's first one
        under the new key starts the previous key's last time-outs."""
        if self.previous is not None and self.retire_at is None:
            self.retire_at = now + RETIRE_PTOS * pto

    def _switch(self, box: SessionBox, now: float) -> None:
        self.previous, self.box = self.box, box
        self.retire_at = None
        self.epoch += 1
        self.installed_at = now
        self.sealed = 0
        self.rotations += 1


def _box(secret: bytes, public: bytes) -> SessionBox:
    try:
        return SessionBox(secret, public)
    except LocalError as exc:  # a low-order public key: libsodium refuses it
        raise BadPacket(f"unusable key in a key frame: {exc}", DropReason.BODY) from None
