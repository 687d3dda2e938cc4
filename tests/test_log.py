"""raetsalt.log: clipping untrusted values and throttling repeated log lines."""

from __future__ import annotations

from raetsalt.log import Throttle, clip


def test_clip_keeps_short_values_and_cuts_long_ones() -> None:
    assert clip("cmd.run") == "'cmd.run'"
    assert clip("fred", bare=True) == "fred"
    assert clip("a\nb", bare=True) == "'a\\nb'"  # never a raw control character
    long = clip("x" * 10_000)
    assert long.endswith("... (10000 characters)") and len(long) < 120
    assert len(clip({"k": "v" * 10_000, "l": list(range(10_000))})) < 200
    assert len(clip(b"\0" * 100_000)) < 400
    assert clip(5) == "5" and clip(None) == "None"


def test_throttle_logs_a_burst_then_a_summary_per_interval() -> None:
    throttle = Throttle(10.0, burst=2)
    seen = [throttle.note("k", t) for t in (0, 1, 2, 3, 4, 10, 11, 25)]
    assert seen == [1, 1, 0, 0, 0, 4, 1, 1]
    assert throttle.note("other", 4) == 1  # keys are independent


def test_throttle_remembers_a_bounded_number_of_keys() -> None:
    throttle = Throttle(60.0, max_keys=10)
    for i in range(1000):
        assert throttle.note(i, 0.0) == 1
    assert len(throttle._seen) == 10
