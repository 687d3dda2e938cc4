from __future__ import annotations

import pytest

from raetsalt.errors import KeepError
from raetsalt.keep import Acceptance, Keep, LocalRecord, RemoteRecord, RoleRecord
from raetsalt.keep.store import _BaseKeep

V1, P1 = "11" * 32, "a1" * 32
V2, P2 = "22" * 32, "a2" * 32


def local() -> LocalRecord:
    return LocalRecord(name="master_master", role="master", main=True, kind=1,
                       sighex="5e" * 32, prihex="9f" * 32, ha=("0.0.0.0", 4506), puid=7)


def remote(name: str = "web1_minion", role: str = "web1", uid: int = 2) -> RemoteRecord:
    return RemoteRecord(name=name, role=role, uid=uid, fuid=3, ha=("10.0.0.5", 4510), sid=9,
                        main=False, kind=2, joined=True)


def test_implements_protocol(keep: _BaseKeep) -> None:
    assert isinstance(keep, Keep)


def test_empty_keep(keep: _BaseKeep) -> None:
    assert keep.load_local() is None
    assert keep.load_remotes() == []
    assert keep.load_role("web1") is None
    assert keep.list_roles() == []
    assert keep.list_denied() == {}


def test_local_round_trip(keep: _BaseKeep) -> None:
    keep.save_local(local())
    assert keep.load_local() == local()
    changed = local()
    changed.puid = 8
    changed.ha = ("127.0.0.1", 7530)
    keep.save_local(changed)
    loaded = keep.load_local()
    assert loaded == changed
    assert loaded is not None and isinstance(loaded.ha, tuple)


def test_remote_round_trip_sorted_and_remove(keep: _BaseKeep) -> None:
    keep.save_remote(remote("web2_minion", "web2", 3))
    keep.save_remote(remote("web1_minion", "web1", 2))
    assert [r.name for r in keep.load_remotes()] == ["web1_minion", "web2_minion"]
    assert keep.load_remotes()[1] == remote("web2_minion", "web2", 3)
    updated = remote("web1_minion", "web1", 2)
    updated.joined = False
    updated.sid = 10
    keep.save_remote(updated)
    assert keep.load_remotes()[0] == updated
    keep.remove_remote("web1_minion")
    keep.remove_remote("web1_minion")  # idempotent
    assert [r.name for r in keep.load_remotes()] == ["web2_minion"]


def test_role_round_trip_and_remove(keep: _BaseKeep) -> None:
    keep.save_role(RoleRecord("web2", Acceptance.PENDING, V2, P2))
    keep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, V1, P1))
    assert keep.load_role("web1") == RoleRecord("web1", Acceptance.ACCEPTED, V1, P1)
    assert [r.role for r in keep.list_roles()] == ["web1", "web2"]
    keep.remove_role("web1")
    keep.remove_role("web1")
    assert keep.load_role("web1") is None
    assert [r.role for r in keep.list_roles()] == ["web2"]


def test_acceptance_given_as_string_is_normalised(keep: _BaseKeep) -> None:
    keep.save_role(RoleRecord("web1", "rejected", V1, P1))  # type: ignore[arg-type]
    rec = keep.load_role("web1")
    assert rec is not None and rec.acceptance is Acceptance.REJECTED


def test_loaded_records_are_not_aliased(keep: _BaseKeep) -> None:
    rec = RoleRecord("web1", Acceptance.PENDING, V1, P1)
    keep.save_role(rec)
    rec.acceptance = Acceptance.ACCEPTED
    loaded = keep.load_role("web1")
    assert loaded is not None and loaded.acceptance is Acceptance.PENDING
    loaded.verhex = V2
    again = keep.load_role("web1")
    assert again is not None and again.verhex == V1


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "bad/name"},
        {"role": ".."},
        {"uid": "2"},
        {"uid": True},
        {"joined": 1},
        {"ha": ("h", "port")},
        {"ha": ("h",)},
    ],
)
def test_save_refuses_bad_remote(keep: _BaseKeep, bad: dict[str, object]) -> None:
    rec = remote()
    for k, v in bad.items():
        setattr(rec, k, v)
    with pytest.raises(KeepError):
        keep.save_remote(rec)
    assert keep.load_remotes() == []


def test_save_refuses_bad_local_and_role(keep: _BaseKeep) -> None:
    rec = local()
    rec.sighex = None  # type: ignore[assignment]
    with pytest.raises(KeepError, match="sighex"):
        keep.save_local(rec)
    with pytest.raises(KeepError):
        keep.save_role(RoleRecord("web1", "maybe", V1, P1))  # type: ignore[arg-type]
    with pytest.raises(KeepError):
        keep.save_role(RoleRecord("a b", Acceptance.PENDING, V1, P1))
    assert keep.load_local() is None and keep.list_roles() == []


@pytest.mark.parametrize("op", ["load_role", "remove_role", "remove_remote", "remove_denied"])
def test_name_validation_on_every_entry(keep: _BaseKeep, op: str) -> None:
    with pytest.raises(KeepError):
        getattr(keep, op)("../escape")
