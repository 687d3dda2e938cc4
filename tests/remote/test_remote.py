"""Remote execution end to end: a real raetsalt-master and three real raetsalt-minions with
different static grains on loopback, driven through the raetsalt, raetsalt-run and
raetsalt-call commands.  Waits are on log lines and master bus events, never on sleeps.

The tests share one cluster and run in file order: the master restart (E), the
stopped minion (D) and the late jobs (a stopped, then a frozen minion) come last.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemons.helpers import Daemon, World, make_world

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent
from remote.cluster import ALIVE, daemon_logs, json_docs, started_cluster, wait_event

pytestmark = pytest.mark.integration

GRAINS = {
    "minion1": "os: Debian\n  roles: [web]\n  ipv4: [10.0.0.1]",
    "minion2": "os: Ubuntu\n  roles: [db]\n  ipv4: [10.0.1.2]",
    "minion3": "os: CentOS\n  roles: [web, db]\n  ipv4: [10.0.0.3]",
}
NODEGROUPS = "nodegroups:\n  webs: 'G@roles:web'\n  firsttwo: [minion1, minion2]\n"


@dataclass
class Cluster:
    world: World
    master_conf: Path
    master: Daemon
    minions: dict[str, Daemon]
    confs: dict[str, Path]
    bus: MasterEvent

    def salt(self, *args: str, timeout: float = 30.0) -> Any:
        return self.world.cli("salt", self.master_conf, *args, timeout=timeout)

    def run(self, *args: str) -> Any:
        return self.world.cli("run", self.master_conf, *args)

    def run_json(self, *args: str) -> Any:
        done = self.run(*args, "--out", "json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def wait_event(self, tag: str, timeout: float = 10.0) -> dict[str, Any]:
        return wait_event(self.bus, tag, timeout)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with make_world() as world, started_cluster(
        world, f"auto_accept: true\npresence_events: true\n{NODEGROUPS}", GRAINS
    ) as up:
        yield Cluster(world, up.master_conf, up.master, up.minions, up.confs, up.bus)


def test_ping_every_minion_as_json(cluster: Cluster) -> None:
    # It returns when all returned, not at its timeout: the 10-minute timeout is far
    # beyond the 30 s the helper lets the command run.
    done = cluster.salt("*", "test.ping", "--out", "json", "-t", "600")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion1": True, "minion2": True, "minion3": True}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["minion[12]"], ["minion1", "minion2"]),
        (["-E", "minion(1|3)"], ["minion1", "minion3"]),
        (["-L", "minion2,minion3"], ["minion2", "minion3"]),
        (["-G", "os:ubuntu"], ["minion2"]),
        (["--grain-pcre", "os:(deb|cent).*"], ["minion1", "minion3"]),
        (["-S", "10.0.0.0/24"], ["minion1", "minion3"]),
        (["-N", "webs"], ["minion1", "minion3"]),
        (["-C", "minion* and not G@os:Ubuntu"], ["minion1", "minion3"]),
        (["-C", "N@firsttwo and G@roles:db"], ["minion2"]),
    ],
)
def test_each_target_type_selects_exactly(cluster: Cluster, flags: list[str],
                                          expected: list[str]) -> None:
    done = cluster.salt(*flags, "test.ping", "--out", "json", "--static")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == dict.fromkeys(expected, True)
    preview = cluster.salt(*flags, "test.ping", "--preview-target", "--out", "json")
    assert json.loads(preview.stdout) == expected


def test_no_match_is_salts_message_and_exit_code(cluster: Cluster) -> None:
    done = cluster.salt("nobody*", "test.ping")
    assert done.returncode == 2
    assert done.stdout.strip() == (
        "No minions matched the target. No command was sent, no jid was assigned.")
    assert "ERROR: No return received" in done.stderr


def test_functions_return_what_salt_returns(cluster: Cluster) -> None:
    done = cluster.salt("minion1", "cmd.run", "echo hi; echo err >&2", "--out", "json")
    assert json_docs(done.stdout) == {"minion1": "hi\nerr"}
    done = cluster.salt("-L", "minion1,minion2", "grains.item", "os", "roles", "--out",
                        "json", "--static")
    assert json.loads(done.stdout) == {"minion1": {"os": "Debian", "roles": ["web"]},
                                       "minion2": {"os": "Ubuntu", "roles": ["db"]}}
    done = cluster.salt("minion2", "test.arg", "1", "two", "x=[1, 2]", "--out", "json")
    value = json_docs(done.stdout)["minion2"]
    assert value["args"] == [1, "two"]
    kwargs = value["kwargs"]
    assert kwargs["x"] == [1, 2]
    assert kwargs["__pub_fun"] == "test.arg" and kwargs["__pub_tgt"] == "minion2"
    assert kwargs["__pub_arg"] == [1, "two", {"__kwarg__": True, "x": [1, 2]}]
    assert {"__pub_jid", "__pub_user", "__pub_tgt_type", "__pub_ret"} <= set(kwargs)
    # A failing command: the minion's retcode, Salt's exit code and message.
    done = cluster.salt("minion3", "cmd.run", "exit 3")
    assert done.returncode == 1
    assert "ERROR: Minions returned with non-zero exit code" in done.stderr
    done = cluster.salt("minion3", "test.exception", "boom", "--out", "json")
    text = json_docs(done.stdout)["minion3"]
    assert text.startswith("The minion function caused an exception: Traceback")
    assert done.returncode == 1


def _batch_docs(lines: list[str]) -> dict[str, Any]:
    """The JSON documents of a batch run's returns: ``{minion: [return, retcode]}``, each
    with the jid of its job (Salt 3008 prints both beside the return)."""
    docs: dict[str, Any] = {}
    for line in lines:
        if line.startswith("{"):
            doc = json.loads(line)
            assert set(doc) - {"jid", "retcode"} and len(doc["jid"]) == 20
            [minion] = set(doc) - {"jid", "retcode"}
            docs[minion] = [doc[minion], doc["retcode"]]
    return docs


def test_batch_mode_runs_n_at_a_time(cluster: Cluster) -> None:
    done = cluster.salt("*", "test.echo", "hi", "-b", "2", "--out", "json", "--out-indent",
                        "-1", "-t", "10")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    starts = [line for line in lines if line.startswith("Executing run on ")]
    assert starts[0] == "Executing run on ['minion1', 'minion2']"
    assert starts[1:] == ["Executing run on ['minion3']"]
    assert _batch_docs(lines) == {m: ["hi", 0] for m in GRAINS}
    # the third minion starts only after one of the first two returned
    first = [i for i, line in enumerate(lines) if line.startswith('{"retcode"')][0]
    assert lines.index(starts[1]) > first
    done = cluster.salt("*", "cmd.run", "exit 4", "-b", "34%", "-t", "10")
    assert done.returncode == 4  # the largest retcode
    assert done.stdout.count("Executing run on") == 3
    done = cluster.salt("nobody*", "test.ping", "-b", "1")
    assert done.returncode == 2 and "ERROR: No return received" in done.stderr


def test_subset_runs_on_n_minions_that_have_the_function(cluster: Cluster) -> None:
    done = cluster.salt("*", "test.echo", "hi", "--subset", "2", "--out", "json", "--static")
    assert done.returncode == 0, done.stderr
    picked = json.loads(done.stdout)
    assert len(picked) == 2 and set(picked) < set(GRAINS)
    assert set(picked.values()) == {"hi"}
    done = cluster.salt("*", "nosuch.function", "--subset", "1")
    assert done.returncode == 2
    assert done.stdout.startswith("No minions matched the target.")


def test_a_job_longer_than_the_timeout_is_waited_for(cluster: Cluster) -> None:
    """Salt's -t: the wait goes on while the minion still runs the job (the master's
    default timeout is 5 s)."""
    done = cluster.salt("minion1", "test.sleep", "7")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "minion1:\n    True\n"


def test_batch_waits_for_each_sub_batch_and_prints_salts_blocks(cluster: Cluster) -> None:
    salt_output = pytest.importorskip("salt.output")
    salt_config = pytest.importorskip("salt.config")
    done = cluster.salt("-L", "minion1,minion2", "test.sleep", "2", "-b", "1", "-t", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    jids = [line.split()[-1] for line in done.stdout.splitlines()[:-1]
            if done.stdout.splitlines()[done.stdout.splitlines().index(line) - 1] == "jid:"]
    assert len(jids) == 2 and jids[0] == jids[1]  # Salt's batch: one job, one jid
    assert cluster.run_json("jobs.lookup_jid", jids[0]) == {"minion1": True, "minion2": True}
    opts = {**salt_config.DEFAULT_MASTER_OPTS, "color": False}
    expected = "".join(
        f"\nExecuting run on ['{minion}']\n\n" + salt_output.try_printout(
            {"retcode": 0, "jid": jid, minion: True}, "nested", opts) + "\n"
        for minion, jid in zip(["minion1", "minion2"], jids, strict=True))
    assert done.stdout == expected
    # --failhard: the first failure ends the batch; the exit code is its retcode.
    done = cluster.salt("-L", "minion1,minion2", "cmd.run", "sleep 1.5; exit 3", "-b", "1",
                        "--failhard", "-t", "1", "--out", "json", "--out-indent", "-1")
    assert done.returncode == 3
    assert done.stdout.count("Executing run on") == 1
    assert _batch_docs(done.stdout.splitlines()) == {"minion1": ["", 3]}
    assert "Batch run stopped due to failhard" in done.stderr
    # --batch-wait holds the slot after a return; everything is still printed.
    done = cluster.salt("-L", "minion1,minion2", "test.echo", "x", "-b", "1",
                        "--batch-wait", "1", "--out", "json", "--out-indent", "-1")
    assert done.returncode == 0
    assert _batch_docs(done.stdout.splitlines()) == {"minion1": ["x", 0], "minion2": ["x", 0]}


def test_doc_and_out_file(cluster: Cluster) -> None:
    done = cluster.salt("minion1", "-d", "test.echo")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("test.echo:\n") and "test.ping" not in done.stdout
    out = cluster.world.root / "out.json"
    done = cluster.salt("minion[12]", "test.ping", "--out", "json", "--out-file", str(out))
    assert done.returncode == 0 and done.stdout == ""
    assert json_docs(out.read_text()) == {"minion1": True, "minion2": True}
    done = cluster.salt("minion3", "test.ping", "--out", "json", "--out-file", str(out),
                        "--out-file-append")
    assert json_docs(out.read_text()) == dict.fromkeys(GRAINS, True)


def test_raetsalt_call_through_the_minion_daemon_and_local(cluster: Cluster) -> None:
    conf = cluster.confs["minion1"]
    done = cluster.world.cli("call", conf, "test.ping", "--out", "json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"local": True}
    done = cluster.world.cli("call", conf, "grains.item", "os")
    assert done.stdout == "local:\n    ----------\n    os:\n        Debian\n"
    done = cluster.world.cli("call", conf, "cmd.run", "exit 3", "--retcode-passthrough")
    assert done.returncode == 3
    assert cluster.world.cli("call", conf, "cmd.run", "exit 3").returncode == 1
    done = cluster.world.cli("call", conf, "nope.nothing")
    assert done.returncode == 255 and "'nope.nothing' is not available." in done.stderr
    assert cluster.world.cli("call", conf, "test.exception").returncode == 1
    done = cluster.world.cli("call", conf, "--local", "test.kwarg", "a=1", "--out", "json")
    assert json.loads(done.stdout)["local"]["__pub_tgt"] == "salt-call"
    # The daemon also sent its returns to the master, which stored them as jobs.
    while True:
        event = cluster.wait_event("salt/job/")
        if event["tag"].endswith("/ret/minion1") and event["data"]["fun"] == "test.exception":
            break
    jid = event["tag"].split("/")[2]
    assert cluster.run_json("jobs.list_job", jid)["Minions"] == ["minion1"]


def test_a_long_job_blocks_neither_other_jobs_nor_presence(cluster: Cluster) -> None:
    done = cluster.salt("minion1", "test.sleep", "10", "--async")
    assert done.returncode == 0 and done.stdout.startswith("Executed command with job ID: ")
    jid = done.stdout.split(": ")[1].strip()
    cluster.wait_event(f"salt/job/{jid}/new")
    done = cluster.salt("minion1", "test.ping", "--out", "json")
    assert json_docs(done.stdout) == {"minion1": True}
    # ...answered while the sleep still runs (it is still active below)
    assert cluster.run_json("manage.up") == ["minion1", "minion2", "minion3"]
    active = cluster.run_json("jobs.active")
    assert list(active) == [jid]
    entry = active[jid]
    assert entry["Function"] == "test.sleep" and entry["Arguments"] == [10]
    assert [list(r) for r in entry["Running"]] == [["minion1"]] and entry["Returned"] == []
    # saltutil.kill_job ends it; it then returns nothing, as in Salt.
    done = cluster.salt("minion1", "saltutil.kill_job", jid, "--out", "json")
    assert json_docs(done.stdout) == {"minion1": True}
    assert cluster.run_json("jobs.lookup_jid", jid) == {}


def test_returns_survive_a_master_restart(cluster: Cluster) -> None:
    done = cluster.salt("*", "test.echo", "kept", "-v")
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("Executing job with jid ")
    jid = first.rsplit(" ", 1)[1]
    old = cluster.master
    assert old.terminate() == 0
    cluster.master = cluster.world.start("master", cluster.master_conf)
    cluster.master.expect("serving on")
    try:
        assert cluster.run_json("jobs.lookup_jid", jid) == dict.fromkeys(GRAINS, "kept")
        listed = cluster.run_json("jobs.list_jobs", "search_function=test.echo")
        assert listed[jid]["Target"] == "*" and listed[jid]["Function"] == "test.echo"
        cluster.master.expect_each([f"minion {m} connected" for m in GRAINS], timeout=10.0)
    except AssertionError as exc:  # what the daemons said, to tell why
        raise AssertionError(f"{exc}\n{daemon_logs(old=old, new=cluster.master, **cluster.minions)}"
                             ) from None
    cluster.bus.destroy()
    cluster.bus = MasterEvent(load_node_config(cluster.master_conf, "master")["sock_dir"])


def test_a_stopped_minion_is_down_and_named(cluster: Cluster) -> None:
    assert cluster.run_json("manage.status") == {"up": sorted(GRAINS), "down": []}
    assert cluster.minions["minion3"].terminate() == 0
    while True:
        event = cluster.wait_event("salt/presence/change", timeout=30)
        if "minion3" in event["data"]["lost"]:
            break
    assert cluster.run_json("manage.down") == ["minion3"]
    assert cluster.run_json("manage.status") == {"up": ["minion1", "minion2"],
                                                 "down": ["minion3"]}
    started = time.monotonic()
    done = cluster.salt("*", "test.ping", "-t", "3")
    took = time.monotonic() - started
    assert done.returncode == 1, done.stdout
    assert "ERROR: Minions returned with non-zero exit code" in done.stderr
    assert "minion1:\n    True" in done.stdout and "minion2:\n    True" in done.stdout
    assert "minion3:\n    Minion did not return. [Not connected]" in done.stdout
    assert took >= 3.0  # it waited its timeout for the others


def test_a_job_for_a_stopped_minion_never_runs_when_it_comes_back(cluster: Cluster) -> None:
    """As once seen: ``cmd.run`` published while a minion is stopped ran 3 s (and 29 s)
    after it came back, although the CLI had printed ``[Not connected]``."""
    stale, later = cluster.world.root / "stale-run", cluster.world.root / "later-run"
    assert cluster.run_json("manage.down") == ["minion3"]  # stopped by the test above
    done = cluster.salt("minion3", "cmd.run", f"touch {stale}", "-t", "1")
    assert done.returncode == 1
    assert "minion3:\n    Minion did not return. [Not connected]" in done.stdout
    cluster.minions["minion3"] = cluster.world.start("minion", cluster.confs["minion3"])
    cluster.master.expect("minion minion3 connected", timeout=15.0)
    # Road messages to one minion are delivered in order, so a job queued for minion3
    # while it was away would reach it before this one (and start first).
    done = cluster.salt("minion3", "cmd.run", f"sleep 0.5; touch {later}", "-t", "15")
    assert done.returncode == 0, done.stdout + done.stderr
    assert later.exists() and not stale.exists()


def test_a_job_delivered_after_its_deadline_is_dropped_by_the_minion(cluster: Cluster) -> None:
    """A minion that is frozen (or cut off) while the master still counts it as connected
    gets the publication late, from the road's retransmissions: it must not run it."""
    frozen, later = cluster.world.root / "frozen-run", cluster.world.root / "after-thaw"
    minion = cluster.minions["minion2"]
    while cluster.bus.get_event(no_block=True, full=True) is not None:
        pass  # only a presence change that comes after the freeze counts below
    minion.popen.send_signal(signal.SIGSTOP)
    published = time.monotonic()
    try:
        done = cluster.salt("minion2", "cmd.run", f"touch {frozen}", "-t", "1")
        assert done.returncode == 1
        assert "minion2:\n    Minion did not return. [No response]" in done.stdout
        while "minion2" not in cluster.wait_event("salt/presence/change",
                                                  timeout=4 * ALIVE)["data"]["lost"]:
            pass
        # The master may count it lost within one alive period; the point of the test is
        # a job that arrives well after its deadline (1 s, plus the minion's 0.5 s
        # tolerance), so the minion stays frozen until then: a wait on time itself.
        while (left := published + 3.0 - time.monotonic()) > 0:
            time.sleep(left)
    finally:
        minion.popen.send_signal(signal.SIGCONT)
    line = minion.expect("dropped, not run", timeout=15.0)
    assert "(cmd.run)" in line and "its deadline passed" in line
    while "minion2" not in cluster.wait_event("salt/presence/change",
                                              timeout=4 * ALIVE)["data"]["new"]:
        pass
    done = cluster.salt("minion2", "cmd.run", f"sleep 0.5; touch {later}", "-t", "15")
    assert done.returncode == 0, done.stdout + done.stderr
    assert later.exists() and not frozen.exists()


def test_a_frozen_minion_is_reported_after_the_timeout(cluster: Cluster) -> None:
    """A minion that stops saying anything (frozen) is given up ``-t`` seconds after, in
    a plain run and in a batch, while the other's long job is waited for."""
    minion = cluster.minions["minion2"]
    while "minion2" not in cluster.run_json("manage.up"):
        cluster.wait_event("salt/presence/change", timeout=4 * ALIVE)
    minion.popen.send_signal(signal.SIGSTOP)
    try:
        done = cluster.salt("-L", "minion1,minion2", "test.sleep", "3", "-t", "1")
        assert done.returncode == 1
        assert "minion1:\n    True\n" in done.stdout
        assert "minion2:\n    Minion did not return. [No response]" in done.stdout
        done = cluster.salt("-L", "minion1,minion2", "test.sleep", "2", "-t", "1", "-b", "1")
        assert done.returncode == 1
        assert "minion1:\n    True\n" in done.stdout
        assert "Minion minion2 did not respond. No job will be sent." in done.stdout
    finally:
        minion.popen.send_signal(signal.SIGCONT)
