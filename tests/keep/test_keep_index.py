"""The key index (raetsalt.keep.index): ``FileKeep.load_keys`` answers from one file, and
never shows what the key documents do not say."""

from __future__ import annotations

import fcntl
import json
import os
import random
from pathlib import Path

import pytest

from raetsalt.errors import KeepError
from raetsalt.keep.index import INDEX_NAME, read_ids, read_index
from raetsalt.keep.listing import BAD, STATUSES, id_lists, listed_ids, snapshot
from raetsalt.keep.policy import Action
from raetsalt.keep.records import (
    Acceptance,
    KeepState,
    KeepWrite,
    KeyRef,
    KeyState,
    RoleRecord,
)
from raetsalt.keep.store import FileKeep, _BaseKeep


def _hex(n: int, c: str) -> str:
    return (c + f"{n:06x}") * 9 + c


def _documents(keep: FileKeep) -> KeepState:
    """What the documents say (the index bypassed)."""
    return _BaseKeep.load_keys(keep)


def _view(state: KeepState) -> tuple[object, ...]:
    return (sorted((r.role, r.acceptance, r.verhex, r.pubhex) for r in state.roles),
            sorted(state.denied.items()), sorted(state.broken.items()), sorted(state.problems))


def _listings_agree(keep: FileKeep) -> None:
    """The ids-only listing says what the listing of every entry says, problems too."""
    said: list[str] = []
    full = id_lists(snapshot(keep, said.append), (*STATUSES, BAD))
    said_ids: list[str] = []
    assert listed_ids(keep, (*STATUSES, BAD), said_ids.append) == full
    assert said_ids == said


def _indexed(keep: FileKeep) -> KeepState:
    assert read_index(keep.dirpath) is not None, "no current index"
    return keep.load_keys()


def test_every_way_of_changing_keys_keeps_the_index_equal_to_the_documents(
    tmp_path: Path,
) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    rng = random.Random(7)
    for step in range(300):
        role = f"m{rng.randrange(12)}"
        choice = rng.randrange(6)
        if choice == 0:
            keep.save_role(RoleRecord(role, rng.choice(list(Acceptance)), _hex(step, "a"),
                                      _hex(step, "b")))
        elif choice == 1:
            keep.commit([KeepWrite.role(RoleRecord(role, Acceptance.PENDING, _hex(step, "a"),
                                                   _hex(step, "b"))),
                          KeepWrite.denied(role, ((_hex(step, "c"), _hex(step, "d")),))])
        elif choice == 2:
            keep.commit([KeepWrite.remove_role(role), KeepWrite.denied(role, ())])
        elif choice == 3 and (record := keep.load_role(role)) is not None:
            keep.apply_change(Action.ACCEPT, KeyRef(role, KeyState.of(record.acceptance),
                                                    record.verhex, record.pubhex))
        elif choice == 4:
            keep.delete_role(role)
        else:
            keep.remove_denied(role)
        assert _view(_indexed(keep)) == _view(_documents(keep)), step
        assert read_ids(keep.dirpath) is not None
        _listings_agree(keep)


def test_a_file_replaced_or_removed_behind_the_keeps_back_is_seen(tmp_path: Path) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    for n in range(20):
        keep.save_role(RoleRecord(f"m{n}", Acceptance.PENDING, _hex(n, "a"), _hex(n, "b")))
    assert read_index(keep.dirpath) is not None
    path = keep.path_of("role", "m3")
    doc = json.loads(path.read_text())
    doc["acceptance"] = "rejected"
    new = path.with_name("edited")
    new.write_text(json.dumps(doc))
    os.replace(new, path)  # what mv, sed -i and most editors do
    assert read_index(keep.dirpath) is None
    assert keep.load_role("m3").acceptance is Acceptance.REJECTED  # type: ignore[union-attr]
    assert _view(keep.load_keys()) == _view(_documents(keep))
    assert read_index(keep.dirpath) is not None  # the reader wrote a current one
    keep.path_of("role", "m4").unlink()
    assert "m4" not in [r.role for r in keep.load_keys().roles]


def test_a_commit_that_fails_half_way_leaves_no_index_and_readers_read_the_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.PENDING, _hex(1, "a"), _hex(1, "b")))
    assert read_index(keep.dirpath) is not None
    installs = []
    real_install = FileKeep._install

    def install(self: FileKeep, tmp: Path, path: Path) -> None:
        installs.append(path)
        if len(installs) == 2:
            raise KeepError(f"{path}: cannot write: No space left on device")
        real_install(self, tmp, path)

    monkeypatch.setattr(FileKeep, "_install", install)
    with pytest.raises(KeepError):
        keep.commit([
            KeepWrite.role(RoleRecord("web1", Acceptance.ACCEPTED, _hex(1, "a"), _hex(1, "b"))),
            KeepWrite.role(RoleRecord("web2", Acceptance.ACCEPTED, _hex(2, "a"), _hex(2, "b"))),
        ])
    assert not (keep.dirpath / INDEX_NAME).exists()
    # The first document changed, the second did not: so the reader says.
    assert [(r.role, r.acceptance) for r in keep.load_keys().roles] == [
        ("web1", Acceptance.ACCEPTED)]


@pytest.mark.parametrize("damage", [
    b"", b"{not json", b"[]", b'{"format": 2}', b'{"format": 1, "stamp": "x"}',
])
def test_a_damaged_index_is_ignored(tmp_path: Path, damage: bytes) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, _hex(1, "a"), _hex(1, "b")))
    (keep.dirpath / INDEX_NAME).write_bytes(damage)
    assert read_ids(keep.dirpath) is None
    assert listed_ids(keep, STATUSES)["minions"] == ["web1"]
    (keep.dirpath / INDEX_NAME).write_bytes(damage)
    assert _view(keep.load_keys()) == _view(_documents(keep))


@pytest.mark.parametrize(("field", "value"), [(0, "maybe"), (1, 5), (2, None), (0, ["x"])])
def test_an_index_with_a_wrong_value_inside_a_current_stamp_is_ignored(
    tmp_path: Path, field: int, value: object,
) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, _hex(1, "a"), _hex(1, "b")))
    path = keep.dirpath / INDEX_NAME
    data = json.loads(path.read_text())
    data["roles"]["web1"][field] = value
    path.write_text(json.dumps(data))
    assert listed_ids(keep, STATUSES)["minions"] == ["web1"]
    path.write_text(json.dumps(data))
    assert [r.acceptance for r in keep.load_keys().roles] == [Acceptance.ACCEPTED]


def test_a_reader_that_cannot_take_the_lock_reads_the_documents_and_writes_nothing(
    tmp_path: Path,
) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, _hex(1, "a"), _hex(1, "b")))
    (keep.dirpath / INDEX_NAME).unlink()
    fd = os.open(keep.dirpath / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process's transaction
        assert [r.role for r in keep.load_keys().roles] == ["web1"]
        assert not (keep.dirpath / INDEX_NAME).exists()
    finally:
        os.close(fd)
    keep.load_keys()
    assert (keep.dirpath / INDEX_NAME).exists()


def test_unreadable_documents_are_reported_from_the_index_as_from_the_files(
    tmp_path: Path,
) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, _hex(1, "a"), _hex(1, "b")))
    keep.save_role(RoleRecord("web2", Acceptance.ACCEPTED, _hex(2, "a"), _hex(2, "b")))
    bad = keep.path_of("role", "web2").with_name("new")
    bad.write_text("{ not json")
    os.replace(bad, keep.path_of("role", "web2"))
    first = keep.load_keys()  # from the documents; writes the index
    assert "web2" in first.broken and read_index(keep.dirpath) is not None
    assert _view(keep.load_keys()) == _view(first)
    _listings_agree(keep)
    assert listed_ids(keep, (BAD,)) == {BAD: ["web2"]}
    keep.delete_role("web2")  # the operator's fix
    assert _view(_indexed(keep)) == _view(_documents(keep))
    assert not keep.load_keys().broken and not keep.load_keys().problems
