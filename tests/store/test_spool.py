"""The job cache spool (raetsalt/store/spool.py) and the rows it carries: no database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.store.rows import CleanRow, LoadRow, ReturnRow, Row, json_text, pack, unpack
from raetsalt.store.spool import Position, Spool

JID = "20261126120000000001"


def _rows(n: int, start: int = 0) -> list[Row]:
    return [ReturnRow(JID, f"m{i}", "test.ping", "true", json.dumps({"return": i}), 1.5)
            for i in range(start, start + n)]


def _read_all(spool: Spool) -> tuple[list[Row], int]:
    rows: list[Row] = []
    bad = 0
    position = spool.first()
    while position != spool.position():
        chunk = spool.read(position, spool.position())
        rows.extend(chunk.rows)
        bad += chunk.bad
        spool.remove(chunk.finished)
        assert chunk.end != position or chunk.rows, "no progress"
        position = chunk.end
    return rows, bad


def test_rows_come_back_in_order_across_segments_and_finished_ones_go(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=400)
    batches = [_rows(5, 5 * n) for n in range(10)]
    for batch in batches:
        assert spool.append(batch)
    assert len(spool.segments()) > 3
    rows, bad = _read_all(spool)
    assert rows == [row for batch in batches for row in batch] and bad == 0
    assert spool.segments() == [spool.position().segment]  # only the open one is left


def test_a_new_run_reads_what_the_last_left_and_appends_to_a_new_segment(
        tmp_path: Path) -> None:
    first = Spool(tmp_path)
    first.append(_rows(3))
    first.close()
    again = Spool(tmp_path)
    again.append(_rows(2, 3))
    assert len(again.segments()) == 2
    rows, _ = _read_all(again)
    assert [r.minion for r in rows if isinstance(r, ReturnRow)] == ["m0", "m1", "m2", "m3", "m4"]


def test_a_torn_tail_ends_its_segment_and_is_counted(tmp_path: Path) -> None:
    first = Spool(tmp_path)
    first.append(_rows(3))
    first.close()
    (segment,) = first.segments()
    with (tmp_path / f"{segment:012d}.spool").open("ab") as handle:
        handle.write(b"\x00\x00\x01\x00partial")  # a frame cut short by a crash
    again = Spool(tmp_path)
    again.append(_rows(1, 3))
    rows, bad = _read_all(again)
    assert len(rows) == 4 and bad == 1


def test_a_damaged_frame_is_skipped_not_fatal(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(_rows(1))
    spool.close()
    (segment,) = spool.segments()
    with (tmp_path / f"{segment:012d}.spool").open("ab") as handle:
        handle.write(b"\x00\x00\x00\x03\xc1\xc1\xc1")  # msgpack's never-used byte
        handle.write(b"\x00\x00\x00\x02\x91\x07")  # a list holding a number, not a row
    again = Spool(tmp_path)
    rows, bad = _read_all(again)
    assert len(rows) == 1 and bad == 2


def test_a_full_spool_refuses_and_frees_room_as_segments_go(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=2000, segment_bytes=500)
    accepted = 0
    while spool.append(_rows(5)):
        accepted += 1
    assert 0 < accepted and spool.total_bytes() <= 2000
    _read_all(spool)
    assert spool.append(_rows(5))


def test_reading_stops_at_the_given_end(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(_rows(2))
    middle = spool.position()
    spool.append(_rows(2, 2))
    chunk = spool.read(Position(middle.segment, 0), middle)
    assert len(chunk.rows) == 2 and chunk.end == middle


def test_rows_survive_packing() -> None:
    for row in (LoadRow(JID, "{}", 1.0), _rows(1)[0], CleanRow(JID, 2.5)):
        assert unpack(pack(row)) == row
    for bad in ([], ["ret", JID], ["load", JID, 5, 1.0], ["nope", 1], "ret"):
        with pytest.raises(ValueError):
            unpack(bad)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20))
def test_json_text_is_always_what_jsonb_takes(data: Any) -> None:
    text = json_text(data, "test")
    text.encode("utf-8")  # no unpaired surrogate
    decoded = json.loads(text)

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            return [s for item in value for s in strings(item)]
        if isinstance(value, dict):
            return [s for k, v in value.items() for s in [k, *strings(v)]]
        return []

    assert not any("\x00" in s for s in strings(decoded))
    clean = json.dumps(data, ensure_ascii=False)  # nothing to replace: the same data
    if "\\u0000" not in clean and all(not ("\ud800" <= c <= "\udfff") for c in clean):
        assert decoded == data
