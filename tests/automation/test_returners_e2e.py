"""Returners on real daemons: the event-bus seed's ``--return=master_bus --tag=monitoring``
example with the seed's own master-bus listener, ``--return_kwargs``, the built-in
``sqlite3`` returner, and a returner that fails (logged on the minion, the job's return
still reaches the CLI)."""

from __future__ import annotations

import ast
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bus.helpers import Proc
from bus.test_blog_scripts import LISTEN_MASTER
from daemons.helpers import Daemon, World, make_world

from raetsalt.config import load_node_config

pytestmark = pytest.mark.integration

MINIONS = ("minion1", "minion2")
SALTY = "salty"
"""A minion running Salt's loader (``execution_mode: salt``) when Salt is installed."""


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[World, dict[str, Daemon]]]:
    with make_world() as world:
        master = world.start("master", world.master_dir("auto_accept: true\n"))
        master.expect("serving on")
        db = world.root / "returns.db"
        minions = {name: world.start("minion", world.minion_dir(
            name, name, f"sqlite3.database: {db}\nprofile1.sqlite3.database: {db}.p1\n"))
            for name in MINIONS}
        for minion in minions.values():
            minion.expect("connected to the master themaster", timeout=10.0)
        try:
            import salt  # noqa: F401
        except ImportError:
            pass
        else:
            salty = world.minion_dir(SALTY, SALTY, f"rawfile_json.filename: {world.root}/raw\n")
            # The tuning's native mode is replaced: this one runs Salt's loader.
            text = (salty / "minion").read_text().replace("execution_mode: native",
                                                          "execution_mode: salt")
            (salty / "minion").write_text(text)
            minions[SALTY] = world.start("minion", salty)
            minions[SALTY].expect("connected to the master themaster", timeout=30.0)
        yield world, minions


def _received(proc: Proc) -> dict[str, Any]:
    line = proc.readline(30.0)
    assert line is not None, "the listener printed nothing"
    return dict(ast.literal_eval(line))


def _listener(world: World, name: str, tag: str) -> Proc:
    sock_dir = load_node_config(world.root / "ma", "master")["sock_dir"]
    proc = world.script(name, LISTEN_MASTER.format(sock_dir=sock_dir, tag=tag))
    proc.expect(f"Listening for events tagged '{tag}' on Salt Master bus.")
    return proc


def test_the_seed_example_reaches_a_master_bus_listener(
        fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, _ = fleet
    listener = _listener(world, "monitor.py", "monitoring")
    done = world.cli("salt", world.root / "ma", "-L", ",".join(MINIONS), "--return=master_bus",
                     "--tag=monitoring",
                     "cmd.run_all", "echo procs ok", "--out", "json", "-t", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    got = {}
    for _ in MINIONS:
        event = _received(listener)
        ret = event["data"]
        got[event["id"]] = ret
        assert ret["id"] == event["id"] and ret["fun"] == "cmd.run_all"
        assert ret["fun_args"] == ["echo procs ok"] and ret["success"] is True
        assert ret["return"]["stdout"] == "procs ok" and ret["return"]["retcode"] == 0
        assert ret["ret_kwargs"] == {"tag": "monitoring"}
    assert sorted(got) == sorted(MINIONS)
    assert len({r["jid"] for r in got.values()}) == 1
    # The CLI still got every return itself.
    printed = json.loads("[" + done.stdout.replace("}\n{", "},\n{") + "]")
    assert {m for doc in printed for m in doc} == set(MINIONS)


def test_return_kwargs_names_the_tag_and_only_the_targeted_minion_returns(
        fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, _ = fleet
    listener = _listener(world, "nagios.py", "nagios/")
    done = world.cli("salt", world.root / "ma", "minion2", "--return", "master_bus",
                     "--return_kwargs", '{"tag": "nagios/check"}', "test.echo", "hello",
                     "-t", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    event = _received(listener)
    assert event["tag"] == "nagios/check" and event["id"] == "minion2"
    assert event["data"]["return"] == "hello"
    assert listener.readline(0.5) is None  # minion1 was not targeted


def test_sqlite3_returner_and_profiles(fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, _ = fleet
    done = world.cli("salt", world.root / "ma", "-L", ",".join(MINIONS), "--return", "sqlite3",
                     "test.echo",
                     "stored", "-t", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _rows(world.root / "returns.db")
    assert sorted(r[2] for r in rows) == sorted(MINIONS)
    assert {(r[0], json.loads(r[5]), r[6]) for r in rows} == {("test.echo", "stored", "True")}
    done = world.cli("salt", world.root / "ma", "minion1", "--return", "sqlite3",
                     "--return_config", "profile1", "test.ping", "-t", "30")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [r[2] for r in _rows(Path(f"{world.root / 'returns.db'}.p1"))] == ["minion1"]


def _rows(path: Path) -> list[tuple[Any, ...]]:
    # The returner runs after the job's return left for the master: poll the database
    # itself for the rows.
    deadline = time.monotonic() + 30
    while True:
        rows: list[tuple[Any, ...]] = []
        if path.exists():
            with sqlite3.connect(path) as conn:
                try:
                    rows = conn.execute("SELECT * FROM salt_returns").fetchall()
                except sqlite3.OperationalError:
                    rows = []
        if rows and (len(rows) >= 2 or "p1" in path.name) or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_a_failing_returner_is_logged_and_the_return_still_arrives(
        fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, minions = fleet
    done = world.cli("salt", world.root / "ma", "minion1", "--return", "no_such_returner",
                     "test.ping", "--out", "json", "-t", "30")
    assert done.returncode == 0 and json.loads(done.stdout) == {"minion1": True}
    line = minions["minion1"].expect("returner no_such_returner failed for job", timeout=30)
    assert "no_such_returner" in line


def test_bad_return_kwargs_is_a_usage_error(fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, _ = fleet
    done = world.cli("salt", world.root / "ma", "*", "--return", "master_bus",
                     "--return_kwargs", "[1, 2]", "test.ping")
    assert done.returncode == 64 and "--return_kwargs must be a mapping" in done.stderr


def test_salts_returners_through_salts_loader(fleet: tuple[World, dict[str, Daemon]]) -> None:
    pytest.importorskip("salt")
    world, _ = fleet
    done = world.cli("salt", world.root / "ma", SALTY, "--return", "rawfile_json,master_bus",
                     "--tag", "salty/done", "test.echo", "via salt", "-t", "60", timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    raw = world.root / "raw"
    deadline = time.monotonic() + 30
    while not raw.exists() or not raw.read_text().strip():
        assert time.monotonic() < deadline, "Salt's rawfile_json returner wrote nothing"
        time.sleep(0.05)
    record = json.loads(raw.read_text().splitlines()[0])
    assert record["id"] == SALTY and record["return"] == "via salt"
    assert record["fun"] == "test.echo" and record["ret_kwargs"] == {"tag": "salty/done"}


CLIENT_SCRIPT = """\
import json, sys
from raetsalt.config import load_node_config
from raetsalt.clients import LocalClient, RunnerClient, WheelClient

opts = load_node_config(sys.argv[1], "master")
local = LocalClient(opts)
out = {
    "jid": local.cmd_async("minion1", "test.ping"),
    "nomatch": local.cmd_async("nobody", "test.ping"),
    "cmd": local.cmd("minion*", "test.arg", ["a"], kwarg={"k": 1}, timeout=30),
    "up": RunnerClient(opts).cmd("manage.up"),
    "keys": WheelClient(opts).cmd("key.list_all"),
}
print(json.dumps(out))
"""


def test_salts_client_api_from_a_plain_script(fleet: tuple[World, dict[str, Daemon]]) -> None:
    world, _ = fleet
    script = world.root / "client.py"
    script.write_text(CLIENT_SCRIPT)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(script), str(world.root / "ma")],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert len(out["jid"]) == 20 and out["nomatch"] == ""
    assert set(out["cmd"]) == set(MINIONS)
    assert out["cmd"]["minion1"]["args"] == ["a"] and out["cmd"]["minion1"]["kwargs"]["k"] == 1
    assert set(MINIONS) <= set(out["up"]) and set(MINIONS) <= set(out["keys"]["minions"])
