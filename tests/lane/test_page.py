"""Lane page codec: raet's head layout, pagination, and hostile input raising only BadPacket."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.errors import BadPacket, LocalError
from raetsalt.lane.page import (
    PackKind,
    PageDropReason,
    decode_body_untrusted,
    encode_body,
    encode_head,
    paginate,
    parse_page_untrusted,
)

HEAD = dict(pack_kind=PackKind.JSON, source="yard1", destination="manor",
            session_id="0123456789abcdef01", book_id=0x1F)


def test_head_is_raets_nine_fields_in_order() -> None:
    assert encode_head(**HEAD) == (
        b"ri RAET\nvn 0\npk 0\nsn yard1\ndn manor\nsi 0123456789abcdef01\n"
        b"bi 1f\npn 0000\npc 0001\n\n"
    )


def test_single_page_round_trip() -> None:
    body = encode_body({"route": {"src": [None, "yard1", None]}, "x": 1}, PackKind.JSON)
    [page] = paginate(body, **HEAD)
    parsed = parse_page_untrusted(page)
    assert (parsed.source, parsed.destination, parsed.book_id) == ("yard1", "manor", 0x1F)
    assert (parsed.page_number, parsed.page_count) == (0, 1)
    assert decode_body_untrusted(parsed.section, parsed.pack_kind)["x"] == 1


def test_large_body_is_paginated_within_page_size() -> None:
    body = bytes(range(256)) * 1000  # 256000 bytes
    pages = paginate(body, **HEAD, max_page_size=65535)
    assert len(pages) == 4
    assert all(len(p) <= 65535 for p in pages)
    parsed = [parse_page_untrusted(p) for p in pages]
    assert [p.page_number for p in parsed] == [0, 1, 2, 3]
    assert {p.page_count for p in parsed} == {4}
    assert b"".join(p.section for p in parsed) == body


def test_too_many_pages_is_a_local_error() -> None:
    with pytest.raises(LocalError):
        paginate(b"x" * 5000, **HEAD, max_page_size=1000, max_page_count=3)


@pytest.mark.parametrize(
    ("data", "trigger"),
    [
        (b"", PageDropReason.BAD_HEAD),
        (b"garbage", PageDropReason.BAD_HEAD),
        (b"ri RAET\nvn 0\npk 0\nsn a b\ndn manor\nsi 1\nbi 1\npn 0000\npc 0001\n\n",
         PageDropReason.BAD_HEAD),
        (b"ri RAET\nvn 0\npk 0\nsn a\ndn manor\nsi 1\nbi 1\npn 0001\npc 0001\n\n",
         PageDropReason.BAD_PAGE_NUMBER),
        (b"ri RAET\nvn 0\npk 0\nsn a\ndn manor\nsi 1\nbi 1\npn 0000\npc 0000\n\n",
         PageDropReason.BAD_PAGE_NUMBER),
        (b"ri RAET\nvn 0\npk 0\nsn a.b\ndn manor\nsi 1\nbi 1\npn 0000\npc 0001\n\n",
         PageDropReason.BAD_HEAD),
        (b"ri RAET\nvn 0\npk 0\nsn a\ndn manor\nsi 1\nbi 1_0\npn 0000\npc 0001\n\n",
         PageDropReason.BAD_HEAD),
        (b"x" * 70000, PageDropReason.TOO_LARGE),
    ],
)
def test_bad_pages_raise_badpacket_with_trigger(data: bytes, trigger: str) -> None:
    with pytest.raises(BadPacket) as info:
        parse_page_untrusted(data)
    assert info.value.trigger == trigger


@pytest.mark.parametrize("body", [b"\xc1", b"[1,2]", b"\x93\x01\x02\x03", b"\x81\x91\x01\x01"])
def test_bad_bodies_raise_badpacket(body: bytes) -> None:
    kind = PackKind.JSON if body.startswith(b"[") else PackKind.MSGPACK
    with pytest.raises(BadPacket):
        decode_body_untrusted(body, kind)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_parse_or_raise_badpacket(data: bytes) -> None:
    try:
        page = parse_page_untrusted(b"ri RAET\n" + data)
    except BadPacket:
        return
    for kind in PackKind:
        try:
            decode_body_untrusted(page.section, kind)
        except BadPacket:
            pass


@given(st.binary(max_size=200), st.sampled_from(list(PackKind)))
def test_arbitrary_body_bytes_decode_or_raise_badpacket(data: bytes, kind: PackKind) -> None:
    try:
        assert isinstance(decode_body_untrusted(data, kind), dict)
    except BadPacket:
        pass


def test_head_fields_match_the_page() -> None:
    from raetsalt.lane.page import parse_head_untrusted, parse_page_untrusted

    [data] = paginate(b"\x81\xa1k\x01", pack_kind=PackKind.MSGPACK, source="ya", destination="yb",
                      session_id="s9", book_id=0x2A)
    page = parse_page_untrusted(data)
    kind, source, destination, session_id, book_id, number, count, offset = (
        parse_head_untrusted(data)
    )
    assert (kind, source, destination, session_id, book_id, number, count) == (
        page.pack_kind, page.source, page.destination, page.session_id, page.book_id,
        page.page_number, page.page_count,
    )
    assert data[offset:] == page.section == b"\x81\xa1k\x01"
