"""The master's acceptance policy (open_mode, auto_accept, autosign/autoreject files) and
the minion's master re-resolution, without processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from raetsalt.daemon.policy import AcceptancePolicy, auto_mode, id_matches_file
from raetsalt.keep.records import Acceptance, AutoMode
from raetsalt.keep.store import FileKeep

A = ("a" * 64, "b" * 64)
B = ("c" * 64, "d" * 64)


def _file(tmp_path: Path, name: str, text: str, mode: int = 0o600) -> str:
    path = tmp_path / name
    path.write_text(text)
    os.chmod(path, mode)
    return str(path)


def test_id_matching_lines_are_ids_globs_or_whole_regexes(tmp_path: Path) -> None:
    path = _file(tmp_path, "sign", "# comment\n\nweb1\ndb*\nmail[0-9]+\\.example\n")
    assert id_matches_file(path, "web1")
    assert not id_matches_file(path, "web10")
    assert id_matches_file(path, "db-east")
    assert id_matches_file(path, "mail12.example")
    assert not id_matches_file(path, "mail12.example.org")  # regexes match the whole id
    assert not id_matches_file(None, "web1")
    assert not id_matches_file(str(tmp_path / "missing"), "web1")


def test_group_writable_files_are_ignored_unless_permissive(tmp_path: Path) -> None:
    path = _file(tmp_path, "sign", "web1\n", mode=0o660)
    assert not id_matches_file(path, "web1")
    assert id_matches_file(path, "web1", permissive=True)


def test_autoreject_wins_over_autosign_and_both_beat_pending(tmp_path: Path) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    policy = AcceptancePolicy(
        keep,
        autosign_file=_file(tmp_path, "sign", "web*\nbad1\n"),
        autoreject_file=_file(tmp_path, "reject", "bad*\n"),
    )
    assert policy.status_role("web1", *A, AutoMode.NEVER) is Acceptance.ACCEPTED
    assert policy.status_role("bad1", *A, AutoMode.NEVER) is Acceptance.REJECTED
    assert keep.load_role("bad1").acceptance is Acceptance.REJECTED  # type: ignore[union-attr]
    assert policy.status_role("other", *A, AutoMode.NEVER) is Acceptance.PENDING
    # A pending id that starts matching autosign is accepted at its next re-check.
    Path(policy.autosign_file).write_text("web*\nother\n")  # type: ignore[arg-type]
    assert policy.status_role("other", *A, AutoMode.NEVER) is Acceptance.ACCEPTED
    # ...but a changed key for an autosigned id is denied, never taken over.
    assert policy.status_role("web1", *B, AutoMode.NEVER) is Acceptance.REJECTED
    assert keep.list_denied() == {"web1": [B]}
    # An accepted id stays accepted even if it later matches autoreject.
    Path(policy.autoreject_file).write_text("bad*\nweb1\n")  # type: ignore[arg-type]
    assert policy.status_role("web1", *A, AutoMode.NEVER) is Acceptance.ACCEPTED


def test_open_mode_accepts_everything_and_replaces_changed_keys(tmp_path: Path) -> None:
    keep = FileKeep(tmp_path / "keep", durable=False)
    keep.status_role("m1", *A, AutoMode.ONCE)
    keep.status_role("m1", *B, AutoMode.ONCE)  # denied in the normal modes
    keep.status_role("m2", *A, AutoMode.NEVER)
    keep.reject_role("m2")
    policy = AcceptancePolicy(keep, open_mode=True)
    assert policy.status_role("m1", *B, AutoMode.NEVER) is Acceptance.ACCEPTED
    stored = keep.load_role("m1")
    assert stored is not None and (stored.verhex, stored.pubhex) == B
    assert keep.list_denied() == {}
    assert policy.status_role("m2", *A, AutoMode.NEVER) is Acceptance.ACCEPTED
    assert policy.status_role("m3", *A, AutoMode.NEVER) is Acceptance.ACCEPTED


def test_auto_accept_maps_to_once() -> None:
    assert auto_mode({"auto_accept": True}) is AutoMode.ONCE
    assert auto_mode({"auto_accept": False}) is AutoMode.NEVER


@pytest.mark.integration
def test_minion_follows_a_changed_master_address(tmp_path: Path) -> None:
    sock_dir = tempfile.mkdtemp(prefix="rsp", dir="/tmp")  # socket paths must stay short
    from raetsalt.config import load_node_config
    from raetsalt.daemon.service import MinionLink, open_node

    (tmp_path / "minion").write_text(
        f"root_dir: {tmp_path}\nsock_dir: {sock_dir}\ninterface: 127.0.0.1\n"
        "raet_port: 0\nid: mover\nmaster: 127.0.0.1:4506\n"
    )
    opts = load_node_config(tmp_path, "minion")
    answers = [("127.0.0.1", 4506), ("127.0.0.1", 4506), ("127.0.0.1", 4999)]
    now = [0.0]
    node = open_node(opts, "minion")
    try:
        link = MinionLink(node, opts, resolver=lambda: answers.pop(0), clock=lambda: now[0])
        link.connect()
        uid = link.uid
        assert not link.reresolve()  # too soon: no lookup
        now[0] += link.RESOLVE_EVERY
        assert not link.reresolve()  # same address
        now[0] += link.RESOLVE_EVERY
        assert link.reresolve()  # moved: same remote, new address
        assert link.uid == uid and node.master == uid
        assert node.road.road.remote(uid).ha == ("127.0.0.1", 4999)
        assert len(node.road.road.remotes) == 1
    finally:
        node.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
