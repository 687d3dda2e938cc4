"""A daemon refuses private directories another local user could have prepared (as
OpenSSH's StrictModes): a squatter that created the ``root_dir`` tree under ``/tmp``
first (mode 0777) got the master running on its keys and sockets."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from raetsalt.daemon.strictmodes import check_private_dirs, unsafe_part

ME = {0, os.geteuid()}
NOBODY = pwd.getpwnam("nobody").pw_uid
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")


@pytest.fixture
def top() -> Iterator[Path]:
    """A private directory under the sticky /tmp."""
    path = Path(tempfile.mkdtemp(prefix="rss", dir="/tmp"))
    try:
        yield path
    finally:
        subprocess.run(["rm", "-rf", str(path)], check=False)


def test_a_private_tree_under_sticky_tmp_is_fine(top: Path) -> None:
    (top / "a" / "b").mkdir(parents=True, mode=0o755)
    assert unsafe_part(str(top / "a" / "b"), ME) is None
    assert unsafe_part(str(top / "a" / "b" / "not-yet"), ME) is None
    assert unsafe_part("/", ME) is None


@pytest.mark.parametrize("mode, who", [(0o777, "group and others"), (0o775, "its group"),
                                       (0o757, "others"), (0o1777, "group and others")])
def test_the_directory_itself_writable_by_others_is_refused(top: Path, mode: int,
                                                            who: str) -> None:
    root = top / "raetsalt"
    root.mkdir()
    root.chmod(mode)
    if not mode & 0o1000:  # as a parent: refused unless sticky like /tmp
        assert unsafe_part(str(root / "etc"), ME) == (
            f"{root} is writable by {who} (mode {mode:04o})")
    assert unsafe_part(str(root), ME) == f"{root} is writable by {who} (mode {mode:04o})"


def test_a_sticky_parent_writable_by_all_is_fine(top: Path) -> None:
    (top / "shared").mkdir()
    (top / "shared").chmod(0o1777)
    (top / "shared" / "mine").mkdir(mode=0o700)
    assert unsafe_part(str(top / "shared" / "mine"), ME) is None


@needs_root
def test_a_part_owned_by_another_user_is_refused(top: Path) -> None:
    (top / "raetsalt" / "pki").mkdir(parents=True, mode=0o700)
    os.chown(top / "raetsalt", NOBODY, -1)
    assert unsafe_part(str(top / "raetsalt" / "pki"), ME) == (
        f"{top / 'raetsalt'} belongs to nobody")


@needs_root
def test_a_symbolic_link_is_followed_and_its_owner_checked(top: Path) -> None:
    (top / "real").mkdir(mode=0o777)
    (top / "real").chmod(0o777)
    (top / "link").symlink_to(top / "real")
    assert unsafe_part(str(top / "link"), ME) == f"{top / 'real'} is writable by group and " \
                                                 "others (mode 0777)"
    (top / "good").mkdir(mode=0o700)
    (top / "theirs").symlink_to(top / "good")
    os.lchown(top / "theirs", NOBODY, -1)
    assert unsafe_part(str(top / "theirs"), ME) == f"{top / 'theirs'} belongs to nobody"
    os.lchown(top / "theirs", 0, -1)
    assert unsafe_part(str(top / "theirs"), ME) is None


def test_every_private_directory_is_checked(top: Path) -> None:
    opts = {"root_dir": str(top), "pki_dir": str(top / "pki"), "sock_dir": str(top / "s"),
            "cachedir": str(top / "c"), "log_file": str(top / "log" / "master")}
    assert check_private_dirs(opts) is None
    (top / "log").mkdir(mode=0o777)
    (top / "log").chmod(0o777)
    problem = check_private_dirs(opts)
    assert problem is not None and problem.startswith(f"log_file's directory {top / 'log'}:")


@needs_root
@pytest.mark.integration
@pytest.mark.parametrize("node", ["master", "minion"])
def test_a_daemon_refuses_a_tree_a_squatter_made_first(top: Path, node: str) -> None:
    # The squatter (nobody) made the root_dir tree first, open to all, as the shipped
    # example's /tmp/raetsalt allowed; it even planted the pki directory.
    root = top / "raetsalt"
    pki = root / "etc" / "raetsalt" / "pki" / node
    pki.mkdir(parents=True)
    for path in [root, *root.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
        path.chmod(0o777)
    confdir = top / "conf"
    confdir.mkdir()
    (confdir / node).write_text(f"id: n1\nroot_dir: {root}\ninterface: 127.0.0.1\n"
                                "raet_port: 0\nmaster: 127.0.0.1:1\n")
    done = subprocess.run([sys.executable, "-m", f"raetsalt.cli.{node}", "-c", str(confdir),
                           "-l", "info"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 78
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"raetsalt-{node}: root_dir {root}: {root} belongs to nobody" in done.stderr
    assert "StrictModes" in done.stderr
    assert sorted(p.name for p in pki.iterdir()) == []  # nothing written there
    os.chown(root, 0, 0)  # still open to all: refused too
    done = subprocess.run([sys.executable, "-m", f"raetsalt.cli.{node}", "-c", str(confdir)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 78 and f"{root} is writable by group and others" in done.stderr
