"""The file server's pure path checks and its disk side (``FileRoots``)."""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raetsalt.saltbridge.paths import MAX_PATH, PathRefused, clean_relpath, valid_saltenv
from raetsalt.saltbridge.roots import FileRoots


@pytest.mark.parametrize(("path", "clean"), [
    ("web/init.sls", "web/init.sls"), ("./web//init.sls", "web/init.sls"),
    ("web/", "web"), ("a/./b", "a/b"), ("...", "..."), ("a..b/c", "a..b/c"),
])
def test_clean_relpath_accepts(path: str, clean: str) -> None:
    assert clean_relpath(path) == clean


@pytest.mark.parametrize(("path", "why"), [
    ("../../etc/shadow", "leads out of file_roots"), ("web/../../x", "leads out"),
    ("..", "leads out"), ("/etc/shadow", "absolute"), ("a\0b", "not a valid path"),
    ("a\\..\\b", "not a valid path"), ("", "empty"), (".", "empty"),
    ("x" * (MAX_PATH + 1), "longer than"), (5, "must be a string"),
])
def test_clean_relpath_refuses(path: object, why: str) -> None:
    with pytest.raises(PathRefused, match=why):
        clean_relpath(path)


@given(st.text(max_size=80))
def test_clean_relpath_never_leaves_the_root(path: str) -> None:
    try:
        clean = clean_relpath(path, allow_empty=True)
    except PathRefused:
        return
    assert not clean.startswith("/") and ".." not in clean.split("/")
    assert os.path.normpath(os.path.join("/root", clean)).startswith("/root")


@pytest.mark.parametrize("env", ["base", "dev", "feature-1.2", "x@y+z"])
def test_saltenv_names(env: str) -> None:
    assert valid_saltenv(env) == env


@pytest.mark.parametrize("env", ["", ".", "..", "a/b", "x" * 65, None, 3, "a b"])
def test_bad_saltenv_names(env: object) -> None:
    with pytest.raises(PathRefused):
        valid_saltenv(env)


@pytest.fixture
def roots(tmp_path: Path) -> tuple[FileRoots, Path]:
    base, extra, outside = tmp_path / "base", tmp_path / "extra", tmp_path / "outside"
    for d in (base / "web", base / "empty", extra, outside):
        d.mkdir(parents=True)
    (base / "web" / "init.sls").write_text("x: 1\n")
    (base / "big.bin").write_bytes(bytes(range(256)) * 1000)
    (extra / "only_extra.txt").write_text("extra\n")
    (extra / "web").mkdir()
    (extra / "web" / "init.sls").write_text("shadowed\n")
    (outside / "secret").write_text("s3cret\n")
    (base / "leak").symlink_to(outside / "secret")
    (base / "leakdir").symlink_to(outside)
    (base / "alias.sls").symlink_to(base / "web" / "init.sls")
    (base / "loop").symlink_to(base)
    os.mkfifo(base / "fifo")
    files = FileRoots({"base": [str(base), str(extra)]}, buffer_size=4096)
    return files, base


def test_hash_find_and_serve_in_pieces(roots: tuple[FileRoots, Path]) -> None:
    files, base = roots
    content = (base / "big.bin").read_bytes()
    assert files.file_hash("base", "big.bin") == {
        "hsum": hashlib.sha256(content).hexdigest(), "hash_type": "sha256"}
    got, loc = b"", 0
    while True:
        piece = files.serve("base", "big.bin", loc, None)
        assert piece["dest"] == "big.bin" and len(piece["data"]) <= 4096
        if not piece["data"]:
            break
        got += piece["data"]
        loc += len(piece["data"])
    assert got == content
    packed = files.serve("base", "big.bin", 0, 6)
    assert packed["gzip"] == 6 and gzip.decompress(packed["data"]) == content[:4096]
    found = files.find("base", "web/init.sls")
    assert found["rel"] == "web/init.sls" and found["stat"][6] == 5
    assert str(base) not in repr(found)  # the master's paths never go to a minion


def test_first_root_wins_and_later_roots_fill_in(roots: tuple[FileRoots, Path]) -> None:
    files, _ = roots
    assert files.serve("base", "web/init.sls", 0, None)["data"] == b"x: 1\n"
    assert files.serve("base", "only_extra.txt", 0, None)["data"] == b"extra\n"


def test_missing_files_and_environments(roots: tuple[FileRoots, Path]) -> None:
    files, _ = roots
    assert files.file_hash("base", "nope") == {}
    assert files.serve("base", "nope", 0, None) == {"data": b"", "dest": ""}
    assert files.file_hash("dev", "web/init.sls") == {}
    assert files.find("base", "web") == {"path": "", "rel": ""}  # a directory is no file


def test_symlinks_leading_out_are_refused(roots: tuple[FileRoots, Path]) -> None:
    files, _ = roots
    for path in ("leak", "leakdir/secret"):
        with pytest.raises(PathRefused, match="leads out of file_roots"):
            files.file_hash("base", path)
        with pytest.raises(PathRefused):
            files.serve("base", path, 0, None)
    assert files.serve("base", "alias.sls", 0, None)["data"] == b"x: 1\n"  # inside: fine


def test_a_fifo_is_not_served_and_does_not_block(roots: tuple[FileRoots, Path]) -> None:
    files, _ = roots
    done = threading.Event()

    def ask() -> None:
        assert files.serve("base", "fifo", 0, None) == {"data": b"", "dest": ""}
        done.set()

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    assert done.wait(5.0)


def test_listings(roots: tuple[FileRoots, Path]) -> None:
    files, _ = roots
    listed = files.file_list("base")
    assert "web/init.sls" in listed and "only_extra.txt" in listed and "alias.sls" in listed
    assert not [p for p in listed if p.startswith(("leak", "fifo"))]
    assert all(not p.startswith("loop/loop") for p in listed)  # a link loop ends at once
    assert files.file_list("base", "web/") == ["web/init.sls"]
    assert "empty" in files.empty_dirs("base") and "web" in files.dir_list("base")
    assert files.file_list("nope") == []
    # Salt's fileserver filters by the prefix without its slashes: the directory itself
    # is listed under ``web/`` (file.recurse counts it as ``<dest>/.``).
    assert "web" in files.dir_list("base", "web/") and "web" in files.dir_list("base", "/web")
    assert files.empty_dirs("base", "empty/") == ["empty"]
