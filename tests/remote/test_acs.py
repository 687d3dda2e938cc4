"""publisher_acl and external_auth end to end: a real master and two minions; the
``raetsalt``/``raetsalt-run`` CLIs run as an unprivileged user (``nobody``, ``daemon``),
which reach the master over its command socket and are known by ``SO_PEERCRED``.

The CLI processes are forks of this one that drop to the user's uid before running the
CLI's ``main`` (the interpreter may live where other users cannot read it).  Needs root.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import Daemon, World, make_world

from raetsalt.auth.passwords import md5_crypt
from raetsalt.auth.tokens import TokenStore
from raetsalt.cli import run as run_cli
from raetsalt.cli import salt as salt_cli
from raetsalt.config import load_node_config
from raetsalt.drivers.cmdsock import command_socket_path
from raetsalt.event import MasterEvent
from remote.cluster import json_docs, run_as, started_cluster, wait_event

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run CLIs as other users"),
]

PAM_USER = "rsaltpamtest"
PAM_PASSWORD = "pam-Secret-42"
GRAINS = {"minion1": "os: Debian", "minion2": "os: Ubuntu"}


def master_config(root: Path) -> str:
    return f"""auto_accept: true
publisher_acl:
  nobody:
    - test.ping
    - 'minion1':
        - test.echo
    - 'minion2':
        - cmd.run:
            args: ['echo [a-z]+$']
    - '@manage': ['up$']
publisher_acl_blacklist:
  modules: ['test.sleep']
external_auth:
  file:
    ^filename: {root / 'users.htpasswd'}
    ^filetype: htpasswd
    fred:
      - test.*
      - '@runner': ['manage.status']
    alice:
      - 'G@os:Debian':
          - test.echo
  pam:
    {PAM_USER}:
      - test.ping
token_expire: 3600
"""


@dataclass
class Cluster:
    world: World
    master_conf: Path
    master: Daemon
    bus: MasterEvent
    home: Path

    def as_user(self, user: str, tool: str, *args: str) -> tuple[int, str, str]:
        """Run ``raetsalt`` (``salt``) or ``raetsalt-run`` (``run``) as ``user``."""
        main = {"salt": salt_cli.main, "run": run_cli.main}[tool]
        return run_as(user, str(self.home), main, ["-c", str(self.master_conf), *args])

    def wait_event(self, tag: str, timeout: float = 10.0) -> dict[str, Any]:
        return wait_event(self.bus, tag, timeout)


def pam_user_possible() -> bool:
    return (shutil.which("useradd") is not None and shutil.which("chpasswd") is not None
            and os.path.exists("/etc/pam.d/login"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    created = False
    if pam_user_possible():
        subprocess.run(["userdel", PAM_USER], capture_output=True)
        created = subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", PAM_USER],
                                 capture_output=True).returncode == 0
        if created:
            subprocess.run(["chpasswd"], input=f"{PAM_USER}:{PAM_PASSWORD}\n", text=True,
                           check=True)
    with make_world() as world:
        os.chmod(world.root, 0o755)  # other users read the config (as on /etc/raetsalt)
        (world.root / "users.htpasswd").write_text(
            f"fred:{md5_crypt(b'fred-secret', b'Q8x1Tz0p', b'$apr1$')}\n"
            "alice:{SHA}" + __import__("base64").b64encode(
                __import__("hashlib").sha1(b"alice-secret").digest()).decode() + "\n")
        home = world.root / "home"
        home.mkdir()
        os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
        try:
            with started_cluster(world, master_config(world.root), GRAINS) as up:
                yield Cluster(world, up.master_conf, up.master, up.bus, home)
        finally:
            if created:
                subprocess.run(["userdel", PAM_USER], capture_output=True)


def test_the_command_socket_is_open_but_the_bus_is_not(cluster: Cluster) -> None:
    opts = load_node_config(cluster.master_conf, "master")
    path = command_socket_path(opts)
    assert os.stat(path).st_mode & 0o777 == 0o666
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o755
    assert os.stat(opts["sock_dir"]).st_mode & 0o777 == 0o700


# ---------------------------------------------------------------------- publisher_acl


def test_publisher_acl_user_runs_what_is_allowed(cluster: Cluster) -> None:
    code, out, err = cluster.as_user("nobody", "salt", "*", "test.ping", "--out", "json")
    assert code == 0, err
    assert json_docs(out) == dict.fromkeys(GRAINS, True)
    code, out, err = cluster.as_user("nobody", "salt", "minion1", "test.echo", "hi",
                                     "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion1": "hi"}), err
    code, out, err = cluster.as_user("nobody", "run", "manage.up", "--out", "json")
    assert (code, json.loads(out)) == (0, sorted(GRAINS)), err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["*", "sys.doc"], "publish of 'sys.doc' to '*' (glob) denied: user 'nobody' "
         "may not run 'sys.doc': no function rule allows it"),
        (["*", "cmd.run", "echo abc"], "user 'nobody' may not run 'cmd.run' on target '*' "
         "(glob): the target is outside the allowed expression"),
        (["minion2", "test.echo", "x"], "publish of 'test.echo' to 'minion2' (glob) denied: "
         "user 'nobody' may not run 'test.echo' on target 'minion2' (glob): the target is "
         "outside the allowed expression"),
        (["*", "test.ping,cmd.run", ",", "id"], "may not run 'cmd.run'"),
        (["*", "test.sleep", "1"], "the function is blacklisted"),
    ],
)
def test_publisher_acl_refusals(cluster: Cluster, args: list[str], message: str) -> None:
    code, out, err = cluster.as_user("nobody", "salt", *args)
    assert code == 2 and not out
    assert err.startswith("ERROR: ") and message in err
    event = cluster.wait_event("raetsalt/publisher_acl/nobody/denied")["data"]
    assert event["check"] == "publisher_acl" and event["id"] == "nobody"
    cluster.master.expect("publisher_acl nobody: ")


def planted_echo(cluster: Cluster) -> tuple[Path, Path]:
    """The argument-rule attack: ``nobody``'s own ``echo`` that records who ran it."""
    bindir = cluster.world.root / "attacker-bin"
    proof = cluster.world.root / "PWNED"
    bindir.mkdir(exist_ok=True)
    echo = bindir / "echo"
    echo.write_text(f"#!/bin/sh\n/usr/bin/id > {proof}\n")
    echo.chmod(0o755)
    return bindir, proof


def test_an_args_rule_allows_its_argument(cluster: Cluster) -> None:
    code, out, err = cluster.as_user("nobody", "salt", "minion2", "cmd.run", "echo abc",
                                     "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion2": "abc"}), err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["python_shell=False", "env={{'PATH': '{bindir}'}}"],
         "keyword argument 'python_shell' is not allowed"),
        (["env={{'PATH': '{bindir}'}}"], "keyword argument 'env' is not allowed"),
        (["cwd=/"], "keyword argument 'cwd' is not allowed"),
        (["/", "{{'PATH': '{bindir}'}}", "False"], "positional argument 2 ('/') is not allowed"),
        (["__pub_user=root"], "keyword argument '__pub_user' is reserved"),
    ],
)
def test_the_reported_root_escape_is_refused(cluster: Cluster, extra: list[str],
                                             message: str) -> None:
    """``cmd.run 'echo abc' python_shell=False "env={'PATH': ...}"`` ran nobody's own
    ``echo`` as root on minion2 through an args-only publisher_acl rule."""
    bindir, proof = planted_echo(cluster)
    words = [word.format(bindir=bindir) for word in extra]
    code, out, err = cluster.as_user("nobody", "salt", "minion2", "cmd.run", "echo abc",
                                     *words)
    assert code == 2 and not out
    assert err.strip() == ("ERROR: publish of 'cmd.run' to 'minion2' (glob) denied: user "
                           f"'nobody' may not run 'cmd.run' with these arguments: {message}")
    assert cluster.wait_event("raetsalt/publisher_acl/nobody/denied")["data"]["fun"] == "cmd.run"
    assert not proof.exists()


def test_runner_refusal_and_a_user_without_rules(cluster: Cluster) -> None:
    code, out, err = cluster.as_user("nobody", "run", "jobs.list_jobs")
    assert code == 1
    assert err.strip() == ("runner 'jobs.list_jobs' denied: user 'nobody' may not run "
                           "'jobs.list_jobs': no runner rule allows it")
    code, out, err = cluster.as_user("daemon", "salt", "*", "test.ping")
    assert code == 2 and "user 'daemon' has no publisher_acl entry" in err


def test_root_is_unrestricted(cluster: Cluster) -> None:
    done = cluster.world.cli("salt", cluster.master_conf, "minion2", "cmd.run", "echo hi",
                             "--out", "json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion2": "hi"}


# ---------------------------------------------------------------------- external_auth


def test_eauth_file_right_password(cluster: Cluster) -> None:
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "fred",
                                     "--password", "fred-secret", "minion2", "test.echo",
                                     "as-fred", "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion2": "as-fred"}), err
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "alice",
                                     "--password", "alice-secret", "G@os:Debian", "-C",
                                     "test.echo", "as-alice", "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion1": "as-alice"}), err


def test_eauth_file_wrong_password_and_rules(cluster: Cluster) -> None:
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "fred",
                                     "--password", "nope", "*", "test.ping")
    assert code == 2
    assert 'Authentication failure of type "eauth" occurred for user fred.' in err
    assert cluster.wait_event("raetsalt/eauth/fred/failed")["data"]["eauth"] == "file"
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "fred",
                                     "--password", "fred-secret", "*", "cmd.run", "id")
    assert code == 2 and "user 'fred' may not run 'cmd.run'" in err
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "alice",
                                     "--password", "alice-secret", "*", "test.echo", "x")
    assert code == 2 and "the target is outside the allowed expression" in err


def test_eauth_token_works_until_it_expires(cluster: Cluster) -> None:
    token_file = cluster.home / ".raetsalt_token"
    code, out, err = cluster.as_user("nobody", "salt", "-a", "file", "--username", "fred",
                                     "--password", "fred-secret", "-T", "minion1",
                                     "test.ping", "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion1": True}), err
    info = os.stat(token_file)
    assert info.st_mode & 0o777 == 0o600 and info.st_uid == pwd.getpwnam("nobody").pw_uid
    token = token_file.read_text().strip()
    # Without -a the token says who we are: fred may run test.echo on minion2, nobody not.
    code, out, err = cluster.as_user("nobody", "salt", "minion2", "test.echo", "tok",
                                     "--out", "json")
    assert (code, json_docs(out)) == (0, {"minion2": "tok"}), err
    code, out, err = cluster.as_user("nobody", "run", "manage.status", "--out", "json")
    assert (code, json.loads(out)) == (0, {"up": sorted(GRAINS), "down": []}), err
    # The master keeps it 0600 in cachedir/tokens; make it expire there.
    store = TokenStore(Path(load_node_config(cluster.master_conf, "master")["cachedir"])
                       / "tokens")
    stored = store._path(token)
    assert stored.stat().st_mode & 0o777 == 0o600
    record = json.loads(stored.read_text())
    assert record["name"] == "fred" and record["expire"] - record["start"] == 3600
    stored.write_text(json.dumps({**record, "expire": time.time() - 1}))
    code, out, err = cluster.as_user("nobody", "salt", "minion1", "test.ping")
    assert code == 2
    assert 'Authentication failure of type "token" occurred.' in err
    assert not stored.exists()


@pytest.mark.skipif(not pam_user_possible(), reason="no useradd/chpasswd or PAM login stack")
def test_eauth_pam(cluster: Cluster) -> None:
    done = cluster.world.cli("salt", cluster.master_conf, "-a", "pam", "--username",
                             PAM_USER, "--password", PAM_PASSWORD, "minion1", "test.ping",
                             "--out", "json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion1": True}
