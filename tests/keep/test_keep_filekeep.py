"""On-disk behaviour of FileKeep: layout, modes, atomic writes, corrupt files, sharing."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from raetsalt.errors import KeepError
from raetsalt.keep import Acceptance, AutoMode, FileKeep, LocalRecord, RemoteRecord, RoleRecord

V1, P1 = "11" * 32, "a1" * 32
V2, P2 = "22" * 32, "a2" * 32


def local() -> LocalRecord:
    return LocalRecord("master_master", "master", True, 1, "5e" * 32, "9f" * 32,
                       ("0.0.0.0", 4506), 7)


def remote(name: str = "web1_minion", role: str = "web1") -> RemoteRecord:
    return RemoteRecord(name, role, 2, 3, ("10.0.0.5", 4510), 9, False, 2, True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0, so the modes we see are the ones the keep asked for at creation."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_layout_and_json_content(fkeep: FileKeep) -> None:
    fkeep.save_local(local())
    fkeep.save_remote(remote())
    fkeep.status_role("web1", V1, P1, AutoMode.ONCE)
    fkeep.status_role("web1", V2, P2, AutoMode.ONCE)
    root = fkeep.dirpath
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [".lock", "denied/web1.json", "keys.index.json", "local/estate.json",
                     "remote/web1_minion.json", "role/web1.json"]
    text = (root / "role" / "web1.json").read_text()
    assert "\n  " in text  # human-readable, indented
    assert json.loads(text) == {"format": 1, "role": "web1", "acceptance": "accepted",
                                "verhex": V1, "pubhex": P1}
    assert json.loads((root / "local" / "estate.json").read_text())["ha"] == ["0.0.0.0", 4506]
    assert json.loads((root / "denied" / "web1.json").read_text())["keys"] == [
        {"verhex": V2, "pubhex": P2}]


def test_modes(tmp_path: Path, open_umask: None) -> None:
    keep = FileKeep(tmp_path / "a" / "keep")
    keep.save_local(local())
    keep.save_remote(remote())
    keep.save_role(RoleRecord("web1", Acceptance.PENDING, V1, P1))
    for sub in ("", "local", "remote", "role", "denied"):
        assert mode(keep.dirpath / sub) == 0o700, sub
    for path in keep.dirpath.rglob("*"):
        if path.is_file():
            assert mode(path) == 0o600, path


def test_private_key_file_created_0600_not_chmodded(
    fkeep: FileKeep, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[int] = []
    real_open = os.open

    def spy_open(path: object, flags: int, mode: int = 0o777, **kw: object) -> int:
        if flags & os.O_CREAT and str(path).endswith(".tmp"):
            created.append(mode)
        return real_open(path, flags, mode, **kw)  # type: ignore[arg-type]

    def no_chmod(*args: object, **kw: object) -> None:
        raise AssertionError("keep must not chmod")

    monkeypatch.setattr(os, "open", spy_open)
    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "fchmod", no_chmod)
    fkeep.save_local(local())
    assert created == [0o600]
    assert mode(fkeep.dirpath / "local" / "estate.json") == 0o600


def test_failed_replace_keeps_old_file(fkeep: FileKeep, monkeypatch: pytest.MonkeyPatch) -> None:
    fkeep.save_role(RoleRecord("web1", Acceptance.PENDING, V1, P1))
    path = fkeep.dirpath / "role" / "web1.json"
    before = path.read_bytes()

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeepError, match="web1.json.*No space left"):
        fkeep.accept_role("web1")
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["web1.json"]  # temp file cleaned up
    monkeypatch.undo()
    rec = fkeep.load_role("web1")
    assert rec is not None and rec.acceptance is Acceptance.PENDING


def test_failed_write_keeps_old_file(fkeep: FileKeep, monkeypatch: pytest.MonkeyPatch) -> None:
    fkeep.save_local(local())
    path = fkeep.dirpath / "local" / "estate.json"
    before = path.read_bytes()

    def crash(fd: int, data: object) -> int:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "write", crash)
    changed = local()
    changed.puid = 99
    with pytest.raises(KeepError, match="estate.json"):
        fkeep.save_local(changed)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["estate.json"]


def test_stray_temp_files_are_ignored(fkeep: FileKeep) -> None:
    fkeep.save_remote(remote())
    (fkeep.dirpath / "remote" / ".web2_minion.json.123.abcd.tmp").write_text("{half")
    (fkeep.dirpath / "remote" / "web1_minion.json~").write_text("backup")
    (fkeep.dirpath / "role" / ".web2.json.1.2.tmp").write_text("")
    assert [r.name for r in fkeep.load_remotes()] == ["web1_minion"]
    assert fkeep.list_roles() == []


def test_durable_fsyncs_and_non_durable_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_fsync = os.fsync

    def spy_fsync(fd: int) -> None:
        calls.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    FileKeep(tmp_path / "d").save_remote(remote())
    assert len(calls) == 2  # file, then directory
    calls.clear()
    fast = FileKeep(tmp_path / "f", durable=False)
    fast.save_remote(remote())
    fast.remove_remote("web1_minion")
    assert calls == []
    assert fast.load_remotes() == []


CORRUPTIONS = {
    "bad json": b'{"role": "web1", ',
    "not an object": b'["web1"]',
    "missing field": json.dumps({"role": "web1", "acceptance": "accepted", "verhex": V1}).encode(),
    "wrong type": json.dumps({"role": "web1", "acceptance": "accepted", "verhex": 5,
                              "pubhex": P1}).encode(),
    "bad acceptance": json.dumps({"role": "web1", "acceptance": 1, "verhex": V1,
                                  "pubhex": P1}).encode(),
    "other role inside": json.dumps({"role": "web2", "acceptance": "accepted", "verhex": V1,
                                     "pubhex": P1}).encode(),
    "future format": json.dumps({"format": 2, "role": "web1", "acceptance": "accepted",
                                 "verhex": V1, "pubhex": P1}).encode(),
    "not utf-8": b'{"role": "\xff"}',
}


@pytest.mark.parametrize("content", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_corrupt_role_file_raises_and_is_kept(fkeep: FileKeep, content: bytes) -> None:
    path = fkeep.dirpath / "role" / "web1.json"
    path.write_bytes(content)
    with pytest.raises(KeepError, match=str(path)):
        fkeep.load_role("web1")
    with pytest.raises(KeepError):
        fkeep.list_roles()
    # status_role must neither decide on nor overwrite a file it cannot read
    for auto in AutoMode:
        with pytest.raises(KeepError):
            fkeep.status_role("web1", V1, P1, auto)
    assert path.read_bytes() == content


@pytest.mark.parametrize(
    "relpath, content, call",
    [
        ("local/estate.json", b'{"name": "m"}', "load_local"),
        ("remote/web1_minion.json", b'{"name": "web1_minion", "role": "web1"}', "load_remotes"),
        ("remote/web1_minion.json",
         json.dumps({"name": "web9_minion", "role": "web1", "uid": 2, "fuid": 3,
                     "ha": ["h", 1], "sid": 1, "main": False, "kind": 2,
                     "joined": True}).encode(), "load_remotes"),
        ("remote/bad name.json", b"{}", "load_remotes"),
        ("denied/web1.json", b'{"role": "web1", "keys": [{"verhex": "x"}]}', "list_denied"),
        ("denied/web1.json", b'{"role": "web1", "keys": "x"}', "list_denied"),
    ],
)
def test_other_corrupt_files(fkeep: FileKeep, relpath: str, content: bytes, call: str) -> None:
    path = fkeep.dirpath / relpath
    path.write_bytes(content)
    with pytest.raises(KeepError, match=str(path).replace("\\", "\\\\")):
        getattr(fkeep, call)()
    assert path.read_bytes() == content


def test_unreadable_file(fkeep: FileKeep) -> None:
    # a directory where a file belongs: unreadable even for root
    (fkeep.dirpath / "role" / "web1.json").mkdir()
    with pytest.raises(KeepError, match="cannot read"):
        fkeep.load_role("web1")
    assert (fkeep.dirpath / "role" / "web1.json").is_dir()


def test_unknown_extra_fields_are_tolerated(fkeep: FileKeep) -> None:
    doc = {"role": "web1", "acceptance": "pending", "verhex": V1, "pubhex": P1,
           "comment": "added by hand", "natted": None}
    (fkeep.dirpath / "role" / "web1.json").write_text(json.dumps(doc))
    assert fkeep.load_role("web1") == RoleRecord("web1", Acceptance.PENDING, V1, P1)


def test_keep_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "k").write_text("")
    with pytest.raises(KeepError, match="k"):
        FileKeep(tmp_path / "k")


def test_second_instance_sees_changes_at_once(fkeep: FileKeep) -> None:
    """The key tool (another process, here another instance) and a daemon share a keep."""
    daemon = FileKeep(fkeep.dirpath)
    assert daemon.status_role("web1", V1, P1, AutoMode.NEVER) is Acceptance.PENDING
    fkeep.accept_role("web1")
    assert daemon.status_role("web1", V1, P1, AutoMode.NEVER) is Acceptance.ACCEPTED
    fkeep.reject_role("web1")
    assert daemon.status_role("web1", V1, P1, AutoMode.ALWAYS) is Acceptance.REJECTED


def test_concurrent_denials_are_not_lost(fkeep: FileKeep) -> None:
    fkeep.save_role(RoleRecord("web1", Acceptance.ACCEPTED, V1, P1))
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        keep = FileKeep(fkeep.dirpath, durable=False)
        try:
            barrier.wait()
            for i in range(2):
                keep.status_role("web1", f"{n}{i}" * 32, P2, AutoMode.ALWAYS)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(v for v, _ in fkeep.list_denied()["web1"]) == sorted(
        f"{n}{i}" * 32 for n in range(4) for i in range(2))
