"""Two real masters of one cluster (``cluster_id`` and ``cluster_store``, the test
PostgreSQL) and real minions: a key accepted on master A is accepted on master B without
a re-accept, whether the minion was already waiting on B (heard through LISTEN/NOTIFY)
or joins B later (the cluster's decision asked at the join); a key deleted on A ends the
minion's session on B; a key waiting on A is listed and decided on B; an eauth token
made on A works on B, and a logout on B ends it on A; a key denied on B is listed on A
and C and deleted everywhere from A."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import re
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemons.helpers import MINION_TUNING, Daemon, key_tool
from helpers.waiting import wait_for
from pg import Postgres
from remote.cluster import json_docs, run_as

from raetsalt.auth.tokens import digest_of
from raetsalt.cli import salt as salt_cli
from raetsalt.config import load_node_config

pytestmark = pytest.mark.integration


class Fleet:
    def __init__(self, root: Path, database: str) -> None:
        self.root = root
        self.database = database
        self.daemons: list[Daemon] = []
        self.ports: dict[str, int] = {}

    def master(self, name: str, extra: str = "") -> Daemon:
        conf = self.root / name
        conf.mkdir()
        (conf / "master").write_text(
            f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: 0\n"
            f"raet_alive_period: 1.0\ncluster_id: fleet1\ncluster_store: '{self.database}'\n"
            f"{extra}")
        daemon = Daemon("master", conf)
        self.daemons.append(daemon)
        line = daemon.expect("serving on 127.0.0.1:", timeout=30)
        match = re.search(r"serving on 127\.0\.0\.1:(\d+)", line)
        assert match is not None
        self.ports[name] = int(match.group(1))
        return daemon

    def minion(self, name: str, minion_id: str, master: str,
               same_keys_as: str | None = None) -> Daemon:
        conf = self.root / name
        conf.mkdir()
        (conf / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {conf}\nraet_port: 0\n"
            f"master: 127.0.0.1:{self.ports[master]}\n{MINION_TUNING}")
        if same_keys_as is not None:  # the same minion (same keys), to another master
            source = next((self.root / same_keys_as).rglob("road/local"))
            target = conf / source.relative_to(self.root / same_keys_as)
            target.mkdir(parents=True)
            estate = json.loads((source / "estate.json").read_text())
            (target / "estate.json").write_text(json.dumps(estate))
            (target / "estate.json").chmod(0o600)
        daemon = Daemon("minion", conf)
        self.daemons.append(daemon)
        return daemon

    def listing(self, master: str) -> dict[str, list[str]]:
        done = key_tool(self.root / master, "-L", "--out", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def fleet(postgres: Postgres) -> Iterator[Fleet]:
    root = Path(tempfile.mkdtemp(prefix="rsc", dir="/tmp"))
    fleet = Fleet(root, postgres.create_database("cluster"))
    try:
        yield fleet
    finally:
        for daemon in fleet.daemons:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_key_accepted_on_one_master_is_accepted_on_the_other(fleet: Fleet) -> None:
    a, b = fleet.master("ma"), fleet.master("mb")
    # m1 waits on both masters (the same keys), then an operator accepts it on A only.
    m1a = fleet.minion("m1a", "m1", "ma")
    m1a.expect("is pending on the master", timeout=15)
    m1b = fleet.minion("m1b", "m1", "mb", same_keys_as="m1a")
    m1b.expect("is pending on the master", timeout=15)
    done = key_tool(fleet.root / "ma", "-a", "m1", "-y")
    assert done.returncode == 0, done.stderr
    m1a.expect("connected to the master ma", timeout=15)
    m1b.expect("connected to the master mb", timeout=15)  # no key command on B
    b.expect("m1 (pending): accept by the cluster (on ma)", timeout=15)
    assert fleet.listing("mb")["minions"] == ["m1"]
    # m2 is accepted on A first and joins B afterwards: accepted at its first join.
    m2a = fleet.minion("m2a", "m2", "ma")
    m2a.expect("is pending on the master", timeout=15)
    assert key_tool(fleet.root / "ma", "-a", "m2", "-y").returncode == 0
    m2a.expect("connected to the master ma", timeout=15)
    m2b = fleet.minion("m2b", "m2", "mb", same_keys_as="m2a")
    m2b.expect("connected to the master mb", timeout=15)
    assert not any("pending" in line for line in m2b.drain())
    assert fleet.listing("mb")["minions"] == ["m1", "m2"]
    # A key deleted on A ends that minion's session on B.
    assert key_tool(fleet.root / "ma", "-d", "m1", "-y").returncode == 0
    b.expect("m1 (accepted): delete by the cluster (on ma)", timeout=15)
    assert "m1" not in fleet.listing("mb")["minions"]
    assert fleet.listing("mb")["minions"] == ["m2"]
    assert not any("by the cluster" in line for line in a.drain())  # its own decisions


def test_a_key_waiting_on_one_master_is_listed_and_decided_on_another(fleet: Fleet) -> None:
    a, _b = fleet.master("ma"), fleet.master("mb")
    m1 = fleet.minion("m1", "m1", "ma")
    m1.expect("is pending on the master", timeout=15)
    m2 = fleet.minion("m2", "m2", "ma")
    m2.expect("is pending on the master", timeout=15)
    # B never saw either minion: it lists them as waiting (written as the joins arrive)
    wait_for(lambda: fleet.listing("mb")["minions_pre"] == ["m1", "m2"], timeout=30)
    done = key_tool(fleet.root / "mb", "-a", "m1", "-y")
    assert done.returncode == 0, done.stderr
    assert "Key for minion m1 accepted." in done.stdout
    # the minion waiting on A gets in, with no restart and no key command on A
    a.expect("m1 (pending): accept by the cluster (on mb)", timeout=15)
    m1.expect("connected to the master ma", timeout=15)
    done = key_tool(fleet.root / "mb", "-r", "m2", "-y")
    assert done.returncode == 0, done.stderr
    a.expect("m2 (pending): reject by the cluster (on mb)", timeout=15)
    for name in ("ma", "mb"):
        listing = fleet.listing(name)
        assert (listing["minions"], listing["minions_pre"], listing["minions_rejected"]) \
            == (["m1"], [], ["m2"]), (name, listing)


def test_a_key_denied_on_one_master_is_listed_and_deleted_on_every_master(
        fleet: Fleet) -> None:
    """m1 is accepted through A; another minion presenting other keys under the id m1 to
    B (which never saw m1, auto_accept on) is denied there, not accepted: A and C list
    the denied key, and deleting it on A removes it from B's keep and every listing,
    while the accepted key stays."""
    a = fleet.master("ma", "auto_accept: true\n")
    b = fleet.master("mb", "auto_accept: true\n")
    fleet.master("mc", "auto_accept: true\n")
    m1 = fleet.minion("m1", "m1", "ma")
    m1.expect("connected to the master ma", timeout=15)
    wait_for(lambda: fleet.listing("mb")["minions"] == ["m1"], timeout=30)
    impostor = fleet.minion("impostor", "m1", "mb")  # its own, new keys
    b.expect("minion m1: key denied", timeout=15)
    impostor.stop()  # it would try again (the master's refusal is not signed)
    for name in ("ma", "mb", "mc"):
        wait_for(lambda name=name: fleet.listing(name)["minions_denied"] == ["m1"],
                 timeout=30)
        assert fleet.listing(name)["minions"] == ["m1"], name  # never displaced
    # Accepting it is for the master that denied it (A's keep does not hold it).
    done = key_tool(fleet.root / "ma", "-a", "m1", "--include-denied", "-y")
    assert done.returncode == 0, done.stderr
    assert "does not match any unaccepted or denied keys" in done.stdout
    done = key_tool(fleet.root / "ma", "-d", "m1", "--state", "denied", "-y")
    assert done.returncode == 0, done.stderr
    assert "Key for minion m1 deleted." in done.stdout
    a.expect("key of minion m1 (denied): delete by the operator, for the cluster",
             timeout=15)
    b.expect("key of minion m1 (denied): delete by the cluster (on ma)", timeout=15)
    assert not list((fleet.root / "mb").rglob("denied/m1.json"))
    for name in ("ma", "mb", "mc"):
        listing = fleet.listing(name)
        assert (listing["minions"], listing["minions_denied"]) == (["m1"], []), name


EAUTH = """auto_accept: true
external_auth:
  file:
    ^filename: {users}
    ^filetype: htpasswd
    fred:
      - '.*'
"""
API = """rest_cherrypy:
  port: 0
  host: 127.0.0.1
  disable_ssl: true
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_an_eauth_token_made_on_one_master_works_on_the_other(fleet: Fleet) -> None:
    users = fleet.root / "users.htpasswd"
    users.write_text("fred:{SHA}" + base64.b64encode(
        hashlib.sha1(b"fred-secret").digest()).decode() + "\n")  # noqa: S324 - htpasswd's
    os.chmod(fleet.root, 0o755)  # the CLI runs as nobody and reads the config
    fleet.master("ma", EAUTH.format(users=users))
    fleet.master("mb", EAUTH.format(users=users) + API)
    for name, master in (("m1", "ma"), ("m2", "mb")):
        fleet.minion(name, name, master).expect(f"connected to the master {master}",
                                                timeout=30)
    home = fleet.root / "home"
    home.mkdir()
    os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)

    def salt(master: str, *args: str) -> tuple[int, dict[str, object], str]:
        code, out, err = run_as("nobody", str(home), salt_cli.main,
                                ["-c", str(fleet.root / master), *args, "--out", "json"])
        return code, json_docs(out) if code == 0 else {}, err

    code, out, err = salt("ma", "-a", "file", "--username", "fred", "--password",
                          "fred-secret", "-T", "m1", "test.ping")
    assert (code, out) == (0, {"m1": True}), err
    token = (home / ".raetsalt_token").read_text().strip()
    # the token made on A, presented to B (which never saw the login)
    code, out, err = salt("mb", "m2", "test.echo", "from-a")
    assert (code, out) == (0, {"m2": "from-a"}), err
    # logged out through B's REST API: A refuses it too, and its own copy is gone
    api = Daemon("api", fleet.root / "mb", "-l", "warning", "--port-file",
                 str(fleet.root / "api.port"))
    fleet.daemons.append(api)
    api.expect("raetsalt-api listening on", timeout=30)
    url = f"http://127.0.0.1:{int((fleet.root / 'api.port').read_text())}"
    request = urllib.request.Request(url + "/logout", data=b"{}", method="POST", headers={
        "X-Auth-Token": token, "Content-Type": "application/json",
        "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 200
    code, _, err = wait_for(lambda: (got := salt("ma", "m1", "test.ping"))[0] != 0 and got,
                            timeout=30)
    assert code == 2 and 'Authentication failure of type "token" occurred.' in err
    cachedir = load_node_config(fleet.root / "ma", "master")["cachedir"]
    assert not (Path(cachedir) / "tokens" / digest_of(token)).exists()
    # a token made by B's REST API works on A
    request = urllib.request.Request(url + "/login", data=json.dumps({
        "username": "fred", "password": "fred-secret", "eauth": "file"}).encode(),
        method="POST", headers={"Content-Type": "application/json",
                                "Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        fresh = json.loads(answer.read())["return"][0]["token"]
    (home / ".raetsalt_token").write_text(fresh + "\n")
    code, out, err = salt("ma", "m1", "test.echo", "from-b")
    assert (code, out) == (0, {"m1": "from-b"}), err
