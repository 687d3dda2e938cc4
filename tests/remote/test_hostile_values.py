"""Values the decoders accept but JSON cannot hold (a bytes map key, above all), sent by
every kind of sender to a real master: an accepted minion's return, hello and peer
publish, a local user whose publisher_acl allows only ``test.ping``, root.  One such
message used to stop the master (the job cache's encoder raised).  Afterwards the master
still serves, the record is in the job cache, and nothing was logged as a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemons.helpers import Daemon, World, make_world, ping

from raetsalt.cli import salt as salt_cli
from raetsalt.config import load_node_config
from remote.cluster import run_as, started_cluster

pytestmark = pytest.mark.integration

ROGUE = Path(__file__).resolve().parents[1] / "daemons" / "rogue_minion.py"

MASTER = """auto_accept: true
publisher_acl:
  nobody: [test.ping]
peer:
  rogue: ['test.*']
"""


@dataclass
class Cluster:
    world: World
    master_conf: Path
    master: Daemon
    home: Path
    bus: object


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with make_world() as world:
        os.chmod(world.root, 0o755)
        home = world.root / "home"
        home.mkdir()
        with started_cluster(world, MASTER, {"minion1": "os: Debian"}) as up:
            yield Cluster(world, up.master_conf, up.master, home, up.bus)


def rogue_sends(cluster: Cluster, bodies: str) -> None:
    """An accepted minion ``rogue`` sends ``bodies`` (a Python literal list) and waits
    until the master acknowledged them all."""
    confdir = cluster.world.minion_dir("rogue", "rogue")
    done = subprocess.run([sys.executable, str(ROGUE), str(confdir), "send", bodies],
                          capture_output=True, text=True, timeout=60)
    assert "delivered" in done.stdout, done.stdout + done.stderr


def still_serving(cluster: Cluster) -> None:
    assert cluster.master.popen.poll() is None, "\n".join(cluster.master.drain()[-20:])
    assert ping(cluster.world)
    assert cluster.master.popen.poll() is None


def no_traceback(cluster: Cluster) -> None:
    assert not any("Traceback" in line for line in cluster.master.drain())


def job_cache(cluster: Cluster) -> Path:
    return Path(load_node_config(cluster.master_conf, "master")["cachedir"]) / "jobs"


def cached_texts(cluster: Cluster) -> str:
    return "\n".join(p.read_text() for p in job_cache(cluster).glob("*/*.json"))


@pytest.mark.parametrize("bodies, stored", [
    # a return for a raetsalt-call job: its load (fun_args) and its return
    ("[{'__share': 'return', 'jid': 'req', 'fun': 'test.echo', 'fun_args': [],"
     " 'return': {b'k1': 1}}]", "k1"),
    ("[{'__share': 'return', 'jid': 'req', 'fun': 'test.echo',"
     " 'fun_args': [{b'k2': 1}], 'return': True}]", "k2"),
    # nested, and next to a str key of the same spelling
    ("[{'__share': 'return', 'jid': 'req', 'fun': 'test.echo', 'fun_args': [],"
     " 'return': {'k3': {b'k3': [{b'x': b'y'}]}}}]", "k3"),
])
def test_a_return_with_a_bytes_key_is_stored_and_the_master_serves_on(
        cluster: Cluster, bodies: str, stored: str) -> None:
    rogue_sends(cluster, bodies)
    still_serving(cluster)
    assert stored in cached_texts(cluster)
    no_traceback(cluster)


def test_a_first_hello_with_bytes_grain_names_does_not_stop_the_master(
        cluster: Cluster) -> None:
    rogue_sends(cluster, "[{'__share': 'minion_hello', 'start': True,"
                         " 'grains': {b'os': 'x', 'id': 'rogue'}}]")
    still_serving(cluster)
    done = cluster.world.cli("salt", cluster.master_conf, "-G", "os:Debian", "test.ping",
                             "--out", "json")
    assert json.loads(done.stdout) == {"minion1": True}
    still_serving(cluster)
    no_traceback(cluster)


def test_hellos_with_impossible_start_times_get_the_masters_time(cluster: Cluster) -> None:
    times = ["1e999", "-1e999", "1e300", "4611686018427387904", "-1", "'soon'", "[1.0]",
             "{b'x': 1}", "True"]
    rogue_sends(cluster, "[" + ", ".join(
        f"{{'__share': 'minion_hello', 'start': True, 'grains': {{'id': 'rogue'}}, "
        f"'start_time': {t}, 'utc_offset': 1000000000000}}" for t in times) + "]")
    still_serving(cluster)
    cluster.master.expect("the start time in the hello of 'rogue' is not believable (inf)",
                          timeout=30)
    no_traceback(cluster)


def test_a_peer_publish_with_a_bytes_key_argument(cluster: Cluster) -> None:
    rogue_sends(cluster, "[{'__share': 'peer_publish', 'rid': 'r1', 'tgt': 'minion1',"
                         " 'tgt_type': 'glob', 'fun': 'test.ping', 'arg': [{b'k4': 1}]}]")
    still_serving(cluster)
    no_traceback(cluster)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_user_allowed_only_test_ping_cannot_stop_the_master(cluster: Cluster) -> None:
    code, out, err = run_as("nobody", str(cluster.home), salt_cli.main,
                            ["-c", str(cluster.master_conf), "minion1", "test.ping",
                             "{!!binary aGk=: 1}", "--out", "json"])
    still_serving(cluster)
    assert "Traceback" not in err
    no_traceback(cluster)


def test_root_publishing_a_bytes_key_argument(cluster: Cluster) -> None:
    done = cluster.world.cli("salt", cluster.master_conf, "minion1", "test.arg",
                             "{!!binary aGk=: 1}", "--out", "json")
    still_serving(cluster)
    assert "Traceback" not in done.stderr
    assert "b'hi'" in cached_texts(cluster)
    no_traceback(cluster)


