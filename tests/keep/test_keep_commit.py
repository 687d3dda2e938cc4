"""``Keep.commit``: a batch of writes, the last write of a document winning, atomic per
document, durable as one group (two syncs); a failed batch leaves the old documents."""

from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt.errors import KeepError
from raetsalt.keep.records import Acceptance, KeepWrite, LocalRecord, RoleRecord
from raetsalt.keep.store import FileKeep

V, P = "a" * 64, "b" * 64


def test_commit_applies_a_batch_last_write_wins(tmp_path: Path) -> None:
    keep = FileKeep(tmp_path / "keep")  # durable: the group commit syncs
    local = LocalRecord("m", "m", True, 0, "00" * 32, "11" * 32, ("127.0.0.1", 1), 1)
    keep.commit([
        KeepWrite.local(local),
        KeepWrite.role(RoleRecord("web1", Acceptance.PENDING, V, P)),
        KeepWrite.role(RoleRecord("web1", Acceptance.ACCEPTED, V, P)),
        KeepWrite.role(RoleRecord("gone", Acceptance.PENDING, V, P)),
        KeepWrite.remove_role("gone"),
        KeepWrite.denied("web1", (("c" * 64, "d" * 64),)),
        KeepWrite.denied("web9", ()),
    ])
    assert keep.load_local() == local
    assert [(r.role, r.acceptance) for r in keep.list_roles()] == [("web1", Acceptance.ACCEPTED)]
    assert keep.list_denied() == {"web1": [("c" * 64, "d" * 64)]}
    leftovers = [p.name for p in (tmp_path / "keep").rglob(".*.tmp")]
    assert leftovers == []


def test_a_failed_commit_leaves_old_documents_whole(tmp_path: Path) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.save_role(RoleRecord("web1", Acceptance.PENDING, V, P))
    with pytest.raises(KeepError):
        keep.commit([
            KeepWrite.role(RoleRecord("web1", Acceptance.ACCEPTED, V, P)),
            KeepWrite.role(RoleRecord("bad/name", Acceptance.ACCEPTED, V, P)),
        ])
    assert keep.load_role("web1").acceptance is Acceptance.PENDING  # type: ignore[union-attr]
    assert not list((tmp_path / "keep").rglob(".*.tmp"))
