"""The crypto threads (drivers/cryptopool.py): a batch's answers are the ones the caller
would compute, in order, whatever the jobs hold; and a main whose stack has them brings
a crowd of minions to sessions over loopback with its handshake crypto done ahead."""

from __future__ import annotations

import selectors
import time
from pathlib import Path

import pytest

from raetsalt.crypto import KeyPair, Signer
from raetsalt.crypto.jobs import Agree, CryptoJob, Verify, perform
from raetsalt.drivers.cryptopool import MIN_BATCH, CryptoPool
from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed, Event
from raetsalt.keep.records import AutoMode


def _jobs() -> list[CryptoJob]:
    signer, pair, other = Signer.generate(), KeyPair.generate(), KeyPair.generate()
    good = signer.sign(b"hello")
    return [
        Verify(signer.verify_key, b"hello", good),
        Verify(signer.verify_key, b"hullo", good),  # another message
        Verify(signer.verify_key, b"hello", good[:10]),  # a short signature
        Verify(b"\x00" * 5, b"hello", good),  # a short key
        Agree(pair.secret, other.public),
        Agree(pair.secret, b"\x00" * 32),  # low order: refused
        Agree(pair.secret, b"\x01" * 3),  # wrong size
    ] * 6


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_a_batch_is_answered_as_the_caller_would_answer_it(threads: int) -> None:
    jobs = _jobs()
    pool = CryptoPool(threads)
    try:
        expected = [perform(job) for job in jobs]
        answers = pool.perform(jobs)
        # A job a thread was still doing when the caller ran out of jobs is unanswered.
        unanswered = [i for i, (a, e) in enumerate(zip(answers, expected, strict=True))
                      if a != e]
        assert len(unanswered) <= threads
        assert all(answers[i] is None for i in unanswered)
        assert pool.batches == (1 if threads else 0)
        assert pool.perform(jobs[: MIN_BATCH - 1]) == [perform(j) for j in jobs[: MIN_BATCH - 1]]
        assert pool.batches == (1 if threads else 0)  # a small batch: the caller alone
        assert pool.perform([]) == []
    finally:
        pool.close()
        pool.close()
    answers = [perform(job) for job in _jobs()[:7]]
    assert [type(a) for a in answers] == [bool, bool, bool, bool, bytes, type(None), type(None)]
    assert answers[:4] == [True, False, False, False]


def test_thread_counts_are_bounded() -> None:
    with pytest.raises(ValueError, match="crypto threads"):
        CryptoPool(17)
    with pytest.raises(ValueError, match="crypto threads"):
        CryptoPool(-1)


@pytest.mark.integration
def test_a_main_with_crypto_threads_brings_a_crowd_to_sessions(tmp_path: Path) -> None:
    main = RoadStack(tmp_path / "main", ("127.0.0.1", 0), name="main", main=True,
                     auto=AutoMode.ONCE, crypto_threads=1)
    minions = [RoadStack(tmp_path / f"m{n}", ("127.0.0.1", 0), name=f"m{n}",
                         auto=AutoMode.ONCE) for n in range(16)]
    stacks = [*minions, main]  # the main served last: the crowd's packets wait together
    for stack in stacks:
        stack.open()
    selector = selectors.DefaultSelector()
    events: dict[RoadStack, list[Event]] = {s: [] for s in stacks}
    try:
        for stack in stacks:
            stack.register(selector, stack)
        for minion in minions:
            minion.connect(main.address)
        deadline = time.monotonic() + 60.0  # the test's own limit, not a measurement
        while not all(any(isinstance(e, Allowed) for e in events[m]) for m in minions):
            assert time.monotonic() < deadline, "the crowd did not come up"
            waits = [w for s in stacks if (w := s.timeout()) is not None]
            selector.select(min([1.0, *waits]))
            for stack in stacks:
                events[stack].extend(stack.service_ready())
        stats = main.road.stats
        assert stats["crypto_ahead"] + stats["crypto_inline"] >= 2 * len(minions)
        assert main.stats["crypto_batches"] >= 1 and stats["crypto_ahead"] > 0
        assert main.stats["engine_error"] == 0
    finally:
        for stack in stacks:
            stack.unregister(selector)
            stack.close()
        selector.close()
