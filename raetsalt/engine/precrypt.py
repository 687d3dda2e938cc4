"""Handshake crypto answered ahead: the answers the road takes instead of computing them
on its loop (what a datagram will make it compute: ``raetsalt.engine.prework``).

A main's loop checks the Ed25519 foot of every handshake packet and agrees a box key
(X25519) for every allow; at thousands of minions these calls are a fifth of its loop.
Each is one libsodium call that releases the GIL, so a driver with a spare core can do
them for a whole batch of datagrams at once, in threads, before it hands the batch to the
road::

    jobs = [job for data, address in batch for job in road.crypto_jobs(data, address)]
    road.take_crypto(jobs, pool.perform(jobs))    # the answers, as an input
    for data, address in batch: road.receive_datagram(data, address, now)
    road.take_crypto([], [])                      # the batch's answers are spent

``crypto_jobs`` only reads the road.  The road takes an answer only for exactly the
inputs it was computed from (key, message, signature; secret, public key), so an answer
computed from a state that changed meanwhile is never used: the road computes on its
loop whatever it was not given (counted as ``crypto_inline``; an answer used is
``crypto_ahead``).  Datagrams are received in their order as before; nothing is stored
or sent differently.  A driver without threads never calls either method and the road
computes everything itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from raetsalt.crypto import SessionBox, Verifier
from raetsalt.crypto.jobs import Agree, Answer, CryptoJob, Verify

__all__ = ["MAX_ANSWERS", "Precomputed"]

MAX_ANSWERS = 4096
"""Answers held at once (more are ignored): a batch's worth, whatever a driver gives."""


class Precomputed:
    """The answers of the batch being received, looked up by their exact inputs."""

    __slots__ = ("_answers", "_stats")

    def __init__(self, stats: Counter[str]) -> None:
        self._answers: dict[CryptoJob, Answer] = {}
        self._stats = stats

    def take(self, jobs: Sequence[CryptoJob], answers: Sequence[Answer]) -> None:
        """Hold these answers (``answers[i]`` is ``jobs[i]``'s) instead of the last ones.
        An answer of the wrong type for its job is not held."""
        held: dict[CryptoJob, Answer] = {}
        for job, answer in zip(jobs[:MAX_ANSWERS], answers, strict=False):
            if isinstance(job, Verify):
                if isinstance(answer, bool):
                    held[job] = answer
            elif answer is None or (isinstance(answer, bytes) and len(answer) == 32):
                held[job] = answer
        self._answers = held

    def __len__(self) -> int:
        return len(self._answers)

    def verify(self, verifier: Verifier, message: bytes, signature: bytes) -> bool:
        """``verifier.verify(message, signature)``, answered ahead when it was."""
        answer = self._answers.get(Verify(verifier.verify_key, message, signature))
        if answer is None:
            self._stats["crypto_inline"] += 1
            return verifier.verify(message, signature)
        self._stats["crypto_ahead"] += 1
        return answer is True

    def box(self, secret: bytes, public: bytes) -> SessionBox:
        """``SessionBox(secret, public)``, its key agreed ahead when it was (a key
        libsodium refused ahead is refused again here, with its error)."""
        agreed = self._answers.get(Agree(secret, public))
        if isinstance(agreed, bytes):
            self._stats["crypto_ahead"] += 1
            return SessionBox(secret, public, agreed=agreed)
        self._stats["crypto_inline"] += 1
        return SessionBox(secret, public)
