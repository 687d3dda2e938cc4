"""Limits on what unauthenticated input can make a road do.

* **Anti-amplification.**  Joins are unsigned and a source address can be spoofed, so an
  address no session has validated (``trusted``) may be sent at most ``factor`` bytes per
  byte received from it (QUIC's rule, RFC 9000 section 8).  Addresses become trusted when
  we choose them (``Road.connect``) or an allow from there completes; everything the
  road sends elsewhere is paid from that address's credit, and what the credit does not
  cover is not sent (counted).
* **New ids per source address.**  A token bucket per source address bounds the joins
  of ids never seen before (``burst``, then ``rate`` per second), so one sender cannot
  fill the keep with pending keys by itself (a legitimate minion needs one; many minions
  behind one NAT have their own ports).  What many spoofed addresses can add is bounded
  by the pending-key limit (``KeyBook``).
* **Departed remotes.**  When an operator deletes (or rejects) a key, the road forgets
  the remote but remembers its verify key for a while: authenticated packets it still
  sends are answered ``unjoined``, so it joins again at once (Salt's re-auth).

Every table is bounded (``MAX_ENTRIES``, oldest forgotten first).
"""

from __future__ import annotations

from typing import TypeVar

from raetsalt.crypto import Verifier
from raetsalt.engine.remote import Address

K = TypeVar("K")
V = TypeVar("V")

MAX_ENTRIES = 4096
CREDIT_CAP = 1 << 18
"""Most bytes one unvalidated address can have in hand (a join and an allow need ~3 KB)."""


def _bounded_put(table: dict[K, V], key: K, value: V) -> None:
    """Insert ``key`` as the newest entry, forgetting the oldest beyond ``MAX_ENTRIES``."""
    table.pop(key, None)
    if len(table) >= MAX_ENTRIES:
        del table[next(iter(table))]
    table[key] = value


class Guard:
    """The tables behind the limits (module docstring)."""

    def __init__(self, *, factor: int, burst: int, rate: float) -> None:
        self.factor = factor
        self.burst = float(burst)
        self.rate = rate
        self.trusted: dict[Address, int] = {}
        """Validated addresses (how many remotes live there)."""
        self._credit: dict[Address, int] = {}
        self._buckets: dict[Address, tuple[float, float]] = {}
        self._departed: dict[int, tuple[Verifier, float]] = {}

    # -- anti-amplification ---------------------------------------------------------------

    def trust(self, address: Address) -> None:
        self.trusted[address] = self.trusted.get(address, 0) + 1
        self._credit.pop(address, None)

    def untrust(self, address: Address) -> None:
        count = self.trusted.get(address, 0) - 1
        if count > 0:
            self.trusted[address] = count
        else:
            self.trusted.pop(address, None)

    def received(self, address: Address, size: int) -> None:
        """``size`` bytes arrived from an address that is not trusted."""
        credit = self._credit.get(address, 0)
        _bounded_put(self._credit, address, min(CREDIT_CAP, credit + self.factor * size))

    def grant(self, address: Address, size: int) -> None:
        """Let ``size`` bytes go to ``address`` before it sent anything (a restarted
        main's one call to an address a session validated before: ``Recall``)."""
        if address not in self.trusted:
            credit = self._credit.get(address, 0)
            _bounded_put(self._credit, address, min(CREDIT_CAP, max(credit, size)))

    def spend(self, address: Address, size: int) -> bool:
        """May ``size`` bytes go to ``address``?  Pays for them if so."""
        if address in self.trusted:
            return True
        credit = self._credit.get(address, 0)
        if credit < size:
            return False
        self._credit[address] = credit - size
        return True

    # -- new ids --------------------------------------------------------------------------

    def admit_new_id(self, address: Address, now: float) -> bool:
        """One join of a new id from ``address``: within its budget?"""
        tokens, at = self._buckets.get(address, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        admitted = tokens >= 1.0
        _bounded_put(self._buckets, address, (tokens - 1.0 if admitted else tokens, now))
        return admitted

    # -- departed remotes ---------------------------------------------------------------

    def depart(self, uid: int, verifier: Verifier, until: float) -> None:
        _bounded_put(self._departed, uid, (verifier, until))

    def departed(self, uid: int, now: float) -> Verifier | None:
        """The verify key of a remote that departed with ``uid``, while remembered."""
        entry = self._departed.get(uid)
        if entry is None:
            return None
        verifier, until = entry
        if now > until:
            del self._departed[uid]
            return None
        return verifier
