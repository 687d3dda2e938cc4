"""Address migration of a native session, after path validation (RFC 9000 8.2 and 9).

A remote's address changes when a NAT rebinds or a minion gets a new IP.  When a native
datagram that opens under the session key (so it is the remote's, not a forgery) and is
the newest the remote sent (the highest counter, so not one replayed or delayed from an
old path) arrives from another address, the channel sends a challenge there, inside the
session (``PATH_CHALLENGE`` and ``PATH_RESPONSE`` frames, ``native/frames.py``).

The remote answers every challenge it receives with the token, to the address it sends
to.  Only an answer with the token, in a datagram that opens under the session key and
comes *from the challenged address*, moves the session there (``RoadPort.on_path_validated``,
which makes that address the remote's validated one, as a completed allow does).  Until
then the session keeps sending to the validated address; the data that came from the new
one is taken as usual (it is authenticated), so nothing waits on the validation but
where replies go.

What an attacker can do with it: an unauthenticated datagram never reaches this module
(it does not open); a genuine datagram replayed or re-addressed by someone on the path
makes us send at most ``CHALLENGES`` small challenges to the address it came from, paid
from the road's anti-amplification budget (three times what came from there), and
nothing moves unless the remote itself answers from there.  One validation runs at a
time; a newer datagram from yet another address replaces it.

After a move to another host (not only another port, as NAT rebinding does) the
congestion controller and round-trip estimate start over: the new path is not the old
one (RFC 9000 9.4).
"""

from __future__ import annotations

from raetsalt.crypto import random_bytes
from raetsalt.engine.native.frames import PATH_CHALLENGE_FRAME, PATH_FRAME, PATH_RESPONSE_FRAME
from raetsalt.engine.remote import Address

CHALLENGES = 4
"""Challenges sent to one address before the validation is given up."""
MIN_GAP = 0.25
"""Seconds between challenges at least (else two probe time-outs): a validation lasts a
second at least, as RFC 9000 8.2.4 asks (a busy host answers late, and one that gives up
too soon leaves a moved remote unreachable until it joins again)."""


class PathValidation:
    """One address being validated: the token sent there and when to send it again."""

    __slots__ = ("address", "token", "sent", "next_at")

    def __init__(self, address: Address) -> None:
        self.address = address
        self.token = random_bytes(8)
        self.sent = 0
        self.next_at = 0.0

    def challenge(self, now: float, pto: float) -> bytes | None:
        """The PATH_CHALLENGE frame to send now, or None (not yet, or given up)."""
        if self.sent >= CHALLENGES or now < self.next_at:
            return None
        self.sent += 1
        self.next_at = now + max(2 * pto, MIN_GAP)
        return PATH_FRAME.pack(PATH_CHALLENGE_FRAME, self.token)

    def get_timer(self) -> float | None:
        """When to send the next challenge, or give up (``expired``)."""
        return self.next_at

    def expired(self, now: float) -> bool:
        return self.sent >= CHALLENGES and now >= self.next_at

    def answered(self, token: bytes, source: Address) -> bool:
        return source == self.address and token == self.token


def response(token: bytes) -> bytes:
    """The PATH_RESPONSE frame answering a challenge with ``token``."""
    return PATH_FRAME.pack(PATH_RESPONSE_FRAME, token)
