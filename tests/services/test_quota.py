"""Per-minion quotas (``raetsalt.services.quota``), on a manual clock."""

from __future__ import annotations

from raetsalt.services.quota import Buckets, MiB, MinionQuota, QuotaConfig


def test_a_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = Buckets(rate=10.0, burst=5.0)
    assert [bucket.take("m", 1.0, 0.0) for _ in range(6)] == [True] * 5 + [False]
    assert bucket.take("m", 1.0, 0.1) and not bucket.take("m", 1.0, 0.1)
    assert [bucket.take("m", 1.0, 100.0) for _ in range(6)] == [True] * 5 + [False]
    assert bucket.take("other", 1.0, 0.1)  # one bucket per minion


def test_buckets_forget_the_least_recently_used_minion_first() -> None:
    bucket = Buckets(rate=1.0, burst=1.0, max_keys=2)
    assert bucket.take("a", 1.0, 0.0) and bucket.take("b", 1.0, 0.0)
    assert bucket.take("c", 1.0, 0.0)  # "a" is forgotten: it starts full again
    assert bucket.take("a", 1.0, 0.0) and not bucket.take("c", 1.0, 0.0)


def test_messages_over_the_rate_are_refused_with_the_config_key() -> None:
    quota = MinionQuota(QuotaConfig(message_rate=2.0, message_burst=3.0))
    answers = [quota.admit_message("m", 0.0) for _ in range(4)]
    assert answers[:3] == [None] * 3 and "minion_message_rate" in str(answers[3])
    assert quota.admit_message("m", 0.5) is None


def test_returns_are_bounded_by_backlog_and_byte_rate() -> None:
    quota = MinionQuota(QuotaConfig(return_rate=1 * MiB, return_burst=4 * MiB,
                                    minion_backlog=2 * MiB, total_backlog=3 * MiB))
    assert quota.admit_return("m", MiB, 0, 0, 0.0) is None
    assert "minion_backlog_max" in str(quota.admit_return("m", MiB, 2 * MiB - 1, 0, 0.0))
    assert "job_cache_backlog_max" in str(quota.admit_return("m", MiB, 0, 3 * MiB, 0.0))
    quota = MinionQuota(QuotaConfig(return_rate=1 * MiB, return_burst=4 * MiB))
    assert quota.admit_return("m", MiB, 0, 0, 0.0) is None
    assert "minion_return_rate" in str(quota.admit_return("m", 4 * MiB, 0, 0, 0.0))
    assert quota.admit_return("m", 3 * MiB, 0, 0, 0.0) is None  # 3 MiB of 4 left
    assert quota.admit_return("m", MiB, 0, 0, 0.0) is not None
    assert quota.admit_return("m", MiB, 0, 0, 1.0) is None  # a second later: 1 MiB more
