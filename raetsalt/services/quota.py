"""Per-minion quotas on what an accepted minion makes the master do, sans-IO.

An accepted minion is authenticated, not trusted: one of them sending 60 KB returns as
fast as the road took them grew the master by a gigabyte and stalled the job cache.
``MinionQuota`` answers two questions, with ``now`` passed in:

* ``admit_message(minion, now)``: may this road message (a return or a request: hello,
  peer publish, Salt file/pillar request, clock) be served?  A token bucket per minion:
  ``minion_message_rate`` a second, bursts of ``minion_message_burst``.
* ``admit_return(minion, size, held, backlog, now)``: may a return of ``size`` bytes (its
  JSON text) go to the job cache, while ``held`` bytes of this minion's returns and
  ``backlog`` bytes in all are accepted but not on disk yet?  Refused beyond
  ``minion_backlog_max`` / ``job_cache_backlog_max``, and beyond a byte rate per minion
  (``minion_return_rate`` bytes a second, bursts of ``minion_return_burst``).

A refusal is the reason (a short text for the log), else None.  What is refused is
dropped before anything is kept for it, so memory stays bounded whatever minions send;
the caller counts and logs (rate-limited).  At most ``MAX_MINIONS`` buckets are kept
(the least recently used go first: a forgotten minion starts with a full bucket).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MiB = 1 << 20
MAX_MINIONS = 200_000


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    message_rate: float = 200.0
    message_burst: float = 2000.0
    return_rate: float = 8.0 * MiB
    return_burst: float = 64.0 * MiB
    minion_backlog: int = 64 * MiB
    total_backlog: int = 256 * MiB

    @classmethod
    def from_opts(cls, opts: Mapping[str, Any]) -> QuotaConfig:
        base = cls()
        return cls(
            message_rate=float(opts.get("minion_message_rate", base.message_rate)),
            message_burst=float(opts.get("minion_message_burst", base.message_burst)),
            return_rate=float(opts.get("minion_return_rate", base.return_rate)),
            return_burst=float(opts.get("minion_return_burst", base.return_burst)),
            minion_backlog=int(opts.get("minion_backlog_max", base.minion_backlog)),
            total_backlog=int(opts.get("job_cache_backlog_max", base.total_backlog)),
        )


class Buckets:
    """Token buckets by key: ``rate`` tokens a second up to ``burst``."""

    def __init__(self, rate: float, burst: float, max_keys: int = MAX_MINIONS) -> None:
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._state: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str, cost: float, now: float) -> bool:
        """Take ``cost`` tokens from ``key``'s bucket if it holds them."""
        state = self._state.pop(key, None)
        if state is None:
            tokens = self.burst
        else:
            tokens = min(self.burst, state[0] + max(0.0, now - state[1]) * self.rate)
        admitted = tokens >= cost
        if admitted:
            tokens -= cost
        self._state[key] = (tokens, now)  # most recently used last
        if len(self._state) > self.max_keys:
            del self._state[next(iter(self._state))]
        return admitted


class MinionQuota:
    """The quotas of one master (module docstring)."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self._messages = Buckets(config.message_rate, config.message_burst)
        self._returns = Buckets(config.return_rate, config.return_burst)

    def admit_message(self, minion: str, now: float) -> str | None:
        if self._messages.take(minion, 1.0, now):
            return None
        return (f"more than {self.config.message_rate:g} messages a second "
                f"(minion_message_rate)")

    def admit_return(self, minion: str, size: int, held: int, backlog: int, now: float
                     ) -> str | None:
        config = self.config
        if held + size > config.minion_backlog:
            return (f"{(held + size) / MiB:.1f} MiB of its returns would wait for the disk "
                    f"(minion_backlog_max {config.minion_backlog / MiB:g} MiB)")
        if backlog + size > config.total_backlog:
            return (f"the job cache writer is {backlog / MiB:.1f} MiB behind "
                    f"(job_cache_backlog_max {config.total_backlog / MiB:g} MiB)")
        if not self._returns.take(minion, float(size), now):
            return (f"more than {config.return_rate / MiB:g} MiB of returns a second "
                    f"(minion_return_rate)")
        return None
