"""The master's acceptance policy (open_mode, auto_accept, autosign/autoreject files) and
the minion's master re-resolution, without processes."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from raetsalt.daemon.policy import FileMatcher, auto_mode, id_matches_file, key_policy
from raetsalt.keep.policy import KeyPolicy
from raetsalt.keep.records import Acceptance, AutoMode, RoleRecord

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


class Book:
    """Role records in memory with a policy deciding on them, as the road holds them."""

    def __init__(self, policy: KeyPolicy) -> None:
        self.policy = policy
        self.roles: dict[str, RoleRecord] = {}
        self.denied: dict[str, tuple[tuple[str, str], ...]] = {}

    def status(self, role: str, keys: tuple[str, str]) -> Acceptance:
        decision = self.policy.decide(role, *keys, self.roles.get(role), self.denied.get(role, ()))
        if decision.record is not None:
            self.roles[role] = decision.record
        if decision.denied is not None:
            self.denied[role] = decision.denied
        return decision.acceptance


def test_autoreject_wins_over_autosign_and_both_beat_pending(tmp_path: Path) -> None:
    now = [0.0]
    sign = _file(tmp_path, "sign", "web*\nbad1\n")
    reject = _file(tmp_path, "reject", "bad*\n")
    book = Book(KeyPolicy(
        autosign=FileMatcher(sign, clock=lambda: now[0]),
        autoreject=FileMatcher(reject, clock=lambda: now[0]),
    ))
    assert book.status("web1", A) is Acceptance.ACCEPTED
    assert book.status("bad1", A) is Acceptance.REJECTED
    assert book.roles["bad1"].acceptance is Acceptance.REJECTED
    assert book.status("other", A) is Acceptance.PENDING
    # A pending id that starts matching autosign is accepted at its next join (the file
    # is looked at again within a second).
    Path(sign).write_text("web*\nother\n")
    now[0] += FileMatcher.RECHECK
    assert book.status("other", A) is Acceptance.ACCEPTED
    # ...but a changed key for an autosigned id is denied, never taken over.
    assert book.status("web1", B) is Acceptance.REJECTED
    assert book.denied == {"web1": (B,)}
    # An accepted id stays accepted even if it later matches autoreject.
    Path(reject).write_text("bad*\nweb1\n")
    now[0] += FileMatcher.RECHECK
    assert book.status("web1", A) is Acceptance.ACCEPTED


def test_the_files_are_read_only_when_they_change(tmp_path: Path) -> None:
    now = [0.0]
    path = _file(tmp_path, "sign", "web1\n")
    matcher = FileMatcher(path, clock=lambda: now[0])
    assert matcher("web1") and not matcher("web2")
    Path(path).write_text("web2\n")
    assert matcher("web1")  # within a second: the old contents
    now[0] += FileMatcher.RECHECK
    assert matcher("web2") and not matcher("web1")
    os.unlink(path)
    now[0] += FileMatcher.RECHECK
    assert not matcher("web2")


def test_open_mode_accepts_everything_and_replaces_changed_keys() -> None:
    book = Book(KeyPolicy(AutoMode.ONCE))
    book.status("m1", A)
    book.status("m1", B)  # denied in the normal modes
    book.roles["m2"] = RoleRecord("m2", Acceptance.REJECTED, *A)
    book.policy = key_policy({"open_mode": True})
    assert book.status("m1", B) is Acceptance.ACCEPTED
    assert (book.roles["m1"].verhex, book.roles["m1"].pubhex) == B
    assert book.denied == {"m1": ()}
    assert book.status("m2", A) is Acceptance.ACCEPTED
    assert book.status("m3", A) is Acceptance.ACCEPTED


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
        assert node.stack.road.remote(uid).ha == ("127.0.0.1", 4999)
        assert len(node.stack.road.remotes) == 1
    finally:
        node.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
