"""The FakeNet bottleneck (testing/fakenet.py ``Link``): serialisation at the link rate,
one-way delay, a drop-tail queue and random loss, in virtual time."""

from __future__ import annotations

import random

import pytest

from raetsalt.testing.fakenet import Bottleneck, Conditions, FakeNet, Link, RawHost

A = ("10.0.0.1", 1)
B = ("10.0.0.2", 2)


def test_datagrams_leave_one_after_the_other_at_the_rate_then_travel_the_delay() -> None:
    hop = Bottleneck(Link(rate=1000.0, delay=0.5, queue=10))
    rng = random.Random(0)
    # Three 100-byte datagrams arriving together take 0.1 s each on the wire.
    leaves = [hop.admit(0.0, 100, rng) for _ in range(3)]
    assert leaves == pytest.approx([0.6, 0.7, 0.8])
    # One arriving after the link went idle starts at once.
    assert hop.admit(5.0, 100, rng) == pytest.approx(5.6)
    assert (hop.forwarded, hop.forwarded_bytes, hop.dropped, hop.peak_queue) == (4, 400, 0, 3)


@pytest.mark.parametrize(
    "rate, delay, queue, loss",
    [(0.0, 0.0, 1, 0.0), (1.0, 0.0, 0, 0.0), (1.0, 0.0, 1, 2.0), (1.0, -1.0, 1, 0.0)],
)
def test_a_link_that_cannot_be_is_refused(
    rate: float, delay: float, queue: int, loss: float
) -> None:
    with pytest.raises(ValueError, match="not a link"):
        Link(rate, delay, queue, loss)


def test_a_full_queue_drops_arrivals_until_one_has_left() -> None:
    hop = Bottleneck(Link(rate=1000.0, queue=2))
    rng = random.Random(0)
    assert hop.admit(0.0, 100, rng) is not None
    assert hop.admit(0.0, 100, rng) is not None
    assert hop.admit(0.05, 100, rng) is None  # two held (one on the wire): full
    assert hop.admit(0.1, 100, rng) is not None  # the first left at 0.1
    assert (hop.forwarded, hop.dropped) == (3, 1)


def test_random_loss_is_counted_apart_from_queue_drops_and_replays_with_the_seed() -> None:
    def run(seed: int) -> list[float | None]:
        hop = Bottleneck(Link(rate=1e9, queue=1000, loss=0.25))
        rng = random.Random(seed)
        out = [hop.admit(n * 1.0, 100, rng) for n in range(400)]
        assert hop.dropped == 0 and 60 < hop.lost < 140
        return out

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_a_link_carries_only_the_paths_it_was_added_for() -> None:
    net = FakeNet(Conditions(latency=0.001), seed=0)
    a, b = RawHost(), RawHost()
    net.attach(A, a)
    net.attach(B, b)
    link = net.add_link(Link(rate=1000.0, delay=0.2, queue=1), sources=[A])
    a.send(b"x" * 100, B)
    a.send(b"y" * 100, B)  # finds the queue full
    b.send(b"z" * 100, A)  # the other direction is not on the link
    assert net.run_until(lambda: bool(a.received))
    assert net.now == pytest.approx(0.001)
    assert net.run_until(lambda: bool(b.received))
    assert net.now == pytest.approx(0.301)  # 0.1 s on the wire, 0.2 s delay, the latency
    net.run_until(lambda: False, timeout=5.0)
    assert [data[:1] for data, _ in b.received] == [b"x"]
    assert (link.forwarded, link.dropped) == (1, 1)
