"""Three real masters of one cluster (``cluster_id``, ``cluster_store`` on the test
PostgreSQL, ``cluster_pki_dir``, ``cluster_peers``) and real minions spread over them by
their rendezvous hash: a job published on any master reaches the whole fleet through the
masters holding the minions, its returns come back to the publishing client, and
``jobs.lookup_jid`` answers the same on every master.  The masters' road refuses an
estate without the cluster's keys, and datagrams from an address not in
``cluster_peers``."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.ports import HeldPort, port_in, retry_in_use
from helpers.rounds import Rounds
from pg import Postgres
from remote.cluster import run_as

from daemons.helpers import MINION_TUNING, Daemon, key_tool
from raetsalt.cli import salt as salt_cli
from raetsalt.drivers.udp import RoadStack
from raetsalt.services.masters import rendezvous_order

pytestmark = pytest.mark.integration

NAMES = ("ma", "mb", "mc")


class Cluster:
    def __init__(self, root: Path, store: str) -> None:
        self.master_extra = ""
        self.root = root
        self.store = store
        self.daemons: dict[str, Daemon] = {}
        self.ports: dict[str, int] = {}
        self.held = {name: HeldPort() for name in NAMES}
        self.road_ports = {name: held.port for name, held in self.held.items()}

    def master(self, name: str) -> Daemon:
        conf = self.root / name
        conf.mkdir(exist_ok=True)
        peers = ", ".join(f"'127.0.0.1:{self.road_ports[n]}'" for n in NAMES if n != name)
        (conf / "master").write_text(
            f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: 0\n"
            f"raet_alive_period: 1.0\nauto_accept: true\ncluster_id: fleet1\n"
            f"cluster_store: '{self.store}'\ncluster_pki_dir: {self.root / 'pki' / name}\n"
            f"cluster_port: {self.road_ports[name]}\ncluster_peers: [{peers}]\n"
            f"{self.master_extra}")
        if name != NAMES[0]:  # the first master created the keys: copied once
            target = self.root / "pki" / name
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.root / "pki" / NAMES[0] / "cluster.json", target)
        self.held[name].release()

        daemon = retry_in_use(lambda: Daemon("master", conf), Daemon.bind_failed)
        self.daemons[name] = daemon
        daemon.expect(f"cluster road on 127.0.0.1:{self.road_ports[name]}", timeout=30)
        self.ports[name] = port_in(daemon.expect("serving on 127.0.0.1:", timeout=30))
        return daemon

    def minion(self, minion_id: str, extra: str = "") -> Daemon:
        conf = self.root / minion_id
        conf.mkdir()
        listed = ", ".join(f"'127.0.0.1:{self.ports[m]}'" for m in NAMES)
        (conf / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {conf}\ninterface: 127.0.0.1\nraet_port: 0\n"
            f"master: [{listed}]\ncluster_id: fleet1\n{MINION_TUNING}{extra}")
        daemon = Daemon("minion", conf)
        self.daemons[minion_id] = daemon
        return daemon

    def fleet(self, ids: list[str], extra: Callable[[str], str] = lambda i: ""
              ) -> dict[str, Daemon]:
        """Minions ``ids`` started, each connected to the master of its first choice."""
        minions = {i: self.minion(i, extra(i)) for i in ids}
        for i in ids:
            minions[i].expect(f"connected to the master {self.first_choice(i)}", timeout=60)
        return minions

    def first_choice(self, minion_id: str) -> str:
        names = {f"127.0.0.1:{self.ports[n]}": n for n in NAMES}
        return names[rendezvous_order(minion_id, list(names))[0]]

    def next_choice(self, minion_id: str, lost: str) -> str:
        names = {f"127.0.0.1:{self.ports[n]}": n for n in NAMES}
        return next(names[m] for m in rendezvous_order(minion_id, list(names))
                    if names[m] != lost)

    def salt(self, master: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "raetsalt.cli.salt", "-c",
                               str(self.root / master), *args],
                              capture_output=True, text=True, timeout=90)

    def run(self, master: str, *args: str) -> object:
        done = subprocess.run([sys.executable, "-m", "raetsalt.cli.run", "-c",
                               str(self.root / master), *args, "--out", "json"],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ping_all(self, master: str, expected: set[str]) -> dict[str, object]:
        """test.ping '*' from ``master`` until every expected minion answers (the
        masters learn of each other's minions as their sessions come up)."""
        deadline = time.monotonic() + 90
        while True:
            done = self.salt(master, "*", "test.ping", "--out", "json", "--static",
                             "-t", "10")
            answers = _answers(done)
            if {k for k, v in answers.items() if v is True} == expected \
                    or time.monotonic() > deadline:
                return answers


def _answers(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON answers of a ``salt`` run; none when nothing matched (Salt's line)."""
    if done.stdout.startswith("No minions matched the target."):
        return {}
    return json.loads(done.stdout or "{}")  # type: ignore[no-any-return]


@pytest.fixture
def cluster(postgres: Postgres) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="rcr", dir="/tmp"))
    fleet = Cluster(root, postgres.create_database("road"))
    try:
        yield fleet
    finally:
        for held in fleet.held.values():
            held.release()
        for daemon in fleet.daemons.values():
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_publish_from_any_master_reaches_the_fleet(cluster: Cluster) -> None:
    masters = {name: cluster.master(name) for name in NAMES}
    ids = ["m1", "m2", "m3", "m4", "m5", "m6"]
    cluster.fleet(ids)
    holders = {cluster.first_choice(i) for i in ids}
    assert len(holders) >= 2, "the minions should spread over the masters"
    for a in NAMES:  # the masters' road is up, each way
        masters[a].expect_each([f"cluster: master {b} connected" for b in NAMES if b != a],
                               timeout=60)
    for name in NAMES:
        answers = cluster.ping_all(name, set(ids))
        assert answers == dict.fromkeys(ids, True), (name, answers)
    # one job, published on mc: every master's job cache answer is the same
    done = cluster.salt("mc", "*", "test.echo", "hello", "--out", "json", "--static",
                        "--show-jid", "-t", "15")
    assert done.returncode == 0, done.stderr
    jid = done.stdout.split("jid: ", 1)[1].split()[0]
    looked = {name: cluster.run(name, "jobs.lookup_jid", jid) for name in NAMES}
    assert looked["ma"] == dict.fromkeys(ids, "hello"), looked
    assert looked["ma"] == looked["mb"] == looked["mc"]
    # the registry in the store says which master holds each minion
    expected = {i: cluster.first_choice(i) for i in ids}
    deadline = time.monotonic() + 30
    while _rows(cluster.store, "SELECT minion, master FROM raetsalt_cluster_minions") \
            != expected and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the database for the registry threads' writes
    assert _rows(cluster.store, "SELECT minion, master FROM raetsalt_cluster_minions") \
        == expected
    # the return events were fired once in the cluster: by the publishing master only
    for name in ("ma", "mb"):
        assert not any(f"salt/job/{jid}/ret" in line for line in masters[name].drain())


def test_the_masters_road_refuses_an_estate_without_the_cluster_keys(
        cluster: Cluster) -> None:
    masters = {name: cluster.master(name) for name in NAMES[:1]}
    ma = masters["ma"]
    port = cluster.road_ports["ma"]
    # An estate at a configured peer's address (mb's road port) with keys of its own.
    rogue_keep = cluster.root / "rogue"
    cluster.held["mb"].release()
    with RoadStack(rogue_keep, ("127.0.0.1", cluster.road_ports["mb"]), name="mb",
                   main=True) as rogue:
        rogue.connect(("127.0.0.1", port))
        rogue.run_until(lambda events: any(type(e).__name__ == "JoinRejected"
                                           for e in events), timeout=30)
    ma.expect("cluster road: estate 'mb'", timeout=30)
    # From an address that is no peer (another port): not even read.
    with RoadStack(cluster.root / "stranger", ("127.0.0.1", 0), name="mx") as stranger:
        stranger.connect(("127.0.0.1", port))
        stranger.service(0.5)
    ma.expect("(not_peer;", timeout=30)


ACL = """publisher_acl:
  nobody:
    - 'G@role:web':
        - test.*
external_auth:
  file:
    ^filename: {users}
    ^filetype: htpasswd
    alice:
      - 'G@role:db':
          - test.ping
peer:
  '.*':
    - test.ping
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_access_is_decided_at_the_origin_against_the_whole_fleet(cluster: Cluster) -> None:
    users = cluster.root / "users.htpasswd"
    users.write_text("alice:{SHA}" + base64.b64encode(
        hashlib.sha1(b"alice-secret").digest()).decode() + "\n")  # noqa: S324 - htpasswd's
    os.chmod(cluster.root, 0o755)  # other users read the config
    cluster.master_extra = ACL.format(users=users)
    masters = {name: cluster.master(name) for name in NAMES}
    # the web minions are those ma holds; the db minions are held by mb and mc.  Which
    # master an id chooses depends on the masters' (random) ports: take ids until both
    # kinds are there (six ids miss ma about one time in eleven).
    ids: list[str] = []
    while len(ids) < 6 or len({cluster.first_choice(i) == "ma" for i in ids}) < 2:
        assert len(ids) < 40
        ids.append(f"m{len(ids) + 1}")
    role = {i: "web" if cluster.first_choice(i) == "ma" else "db" for i in ids}
    cluster.fleet(ids, lambda i: f"grains:\n  role: {role[i]}\n")
    assert cluster.ping_all("ma", set(ids)) == dict.fromkeys(ids, True)
    web = sorted(i for i in ids if role[i] == "web")
    db = sorted(i for i in ids if role[i] == "db")
    home = cluster.root / "home"
    home.mkdir()
    os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
    conf = str(cluster.root / "ma")

    def as_user(user: str, *args: str) -> tuple[int, str, str]:
        return run_as(user, str(home), salt_cli.main, ["-c", conf, *args])

    # A restricted user's '*' reaches minions held by other masters, which its rule
    # excludes: denied (salt#60413, salt#50003: a syndic let it through).
    code, out, err = as_user("nobody", "*", "test.ping", "--out", "json")
    assert code != 0 and "denied" in err, (code, out, err)
    masters["ma"].expect("publisher_acl nobody: ", timeout=10)
    # What the rule allows runs.
    code, out, _ = as_user("nobody", "-G", "role:web", "test.ping", "--out", "json",
                           "--static", "-t", "15")
    assert code == 0 and json.loads(out) == dict.fromkeys(web, True)
    # A target-restricted eauth rule for minions held by the other masters works from
    # this one (salt#62618: a syndic refused it).
    code, out, err = as_user("nobody", "-G", "role:db", "test.ping", "-a", "file",
                             "--username", "alice", "--password", "alice-secret",
                             "--out", "json", "--static", "-t", "15")
    assert code == 0, (out, err)
    assert json.loads(out) == dict.fromkeys(db, True)
    # Peer publish between minions held by different masters.
    source, target = web[0], db[0]
    done = subprocess.run([sys.executable, "-m", "raetsalt.cli.call", "-c",
                           str(cluster.root / source), "publish.publish", target,
                           "test.ping", "--out", "json"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"local": {target: True}}


def test_keys_are_listed_and_decided_cluster_wide(cluster: Cluster) -> None:
    masters = {name: cluster.master(name) for name in NAMES}
    ids = ["m1", "m2", "m3", "m4"]
    cluster.fleet(ids)
    deadline = time.monotonic() + 30
    # Every master lists the whole fleet's keys (each acceptance reaches the store as it
    # commits: listed again until then).
    while True:
        listings = {name: json.loads(key_tool(cluster.root / name, "-L", "--out", "json")
                                     .stdout) for name in NAMES}
        if all(listing["minions"] == ids for listing in listings.values()) \
                or time.monotonic() > deadline:
            break
    assert all(listing["minions"] == ids for listing in listings.values()), listings
    # Rejected on a master that never saw it: the master holding it ends its session.
    victim = ids[0]
    holder = cluster.first_choice(victim)
    other = next(name for name in NAMES if name != holder)
    done = key_tool(cluster.root / other, "-r", victim, "--include-accepted", "-y")
    assert done.returncode == 0, done.stderr
    assert f"Key for minion {victim} rejected." in done.stdout
    masters[other].expect(f"key of minion {victim} (accepted): reject by the operator, for "
                          "the cluster", timeout=10)
    masters[holder].expect(f"key of minion {victim} (accepted): reject by the cluster (on "
                           f"{other})", timeout=10)
    for name in NAMES:
        listing = json.loads(key_tool(cluster.root / name, "-L", "--out", "json").stdout)
        assert listing["minions_rejected"] == [victim] and victim not in listing["minions"]


def _rows(database: str, sql: str) -> dict[str, str]:
    with psycopg.connect(database) as conn:
        try:
            return dict(conn.execute(sql).fetchall())  # type: ignore[arg-type]
        except psycopg.errors.UndefinedTable:
            return {}


STORED = "SELECT count(*) FROM salt_returns WHERE jid = ANY(%s)"


def _count(database: str, sql: str, jids: list[str]) -> int:
    with psycopg.connect(database) as conn:
        row = conn.execute(sql, (jids,)).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return int(row[0])


def test_the_database_stopped_under_load_loses_no_return(
        cluster: Cluster, postgres: Postgres) -> None:
    masters = {name: cluster.master(name) for name in NAMES}
    ids = ["m1", "m2", "m3", "m4", "m5", "m6"]
    cluster.fleet(ids)
    for name in NAMES:
        assert cluster.ping_all(name, set(ids)) == dict.fromkeys(ids, True)

    def ping(turn: int) -> tuple[str, dict[str, object]]:  # from each master in turn
        out = cluster.salt(NAMES[turn % len(NAMES)], "*", "test.ping", "--out", "json",
                           "--static", "--show-jid", "-t", "15").stdout
        jid, _, rest = out.partition("\n")
        return jid.removeprefix("jid: "), json.loads(rest or "{}")

    rounds = Rounds(ping).start()
    answers = rounds.answers
    try:
        rounds.wait(2)
        postgres.stop()
        try:
            down_from = len(answers)
            rounds.wait(6)  # every master keeps publishing and answering meanwhile
            during = answers[down_from:]
        finally:
            postgres.start()
        rounds.wait(2)
    finally:
        rounds.stop()
    assert all(got == dict.fromkeys(ids, True) for _, got in during), during
    acknowledged = sum(len(got) for _, got in answers)
    jids = [jid for jid, _ in answers]
    deadline = time.monotonic() + 60
    while _count(cluster.store, STORED, jids) < acknowledged \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the database while the spools drain
    # every return a client got is in the database once, whichever master stored it
    assert _count(cluster.store, STORED, jids) == acknowledged
    jid = during[0][0]
    looked = {name: cluster.run(name, "jobs.lookup_jid", jid) for name in NAMES}
    assert looked["ma"] == looked["mb"] == looked["mc"] == dict.fromkeys(ids, True)
    for name in NAMES:
        masters[name].expect("reachable again", timeout=30)


def test_a_minion_moves_to_its_next_master_and_the_fleet_stays_whole(cluster: Cluster) -> None:
    masters = {name: cluster.master(name) for name in NAMES}
    ids = ["m1", "m2", "m3", "m4", "m5", "m6"]
    minions = cluster.fleet(ids)
    victim = cluster.first_choice(ids[0])
    masters.pop(victim)
    cluster.daemons.pop(victim).stop()  # SIGKILL
    moved = [i for i in ids if cluster.first_choice(i) == victim]
    arrivals: dict[str, list[str]] = {}
    for i in moved:
        # The same master key everywhere, the minion's key in the cluster's store: the
        # session with the next master starts with the allow, no join (nor a re-accept).
        new = cluster.next_choice(i, victim)
        minions[i].expect(f"master {new}: session started by an allow alone", timeout=60)
        minions[i].expect(f"connected to the master {new}", timeout=60)
        arrivals.setdefault(new, []).append(i)
    for new, movers in arrivals.items():  # they arrive in any order
        masters[new].expect_each([f"minion {i} connected (native profile, moved here from "
                                  "another master of the cluster without a join)"
                                  for i in movers], timeout=30)
    for name in masters:  # a job published after the loss, from each survivor
        assert cluster.ping_all(name, set(ids)) == dict.fromkeys(ids, True), name


def test_a_minion_silent_for_a_while_is_seen_again_by_every_master(cluster: Cluster) -> None:
    """A minion that stops answering its master's probes (frozen, starved of CPU) and
    answers again on the same session sends no new hello: the other masters, told it
    was gone, must hear it is held again, or they never target it while it stays."""
    masters = {name: cluster.master(name) for name in NAMES}
    ids = ["m1", "m2", "m3"]
    minions = cluster.fleet(ids)
    for name in NAMES:
        assert cluster.ping_all(name, set(ids)) == dict.fromkeys(ids, True), name
    frozen = ids[0]
    holder = cluster.first_choice(frozen)
    minions[frozen].popen.send_signal(signal.SIGSTOP)
    try:
        masters[holder].expect(f"minion {frozen} stopped answering", timeout=60)
    finally:
        minions[frozen].popen.send_signal(signal.SIGCONT)
    # Its master hears it again on the session it had (no move, no new session).
    for name in NAMES:
        assert cluster.ping_all(name, set(ids)) == dict.fromkeys(ids, True), name
    assert not any("moving to" in line for line in minions[frozen].drain())
    assert sum(f"minion {frozen} connected" in line for line in masters[holder].drain()) == 1
    # ... and the registry table names its master again (its row went with the silence)
    registry = "SELECT minion, master FROM raetsalt_cluster_minions"
    deadline = time.monotonic() + 30
    while _rows(cluster.store, registry).get(frozen) != holder \
            and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the database for the registry thread's write
    assert _rows(cluster.store, registry).get(frozen) == holder


def test_pillar_targets_reach_minions_held_by_other_masters(cluster: Cluster) -> None:
    pytest.importorskip("salt")  # pillars are compiled by Salt's loader
    pillar = cluster.root / "pillar"
    pillar.mkdir()
    (pillar / "top.sls").write_text("base:\n  'm*[13579]':\n    - blue\n"
                                    "  'm*[02468]':\n    - red\n")
    (pillar / "blue.sls").write_text("team: blue\n")
    (pillar / "red.sls").write_text("team: red\n")
    cluster.master_extra = f"pillar_roots:\n  base: [{pillar}]\n"
    for name in NAMES:
        cluster.master(name)
    # three blue (odd) and three red (even) minions, not all first held by one master
    # (which master holds an id depends on the masters' ports)
    candidates = ([f"m{n}", f"m{n + 2}", f"m{n + 4}", f"m{n + 1}", f"m{n + 3}", f"m{n + 5}"]
                  for n in range(1, 90, 2))
    ids = next(c for c in candidates if len({cluster.first_choice(i) for i in c}) >= 2)
    red_ids = ids[3:]
    cluster.fleet(ids)
    blue = dict.fromkeys(ids[:3], True)
    for name in NAMES:  # each master matches the whole fleet's pillars, held anywhere
        deadline = time.monotonic() + 90
        while True:  # the pillars are compiled after each minion's hello, then shared
            done = cluster.salt(name, "-I", "team:blue", "test.ping", "--out", "json",
                                "--static", "-t", "10")
            answers = _answers(done)  # nothing matches before any pillar is shared
            if answers == blue or time.monotonic() > deadline:
                break
        assert answers == blue, (name, answers, done.stderr)
        done = cluster.salt(name, "-C", f"I@team:red and not {red_ids[0]}", "test.ping",
                            "--out", "json", "--static", "-t", "10")
        assert done.returncode == 0, (done.stdout, done.stderr)
        assert json.loads(done.stdout) == dict.fromkeys(red_ids[1:], True), done.stderr
