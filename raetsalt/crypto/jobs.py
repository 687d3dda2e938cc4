"""Crypto work described as values, so that it can be done away from the one that needs it.

A road checks a signature and agrees a box key for every handshake packet; each is one
libsodium call, which releases the GIL.  ``Verify`` and ``Agree`` name such a call by its
exact inputs and ``perform`` does it: a driver can run a batch of them on other threads
before it hands the batch's datagrams to the road, and the road takes an answer only for
exactly the inputs it was computed from (``raetsalt.engine.precrypt``).
"""

from __future__ import annotations

from typing import NamedTuple

import nacl.bindings as _sodium
import nacl.exceptions

from raetsalt.crypto.keys import verify_detached

__all__ = ["Agree", "CryptoJob", "Verify", "agree", "perform", "verify_detached"]


class Verify(NamedTuple):
    """Is ``signature`` the Ed25519 signature of ``message`` by ``key``?"""

    key: bytes
    message: bytes
    signature: bytes


class Agree(NamedTuple):
    """The precomputed crypto_box key of ``secret`` (ours) and ``public`` (theirs)."""

    secret: bytes
    public: bytes


CryptoJob = Verify | Agree
Answer = bool | bytes | None
"""A ``Verify``'s answer is a bool; an ``Agree``'s the key, or None for an unusable key."""


def agree(secret: bytes, public: bytes) -> bytes | None:
    """X25519 of the two keys, precomputed for crypto_box; None when libsodium refuses
    them (a key of the wrong size, a low-order public key)."""
    try:
        key: bytes = _sodium.crypto_box_beforenm(public, secret)
    except (nacl.exceptions.CryptoError, TypeError, ValueError):
        return None
    return key


def perform(job: CryptoJob) -> Answer:
    """Do ``job`` (one libsodium call; other Python threads run meanwhile)."""
    if isinstance(job, Verify):
        return verify_detached(job.key, job.message, job.signature)
    return agree(job.secret, job.public)
