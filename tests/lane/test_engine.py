"""Sans-IO lane engine: identity checks (raet Q9), reassembly limits, back-off, reaping."""

from __future__ import annotations

from raetsalt.lane.engine import Lane, PageDropped, YardMessage, YardReaped, names_from_path
from raetsalt.lane.page import PackKind, PageDropReason, encode_body, paginate

DIR = "/run/x"


def path(yard: str, lane: str = "ln") -> str:
    return f"{DIR}/{lane}.{yard}.uxd"


def pair(**kwargs: object) -> tuple[Lane, Lane]:
    a = Lane(lane_name="ln", yard_name="alpha", **kwargs)  # type: ignore[arg-type]
    b = Lane(lane_name="ln", yard_name="beta", **kwargs)  # type: ignore[arg-type]
    a.add_yard("beta", path("beta"))
    return a, b


def transfer(src: Lane, src_path: str, dst: Lane, now: float = 0.0) -> list[object]:
    for data, _ in src.datagrams_to_send(now):
        dst.receive_datagram(data, src_path, now)
    events = []
    while (event := dst.next_event()) is not None:
        events.append(event)
    return events


def drained(lane: Lane) -> list[object]:
    out = []
    while (event := lane.next_event()) is not None:
        out.append(event)
    return out


def page_from(sn: str, dn: str = "beta", body: dict | None = None, bi: int = 1) -> bytes:
    [page] = paginate(encode_body(body or {"k": 1}), pack_kind=PackKind.MSGPACK, source=sn,
                      destination=dn, session_id="s1", book_id=bi)
    return page


def test_names_from_path() -> None:
    assert names_from_path("/a/b/minion-1.ev12.uxd") == ("minion-1", "ev12")
    assert names_from_path("/a/b/nodot.uxd") is None
    assert names_from_path("/a/b/x.y.sock") is None


def test_message_round_trip_and_learning() -> None:
    a, b = pair()
    assert a.send({"hello": "world"}, "beta")
    [event] = transfer(a, path("alpha"), b)
    expected = YardMessage(body={"hello": "world"}, source="alpha", source_path=path("alpha"))
    assert event == expected
    assert b.has_yard("alpha")


def test_large_message_is_reassembled() -> None:
    a, b = pair()
    body = {"blob": "x" * 300_000}
    a.send(body, "beta")
    datagrams = a.datagrams_to_send(0.0)
    assert len(datagrams) == 5
    for data, _ in datagrams:
        b.receive_datagram(data, path("alpha"), 0.0)
    [event] = drained(b)
    assert isinstance(event, YardMessage) and event.body == body


def test_out_of_order_pages_and_duplicates() -> None:
    a, b = pair()
    a.send({"blob": "y" * 200_000}, "beta")
    pages = [d for d, _ in a.datagrams_to_send(0.0)]
    for data in [pages[2], pages[0], pages[0], pages[3], pages[1]]:
        b.receive_datagram(data, path("alpha"), 0.0)
    events = drained(b)
    triggers = [e.trigger for e in events if isinstance(e, PageDropped)]
    assert triggers == [PageDropReason.DUPLICATE_PAGE]
    assert [e.body["blob"][:1] for e in events if isinstance(e, YardMessage)] == ["y"]


def test_unbound_sender_is_dropped() -> None:
    _, b = pair()
    b.receive_datagram(page_from("alpha"), None, 0.0)
    b.receive_datagram(page_from("alpha"), "", 0.0)
    assert b.stats[PageDropReason.UNBOUND_SENDER] == 2
    assert not any(isinstance(e, YardMessage) for e in drained(b))


def test_sender_claiming_another_name_is_dropped() -> None:
    _, b = pair()
    b.receive_datagram(page_from("alpha"), path("alpha"), 0.0)
    # A second process bound as "mallory" claims to be alpha (raet Q9 raised KeyError here).
    b.receive_datagram(page_from("alpha"), path("mallory"), 0.0)
    # Same name, other directory: alpha is already known elsewhere.
    b.receive_datagram(page_from("alpha"), "/elsewhere/ln.alpha.uxd", 0.0)
    # Claims the receiver's own name.
    b.receive_datagram(page_from("beta"), path("beta"), 0.0)
    # Right name, wrong lane.
    b.receive_datagram(page_from("gamma"), path("gamma", lane="other"), 0.0)
    triggers = [e.trigger for e in drained(b) if isinstance(e, PageDropped)]
    assert triggers == [PageDropReason.SPOOFED_SOURCE, PageDropReason.NAME_CONFLICT,
                        PageDropReason.SPOOFED_SOURCE, PageDropReason.WRONG_LANE]


def test_wrong_destination_is_dropped_not_delivered() -> None:
    _, b = pair()
    b.receive_datagram(page_from("alpha", dn="gamma"), path("alpha"), 0.0)
    assert [type(e) for e in drained(b)] == [PageDropped]
    assert b.stats[PageDropReason.WRONG_DESTINATION] == 1


def test_accept_off_hears_only_known_yards() -> None:
    b = Lane(lane_name="ln", yard_name="beta", accept=False)
    b.add_yard("alpha", path("alpha"))
    b.receive_datagram(page_from("alpha"), path("alpha"), 0.0)
    b.receive_datagram(page_from("gamma"), path("gamma"), 0.0)
    assert [type(e) for e in drained(b)] == [YardMessage, PageDropped]
    assert b.stats[PageDropReason.UNACCEPTED] == 1


def test_books_are_bounded_and_expire() -> None:
    a, b = pair(max_books_per_yard=2, book_timeout=1.0)
    for _ in range(3):
        a.send({"blob": "z" * 100_000}, "beta")
    firsts = [d for d, _ in a.datagrams_to_send(0.0) if b"pn 0000" in d]
    for data in firsts:
        b.receive_datagram(data, path("alpha"), 0.5)
    assert b.stats[PageDropReason.TOO_MANY_BOOKS] == 1
    assert b.get_timer() == 1.5
    b.handle_timer(1.5)
    assert b.stats[PageDropReason.BOOK_EXPIRED] == 2
    assert b.get_timer() is None


def test_new_session_drops_old_books() -> None:
    a, b = pair()
    a.send({"blob": "q" * 100_000}, "beta")
    b.receive_datagram(a.datagrams_to_send(0.0)[0][0], path("alpha"), 0.0)
    restarted = Lane(lane_name="ln", yard_name="alpha")
    restarted.add_yard("beta", path("beta"))
    restarted.send({"n": 2}, "beta")
    events = transfer(restarted, path("alpha"), b)
    assert [e.body for e in events if isinstance(e, YardMessage)] == [{"n": 2}]
    assert b.stats[PageDropReason.STALE_SESSION] == 1
    assert b.get_timer() is None


def test_oversize_book_is_dropped() -> None:
    a = Lane(lane_name="ln", yard_name="alpha")
    a.add_yard("beta", path("beta"))
    b = Lane(lane_name="ln", yard_name="beta", max_message_size=100_000)
    a.send({"blob": "w" * 300_000}, "beta")
    transfer(a, path("alpha"), b)
    assert b.stats[PageDropReason.BAD_PAGE_NUMBER] + b.stats[PageDropReason.BOOK_TOO_LARGE] >= 1


def test_blocked_destination_backs_off_and_keeps_order() -> None:
    a, _ = pair(retry_delay=0.01, max_retry_delay=0.04)
    a.send({"n": 1}, "beta")
    a.send({"n": 2}, "beta")
    out = a.datagrams_to_send(0.0)
    a.send_blocked(path("beta"), [d for d, _ in out], 0.0)
    a.send({"n": 3}, "beta")
    assert a.datagrams_to_send(0.0) == []
    assert a.get_timer() == 0.01
    a.handle_timer(0.01)
    again = a.datagrams_to_send(0.01)
    assert [d for d, _ in again][:2] == [d for d, _ in out] and len(again) == 3
    a.send_blocked(path("beta"), [d for d, _ in again], 0.01)
    assert a.get_timer() == 0.01 + 0.02
    a.send_succeeded(path("beta"))
    assert a.backlog("beta") == 3


def test_tx_queue_is_bounded() -> None:
    a, _ = pair(max_tx_pages=2)
    assert a.send({"n": 1}, "beta") and a.send({"n": 2}, "beta")
    assert not a.send({"n": 3}, "beta")
    assert a.stats["tx_refused"] == 1


def test_failed_send_reaps_yard() -> None:
    a, _ = pair()
    a.send({"n": 1}, "beta")
    a.datagrams_to_send(0.0)
    a.send_failed(path("beta"), 0.0)
    assert drained(a) == [YardReaped(name="beta", path=path("beta"))]
    assert not a.has_yard("beta")


def test_pack_gives_the_pages_send_would_queue_and_queues_nothing() -> None:
    a, b = pair(max_page_size=400)
    small, large = {"k": 1}, {"fill": "x" * 2000}
    pages = a.pack(small, "beta") + a.pack(large, "beta")
    assert a.backlog("beta") == 0 and a.datagrams_to_send(0.0) == []
    assert len(pages) > 2  # the large one was paginated
    for data in pages:
        b.receive_datagram(data, path("alpha"), 0.0)
    bodies = [e.body for e in drained(b) if isinstance(e, YardMessage)]
    assert bodies == [small, large]
    # Book ids continue across pack and send, so the receiver never confuses two books.
    a.send({"k": 2}, "beta")
    assert [e.body for e in transfer(a, path("alpha"), b)] == [{"k": 2}]
