"""Slowing down password guessing on external_auth logins (sans-IO: ``now`` comes in).

Every login is counted against two keys: the eauth **user name** and the **calling
uid** (the local user whose socket asked), or, for a login relayed by a trusted local
service on behalf of a remote client (``raetsalt-api``: its yard is in the master's
sock_dir), that **client** (``http:<address>``) instead of the service's uid, so that one
guesser cannot lock every user of the service out.  For each key:

* a failure is answered only ``eauth_fail_delay`` seconds after the attempt began, and
  every further failure in a row doubles that (up to ``eauth_fail_delay_max``); the
  answer time does not depend on how long the check took, so a wrong password, an
  unknown user and a broken hash all answer at the same moment;
* while one attempt of a key is being checked or its failure is being held back, other
  attempts of that key are refused at once without a check ("busy"), so opening more
  connections does not buy more guesses;
* after ``eauth_lockout_after`` failures in a row the key is locked for
  ``eauth_lockout_time`` seconds: every attempt is refused at once without a check
  (the right password too, which is what makes the lockout worth anything);
* a key forgets its failures ``eauth_lockout_time`` seconds after the last one; a
  success clears the failures of the user name, never those of the uid (a guesser who
  knows one password must not reset the count of the uid they guess from).

A user name that cannot be real (empty, over ``MAX_USERNAME`` characters, control
characters) and an over-long password are refused by the caller without a backend
check (a 1 MiB password against a SHA-512-crypt hash would hold a worker thread for
minutes); they still count as failures of the uid.

Records are bounded (``max_records``); the oldest records that hold no lockout and no
attempt in flight are forgotten first.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

MAX_USERNAME = 128
MAX_PASSWORD = 1024
"""Longest user name and password (characters) the master checks."""


@dataclass(frozen=True, slots=True)
class LoginPolicy:
    """The master's ``eauth_<field>`` options."""

    fail_delay: float = 1.0
    fail_delay_max: float = 16.0
    lockout_after: int = 5
    lockout_time: float = 600.0

    def delay(self, failures: int) -> float:
        """How long the answer to the ``failures``-th failure in a row is held back."""
        if failures <= 0 or self.fail_delay <= 0:
            return 0.0
        return min(self.fail_delay * 2.0 ** min(failures - 1, 60), self.fail_delay_max)


@dataclass(slots=True)
class _Record:
    failures: int = 0
    last_failure: float = -math.inf
    in_flight: bool = False
    not_before: float = -math.inf
    """No attempt of this key is checked before this time (its last failure's answer)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an attempt is refused without a check: ``locked`` (until ``until``) or
    ``busy`` (another attempt of the same user or uid is under way)."""

    why: str
    key: Hashable
    until: float = 0.0


Keys = tuple[Hashable, ...]


MAX_CLIENT = 128
"""Longest client name (characters) a relaying service may give."""


def login_keys(username: str | None, uid: int | None, client: str | None = None) -> Keys:
    """The keys one attempt counts against (``username`` None: only the uid, or the
    relayed ``client`` in its place)."""
    keys: list[Hashable] = [("uid", uid) if client is None else ("client", client[:MAX_CLIENT])]
    if username is not None:
        keys.insert(0, ("user", username))
    return tuple(keys)


def plausible_username(name: str) -> bool:
    return 0 < len(name) <= MAX_USERNAME and name.isprintable() and name.strip() == name


class LoginLimiter:
    """The failure counts of every key (see the module docstring)."""

    def __init__(self, policy: LoginPolicy | None = None, max_records: int = 10_000) -> None:
        self.policy = policy or LoginPolicy()
        self.max_records = max_records
        self._records: dict[Hashable, _Record] = {}

    def admit(self, keys: Keys, now: float) -> Refusal | None:
        """May an attempt counted against ``keys`` be checked now?  None: yes (the keys
        are then in flight until ``finish``); else why not."""
        records = [(key, self._record(key, now)) for key in keys]
        for key, record in records:
            if record.failures >= self.policy.lockout_after > 0:
                return Refusal("locked", key, record.last_failure + self.policy.lockout_time)
        for key, record in records:
            if record.in_flight or now < record.not_before:
                return Refusal("busy", key, max(record.not_before, now))
        for _key, record in records:
            record.in_flight = True
        self._trim()
        return None

    def finish(self, keys: Keys, ok: bool, started: float, now: float) -> float:
        """Record the outcome of an admitted attempt that began at ``started``; returns
        when its answer may go out (``now`` for a success)."""
        records = [self._records.setdefault(key, _Record()) for key in keys]
        for record in records:
            record.in_flight = False
        if ok:
            user = [r for key, r in zip(keys, records, strict=True) if _is_user(key)]
            for record in user:
                record.failures, record.last_failure = 0, -math.inf
            return now
        for record in records:
            record.failures += 1
            record.last_failure = now
        answer_at = max(now, started + self.policy.delay(max(r.failures for r in records)))
        for record in records:
            record.not_before = answer_at
        return answer_at

    def cancel(self, keys: Keys) -> None:
        """An admitted attempt that was never checked (no outcome to count)."""
        for key in keys:
            record = self._records.get(key)
            if record is not None:
                record.in_flight = False

    def failures(self, key: Hashable) -> int:
        record = self._records.get(key)
        return 0 if record is None else record.failures

    def __len__(self) -> int:
        return len(self._records)

    def _record(self, key: Hashable, now: float) -> _Record:
        record = self._records.pop(key, None) or _Record()
        if record.failures and now - record.last_failure >= self.policy.lockout_time:
            record.failures, record.last_failure = 0, -math.inf
        self._records[key] = record  # most recently used last
        return record

    def _trim(self) -> None:
        if len(self._records) <= self.max_records:
            return
        for key in list(self._records):
            record = self._records[key]
            if not record.in_flight and record.failures < self.policy.lockout_after:
                del self._records[key]
                if len(self._records) <= self.max_records:
                    return


def _is_user(key: Hashable) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == "user"
