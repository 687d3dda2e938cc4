"""A cold start of 10,000 minions against a busy main (engine/busy.py), on a manual clock:
the ``BUSY`` answers' retry-after hints spread the crowd over the time the main needs at
its handshake rate, so all are taken about as soon as that rate allows, never above it,
and each minion is refused a few times at most (a refusal is one small unsigned datagram).

The model keeps only what decides the pacing: the road's own ``Admission`` (token bucket,
measured pace, successive places) and joiners that come back after the hint (capped at
their ``retry_max``, plus up to 10 %), as ``busy.take_busy_untrusted`` makes them.
"""

from __future__ import annotations

import heapq
import random

import pytest

from raetsalt.engine.busy import Admission
from raetsalt.engine.config import RoadConfig

MINIONS = 10_000


def _cold_start(rate: float, *, retry_max: float = 10.0, busy_retry: float = 2.0,
                seed: int = 1) -> tuple[list[float], int]:
    """When each minion's handshake was taken, and how many were refused in all."""
    admission = Admission.for_config(RoadConfig(handshake_rate=rate, handshake_burst=rate / 2))
    rng = random.Random(seed)
    arrivals = [(rng.uniform(0.0, 1.0), index) for index in range(MINIONS)]  # all at once
    heapq.heapify(arrivals)
    taken: list[float] = []
    refused = 0
    while arrivals:
        now, index = heapq.heappop(arrivals)
        if admission.admit(now):
            taken.append(now)
            continue
        refused += 1
        hint = min(admission.retry_after(now, busy_retry / 2, retry_max), retry_max)
        heapq.heappush(arrivals, (now + hint * rng.uniform(1.0, 1.1), index))
    return taken, refused


def _most_in_a_second(times: list[float]) -> int:
    most, start = 0, 0
    for end, t in enumerate(times):
        while times[start] <= t - 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.mark.parametrize("rate", [170.0, 200.0, 500.0])
def test_a_crowd_is_taken_at_the_rate_it_can_be_taken(rate: float) -> None:
    taken, refused = _cold_start(rate)
    assert len(taken) == MINIONS
    ideal = (MINIONS - rate / 2) / rate  # the burst at once, then the rate
    assert taken[-1] <= ideal * 1.1 + 2.0, taken[-1]
    assert taken[-1] <= 60.0  # the cold-start target, from 170 handshakes a second on
    assert _most_in_a_second(taken) <= rate / 2 + rate + 1  # never above the rate
    assert refused / MINIONS <= 6.0  # a few small refusals each, not a storm
