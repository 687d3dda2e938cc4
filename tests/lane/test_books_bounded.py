"""Unfinished books on the lane: what yards can make a lane hold in unfinished books is bounded.

Hostile yards open books (multi-page messages) and never finish them: the bytes held
stay under the per-yard and lane-wide caps (measured with tracemalloc too), every refusal
is counted, books expire, and messages from other yards (and later ones from the same
yard) still arrive.
"""

from __future__ import annotations

import random
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.lane.engine import PAGE_OVERHEAD, Lane, YardMessage
from raetsalt.lane.page import PackKind, PageDropReason, encode_body, paginate

DIR = "/run/x"
MiB = 1024 * 1024


def path(yard: str) -> str:
    return f"{DIR}/ln.{yard}.uxd"


def pages(source: str, body: dict[str, object], book_id: int, session: str = "s1") -> list[bytes]:
    return paginate(
        encode_body(body),
        pack_kind=PackKind.MSGPACK,
        source=source,
        destination="beta",
        session_id=session,
        book_id=book_id,
    )


def received(lane: Lane) -> list[YardMessage]:
    out = []
    while (event := lane.next_event()) is not None:
        if isinstance(event, YardMessage):
            out.append(event)
    return out


def test_unfinished_books_from_many_yards_stay_under_the_caps() -> None:
    lane = Lane(
        lane_name="ln",
        yard_name="beta",
        max_message_size=MiB,
        max_book_bytes_per_yard=2 * MiB,
        max_book_bytes=3 * MiB,
        book_timeout=5.0,
    )
    # Ten yards each open four books of almost 1 MiB and never send their last page.
    attack = []
    for n in range(10):
        for book in range(1, 5):
            body = {"blob": random.Random(n * 10 + book).randbytes(1000 * 1000)}
            attack.extend((data, path(f"evil{n}")) for data in pages(f"evil{n}", body, book)[:-1])

    def flood() -> None:
        for data, source in attack:
            lane.receive_datagram(data, source, 0.0)

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        flood()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert lane.book_bytes <= 3 * MiB
    assert grown < 3 * MiB + 512 * 1024, f"the flood made the lane hold {grown} bytes"
    assert lane.stats[PageDropReason.YARD_BOOKS_FULL] >= 10
    assert lane.stats[PageDropReason.LANE_BOOKS_FULL] >= 1
    # Another yard's message still arrives whole, even a paginated one.
    body = {"blob": "g" * 200_000}
    for data in pages("good", body, 1):
        lane.receive_datagram(data, path("good"), 1.0)
    assert [e.body for e in received(lane)] == [body]
    # The unfinished books expire; the memory is given back.
    lane.handle_timer(5.0)
    assert lane.stats[PageDropReason.BOOK_EXPIRED] >= 1
    assert lane.book_bytes == 0
    assert lane.get_timer() is None


def test_a_page_over_the_yard_cap_ends_its_book_at_once() -> None:
    lane = Lane(lane_name="ln", yard_name="beta", max_book_bytes_per_yard=300_000)
    first = pages("alpha", {"blob": "a" * 200_000}, 1)
    second = pages("alpha", {"blob": "b" * 200_000}, 2)
    for data in first[:-1] + second[:-1]:
        lane.receive_datagram(data, path("alpha"), 0.0)
    assert lane.stats[PageDropReason.YARD_BOOKS_FULL] == 1
    held = lane.book_bytes
    assert held <= 300_000
    lane.receive_datagram(first[-1], path("alpha"), 0.0)
    assert [len(e.body["blob"]) for e in received(lane)] == [200_000]
    assert lane.book_bytes < held
    # The rest of the refused book is refused too (its book is gone), then expires.
    lane.receive_datagram(second[-1], path("alpha"), 0.0)
    assert not received(lane)


def test_a_restarted_sender_and_a_reaped_yard_give_their_books_back() -> None:
    lane = Lane(lane_name="ln", yard_name="beta")
    lane.receive_datagram(pages("alpha", {"blob": "c" * 100_000}, 1)[0], path("alpha"), 0.0)
    assert lane.book_bytes > 0
    lane.receive_datagram(pages("alpha", {"n": 1}, 2, session="s2")[0], path("alpha"), 0.0)
    assert lane.book_bytes == 0
    lane.receive_datagram(pages("alpha", {"blob": "c" * 100_000}, 3, session="s2")[0],
                          path("alpha"), 0.0)
    assert lane.book_bytes > 0
    lane.remove_yard("alpha")
    assert lane.book_bytes == 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 150_000), min_size=1, max_size=4),
    seed=st.integers(0, 2**32),
    cap=st.integers(1000, 400_000),
)
def test_pages_in_any_order_with_duplicates(sizes: list[int], seed: int, cap: int) -> None:
    """Whatever the order, duplicates and caps: a book is delivered whole and at most
    once, or not at all; the lane never holds more than its cap; nothing but counted
    drops comes of the rest."""
    rng = random.Random(seed)
    lane = Lane(lane_name="ln", yard_name="beta", max_book_bytes_per_yard=cap,
                max_book_bytes=cap)
    bodies = {book: {"b": rng.randbytes(size)} for book, size in enumerate(sizes, start=1)}
    datagrams = [d for book, body in bodies.items() for d in pages("alpha", body, book)]
    datagrams += rng.sample(datagrams, len(datagrams) // 3)
    rng.shuffle(datagrams)
    got = []
    for data in datagrams:
        lane.receive_datagram(data, path("alpha"), 0.0)
        assert lane.book_bytes <= cap
        got.extend(e.body for e in received(lane))
    for body in got:
        assert body in bodies.values()
    assert len(got) == len({id(b) for b in got})
    fits = [b for b in bodies.values() if len(encode_body(b)) + 4 * PAGE_OVERHEAD < cap // 2]
    if len(sizes) == 1 and fits:
        assert got == fits  # alone, a book that fits comfortably always completes
