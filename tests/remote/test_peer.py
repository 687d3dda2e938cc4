"""Peer publishing end to end: a real master and three real minions on loopback;
``raetsalt-call publish.*`` on a minion, relayed by its daemon to the master, which decides
with ``peer``/``peer_run`` for the road-authenticated id.

The tests share one cluster and run in file order through three master configs: none
(everything denied), open (``'.*': ['.*']``) and restrictive (denied function, target,
runner, a minion without rules, a forged id).  Waits are on log lines and bus events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import Daemon, World, make_world

from raetsalt import protocol as p
from raetsalt.config import load_node_config
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.event import MasterEvent
from remote.cluster import ALIVE, started_cluster, wait_event

pytestmark = pytest.mark.integration

GRAINS = {
    "minion1": "os: Debian\n  roles: [web]",
    "minion2": "os: Ubuntu\n  roles: [db]",
    "minion3": "os: CentOS\n  roles: [web, db]",
}
OPEN = "peer:\n  '.*':\n    - '.*'\npeer_run:\n  '.*':\n    - manage.up\n"
RESTRICTIVE = (
    "peer:\n"
    "  'minion2$':\n"
    "    - test.ping\n"
    "    - 'minion1':\n"
    "        - grains.item\n"
    "peer_run:\n"
    "  'minion2$':\n"
    "    - manage.up$\n"
)


@dataclass
class Cluster:
    world: World
    master_conf: Path
    master: Daemon
    minions: dict[str, Daemon]
    confs: dict[str, Path]
    bus: MasterEvent

    def call(self, minion: str, *args: str) -> Any:
        return self.world.cli("call", self.confs[minion], *args, "--out", "json")

    def wait_event(self, tag: str, timeout: float = 10.0) -> dict[str, Any]:
        return wait_event(self.bus, tag, timeout)

    def reconfigure(self, extra: str) -> None:
        """Restart the master with ``extra`` config; wait until every minion is back."""
        assert self.master.terminate() == 0
        self.world.master_dir(extra, alive=ALIVE)
        self.master = self.world.start("master", self.master_conf)
        self.master.expect("serving on")
        self.bus.destroy()
        self.bus = MasterEvent(load_node_config(self.master_conf, "master")["sock_dir"])
        self.master.expect_each([f"minion {m} connected" for m in GRAINS], timeout=10.0)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with make_world() as world, started_cluster(world, "auto_accept: true\n", GRAINS) as up:
        cluster = Cluster(world, up.master_conf, up.master, up.minions, up.confs, up.bus)
        try:
            yield cluster
        finally:
            cluster.bus.destroy()  # reconfigure() may have replaced the first one


def local(done: Any) -> Any:
    return json.loads(done.stdout)["local"]


# ------------------------------------------------------------------ no peer config


@pytest.mark.parametrize("fun", ["publish.publish", "publish.full_data"])
def test_without_peer_config_every_publish_is_denied(cluster: Cluster, fun: str) -> None:
    done = cluster.call("minion1", fun, "minion[23]", "test.ping")
    assert done.returncode == 1, done.stdout
    assert local(done) == (
        "ERROR: peer publish of 'test.ping' to 'minion[23]' (glob) denied: "
        "peer publishing is disabled on this master")
    event = cluster.wait_event("raetsalt/peer/minion1/denied")
    assert event["data"]["fun"] == "test.ping" and event["data"]["kind"] == "publish"
    cluster.master.expect("peer minion1: peer publish of 'test.ping'")


def test_without_peer_run_config_runners_are_denied(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.runner", "manage.up")
    assert done.returncode == 1
    assert local(done) == (
        "ERROR: peer runner 'manage.up' denied: peer_run is disabled on this master")
    assert cluster.wait_event("raetsalt/peer/minion1/denied")["data"]["kind"] == "runner"


def test_publishing_publish_functions_is_refused_on_the_minion(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.publish", "*", "publish.publish")
    assert done.returncode == 1
    assert "publish.* functions are never peer-published" in local(done)


# ------------------------------------------------------------------ open config


def test_open_peer_config_publishes_and_returns_early(cluster: Cluster) -> None:
    cluster.reconfigure(OPEN)
    # It returns when both answered, not at its timeout: 600 s is far beyond the 30 s
    # the helper lets the command run.
    done = cluster.call("minion1", "publish.publish", "minion[23]", "test.ping", "timeout=600")
    assert done.returncode == 0, done.stderr + done.stdout
    assert local(done) == {"minion2": True, "minion3": True}


def test_full_data_has_return_and_retcode(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.full_data", "minion2", "test.echo", "hello")
    assert done.returncode == 0, done.stderr
    assert local(done) == {"minion2": {"ret": "hello", "retcode": 0}}


def test_arguments_and_keyword_arguments_reach_the_function(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.publish", "minion3", "test.arg",
                        "arg=[1, two, 'x=3']")
    assert done.returncode == 0, done.stderr
    ret = local(done)["minion3"]
    assert ret["args"] == [1, "two"] and ret["kwargs"]["x"] == 3


def test_compound_and_the_old_expr_form(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.publish", "minion* and not G@os:Ubuntu",
                        "test.ping", "tgt_type=compound")
    assert done.returncode == 0, done.stderr
    assert local(done) == {"minion1": True, "minion3": True}
    done = cluster.call("minion2", "publish.publish", "roles:db", "test.ping",
                        "expr_form=grain")
    assert local(done) == {"minion2": True, "minion3": True}


def test_a_comma_command_runs_every_function(cluster: Cluster) -> None:
    done = cluster.call("minion1", "publish.full_data", "minion2", "test.ping,test.echo",
                        "arg=[[], [hi]]")
    assert done.returncode == 0, done.stderr
    assert local(done) == {"minion2": {"ret": {"test.ping": True, "test.echo": "hi"},
                                       "retcode": {"test.ping": 0, "test.echo": 0}}}


def test_runner_manage_up(cluster: Cluster) -> None:
    done = cluster.call("minion3", "publish.runner", "manage.up")
    assert done.returncode == 0, done.stderr
    assert local(done) == sorted(GRAINS)


# ------------------------------------------------------------------ restrictive config


def test_allowed_rules_of_a_restricted_minion(cluster: Cluster) -> None:
    cluster.reconfigure(RESTRICTIVE)
    done = cluster.call("minion2", "publish.publish", "*", "test.ping")
    assert local(done) == dict.fromkeys(GRAINS, True)
    done = cluster.call("minion2", "publish.publish", "minion1", "grains.item", "os")
    assert local(done) == {"minion1": {"os": "Debian"}}
    assert local(cluster.call("minion2", "publish.runner", "manage.up")) == sorted(GRAINS)


@pytest.mark.parametrize(
    ("minion", "args", "message"),
    [
        ("minion2", ["publish.publish", "minion1", "cmd.run", "id"],
         "peer publish of 'cmd.run' to 'minion1' (glob) denied: minion 'minion2' may not "
         "run 'cmd.run': no function rule allows it"),
        ("minion2", ["publish.publish", "minion[13]", "grains.item", "os"],
         "peer publish of 'grains.item' to 'minion[13]' (glob) denied: minion 'minion2' may "
         "not run 'grains.item' on target 'minion[13]' (glob): the target is outside the "
         "allowed expression"),
        ("minion2", ["publish.publish", "*", "test.ping,cmd.run", "arg=[[], [id]]"],
         "peer publish of 'test.ping,cmd.run' to '*' (glob) denied: minion 'minion2' may "
         "not run 'cmd.run': no function rule allows it"),
        ("minion2", ["publish.runner", "jobs.list_jobs"],
         "peer runner 'jobs.list_jobs' denied: minion 'minion2' may not run 'jobs.list_jobs':"
         " no runner rule allows it"),
        ("minion3", ["publish.publish", "*", "test.ping"],
         "peer publish of 'test.ping' to '*' (glob) denied: no peer rule matches minion id "
         "'minion3'"),
    ],
)
def test_denials_are_loud(cluster: Cluster, minion: str, args: list[str], message: str
                          ) -> None:
    done = cluster.call(minion, *args)
    assert done.returncode == 1, done.stdout
    assert local(done) == f"ERROR: {message}"
    event = cluster.wait_event(f"raetsalt/peer/{minion}/denied")["data"]
    assert event["id"] == minion and event["check"] == "peer"
    assert event["reason"] in message
    cluster.master.expect(f"peer {minion}: {message}")


def test_a_forged_id_gets_the_permissions_of_the_road_identity(cluster: Cluster) -> None:
    """minion3 claims to be minion2 inside its request: the master uses the road's id."""
    opts = load_node_config(cluster.confs["minion3"], "minion")
    with CommandClient("minion", opts["sock_dir"], "minion3") as client:
        req = client.request(p.SHARE_PUBLISH, tgt="*", tgt_type="glob", fun="test.ping",
                             arg=[], id="minion2", timeout=5)
        deadline = time.monotonic() + 10
        ack = None
        while ack is None and time.monotonic() < deadline:
            for body in client.receive(1.0):
                if body.get("req") == req and p.share_of(body) == p.SHARE_PUB_ACK:
                    ack = body
    assert ack is not None
    assert ack["denied"] is True
    assert ack["error"].endswith("no peer rule matches minion id 'minion3'")
    assert cluster.wait_event("raetsalt/peer/minion3/denied")["data"]["id"] == "minion3"


# ----------------------------------------------------------------------- argument rules

ARGS_ONLY = (
    "peer:\n"
    "  'minion1$':\n"
    "    - 'minion2':\n"
    "        - 'cmd.run$':\n"
    "            args: ['echo [a-z]+$']\n"
)


def test_a_peer_args_rule_allows_its_argument(cluster: Cluster) -> None:
    cluster.reconfigure(ARGS_ONLY)
    done = cluster.call("minion1", "publish.publish", "minion2", "cmd.run", "echo abc")
    assert done.returncode == 0, done.stderr
    assert local(done) == {"minion2": "abc"}


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("['echo abc', 'python_shell=False', \"env={{'PATH': '{bindir}'}}\"]",
         "keyword argument 'python_shell' is not allowed"),
        ("['echo abc', {{'__kwarg__': true, 'env': {{'PATH': '{bindir}'}}}}]",
         "keyword argument 'env' is not allowed"),
        ("['echo abc', '/', {{'PATH': '{bindir}'}}, false]",
         "positional argument 2 ('/') is not allowed"),
    ],
)
def test_the_reported_peer_escape_is_refused(cluster: Cluster, arg: str, message: str) -> None:
    """The argument rule attack via ``peer``: minion1 ran its own ``echo`` as root on minion2."""
    bindir = cluster.world.root / "attacker-bin"
    proof = cluster.world.root / "PWNED"
    bindir.mkdir(exist_ok=True)
    (bindir / "echo").write_text(f"#!/bin/sh\n/usr/bin/id > {proof}\n")
    (bindir / "echo").chmod(0o755)
    done = cluster.call("minion1", "publish.publish", "minion2", "cmd.run",
                        arg.format(bindir=bindir))
    assert done.returncode == 1, done.stdout
    assert local(done) == (
        "ERROR: peer publish of 'cmd.run' to 'minion2' (glob) denied: minion 'minion1' may "
        f"not run 'cmd.run' with these arguments: {message}")
    assert cluster.wait_event("raetsalt/peer/minion1/denied")["data"]["fun"] == "cmd.run"
    assert not proof.exists()
