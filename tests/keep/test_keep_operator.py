"""Operator actions for the key tool: accept, reject, denied handling, delete, fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt.errors import KeepError, LocalError
from raetsalt.keep import Acceptance, AutoMode, RemoteRecord, RoleRecord, fingerprint
from raetsalt.keep.store import _BaseKeep

OLD = ("11" * 32, "a1" * 32)
NEW = ("22" * 32, "a2" * 32)
NEWER = ("33" * 32, "a3" * 32)
A, P, R = Acceptance.ACCEPTED, Acceptance.PENDING, Acceptance.REJECTED


def remote(name: str, role: str) -> RemoteRecord:
    return RemoteRecord(name, role, 2, 3, ("10.0.0.5", 4510), 9, False, 2, True)


def test_accept_and_reject(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.NEVER)
    assert keep.accept_role("web1") == RoleRecord("web1", A, *OLD)
    assert keep.reject_role("web1") == RoleRecord("web1", R, *OLD)
    assert keep.status_role("web1", *OLD, AutoMode.ALWAYS) is R
    assert keep.accept_role("web1").acceptance is A
    assert keep.status_role("web1", *OLD, AutoMode.NEVER) is A


def test_actions_on_unknown_role(keep: _BaseKeep) -> None:
    with pytest.raises(LocalError, match="web9"):
        keep.accept_role("web9")
    with pytest.raises(LocalError):
        keep.reject_role("web9")
    with pytest.raises(LocalError):
        keep.accept_denied("web9")
    assert keep.list_roles() == []
    assert keep.delete_role("web9") == []  # deleting nothing is fine
    keep.delete_denied("web9")


@pytest.mark.parametrize("op", ["accept_role", "reject_role", "accept_denied", "delete_role",
                                "delete_denied"])
def test_actions_validate_names(keep: _BaseKeep, op: str) -> None:
    with pytest.raises(KeepError):
        getattr(keep, op)("a/b")


def test_delete_denied_leaves_everything_else(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    keep.save_remote(remote("web1_minion", "web1"))
    keep.status_role("web1", *NEW, AutoMode.ONCE)
    keep.status_role("web2", *NEW, AutoMode.ONCE)
    keep.status_role("web2", *OLD, AutoMode.ONCE)
    assert set(keep.list_denied()) == {"web1", "web2"}

    keep.delete_denied("web1")

    assert keep.list_denied() == {"web2": [OLD]}
    assert keep.load_role("web1") == RoleRecord("web1", A, *OLD)
    assert [r.name for r in keep.load_remotes()] == ["web1_minion"]
    # the same rogue key is denied (and recorded) again on its next attempt
    assert keep.status_role("web1", *NEW, AutoMode.ONCE) is R
    assert keep.list_denied()["web1"] == [NEW]


def test_accept_denied_single_pair(keep: _BaseKeep) -> None:
    """A rebuilt minion: the operator promotes its new keys."""
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    assert keep.status_role("web1", *NEW, AutoMode.ONCE) is R
    assert keep.accept_denied("web1") == RoleRecord("web1", A, *NEW)
    assert keep.list_denied() == {}
    assert keep.status_role("web1", *NEW, AutoMode.NEVER) is A
    assert keep.status_role("web1", *OLD, AutoMode.NEVER) is R  # old keys are now the stranger


def test_accept_denied_needs_a_choice_when_ambiguous(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.NEVER)  # pending
    keep.status_role("web1", *NEW, AutoMode.NEVER)
    keep.status_role("web1", *NEWER, AutoMode.NEVER)
    with pytest.raises(LocalError, match="2 denied"):
        keep.accept_denied("web1")
    with pytest.raises(LocalError):
        keep.accept_denied("web1", verhex="44" * 32)
    assert keep.accept_denied("web1", verhex=NEWER[0]) == RoleRecord("web1", A, *NEWER)
    assert keep.list_denied() == {"web1": [NEW]}


def test_delete_role_cascades(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    keep.status_role("web1", *NEW, AutoMode.ONCE)
    keep.status_role("web2", *NEW, AutoMode.ONCE)
    for name, role in [("web1_minion", "web1"), ("web1_caller", "web1"), ("web2_minion", "web2")]:
        keep.save_remote(remote(name, role))

    assert keep.delete_role("web1") == ["web1_caller", "web1_minion"]

    assert keep.load_role("web1") is None
    assert [r.name for r in keep.load_remotes()] == ["web2_minion"]
    assert keep.list_denied() == {}
    assert [r.role for r in keep.list_roles()] == ["web2"]
    # first sight again
    assert keep.status_role("web1", *NEW, AutoMode.NEVER) is P


def test_delete_role_can_keep_denied(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    keep.status_role("web1", *NEW, AutoMode.ONCE)
    keep.delete_role("web1", include_denied=False)
    assert keep.load_role("web1") is None
    assert keep.list_denied() == {"web1": [NEW]}


def test_find_fingerprint(keep: _BaseKeep) -> None:
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    keep.status_role("web1", *NEW, AutoMode.ONCE)
    keep.status_role("web2", *NEWER, AutoMode.NEVER)
    keep.save_role(RoleRecord("odd", A, "not-hex", "also-not-hex"))

    assert keep.find_fingerprint(fingerprint(OLD[0])) == [("web1", "accepted")]
    assert keep.find_fingerprint(fingerprint(OLD[1])) == [("web1", "accepted")]
    assert keep.find_fingerprint(fingerprint(NEW[1]).replace(":", "").upper()) == [
        ("web1", "denied")]
    assert keep.find_fingerprint(fingerprint(NEWER[0])) == [("web2", "pending")]
    assert keep.find_fingerprint(fingerprint(NEWER[0], "md5"), "md5") == [("web2", "pending")]
    assert keep.find_fingerprint("00:11") == []
    with pytest.raises(LocalError):
        keep.find_fingerprint("00", "crc")


def test_remove_one_denied_key_keeps_the_others(tmp_path: Path) -> None:
    from raetsalt.keep.records import Acceptance, AutoMode, RoleRecord
    from raetsalt.keep.store import FileKeep

    keep = FileKeep(tmp_path)
    keep.save_role(RoleRecord("m1", Acceptance.ACCEPTED, "a" * 64, "b" * 64))
    keep.status_role("m1", "c" * 64, "d" * 64, AutoMode.ONCE)
    keep.status_role("m1", "e" * 64, "f" * 64, AutoMode.ONCE)
    assert len(keep.list_denied()["m1"]) == 2
    with keep.transaction():
        keep.remove_denied("m1", verhex="C" * 64)
    assert keep.list_denied()["m1"] == [("e" * 64, "f" * 64)]
    assert keep.load_role("m1").acceptance is Acceptance.ACCEPTED  # type: ignore[union-attr]


def test_gen_accept_records_keys_for_an_id_without_one(keep: _BaseKeep) -> None:
    from raetsalt.keep.policy import Action
    from raetsalt.keep.records import KeyRef, KeyState

    made = KeyRef("fresh", KeyState.ACCEPTED, *NEW)
    change = keep.apply_change(Action.GEN_ACCEPT, made)
    assert change is not None and change.record == RoleRecord("fresh", A, *NEW)
    assert keep.status_role("fresh", *NEW, AutoMode.NEVER) is A
    # an id with a record in any state keeps it (Salt's gen_accept without force)
    assert keep.apply_change(Action.GEN_ACCEPT, KeyRef("fresh", KeyState.ACCEPTED,
                                                       *NEWER)) is None
    keep.status_role("waiting", *OLD, AutoMode.NEVER)
    assert keep.apply_change(Action.GEN_ACCEPT, KeyRef("waiting", KeyState.ACCEPTED,
                                                       *NEW)) is None
    assert keep.status_role("waiting", *OLD, AutoMode.NEVER) is P
    # only as an accepted key
    assert keep.apply_change(Action.GEN_ACCEPT, KeyRef("other", KeyState.PENDING,
                                                       *NEW)) is None
    # a pair denied for the id before is its key now, and no longer listed denied
    keep.status_role("web1", *OLD, AutoMode.ONCE)
    keep.status_role("web1", *NEW, AutoMode.ONCE)
    assert "web1" in keep.list_denied()
    keep.delete_role("web1", include_denied=False)
    change = keep.apply_change(Action.GEN_ACCEPT, KeyRef("web1", KeyState.ACCEPTED, *NEW))
    assert change is not None and change.denied == ()
    assert "web1" not in keep.list_denied()
