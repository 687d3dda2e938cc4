"""``raetsalt-event listen`` and ``fire`` as separate processes."""

from __future__ import annotations

import json
import os

from .helpers import Proc, start_bus


def test_cli_listen_and_fire(procs: list[Proc], short_dir: str) -> None:
    sock_dir = os.path.join(short_dir, "s")
    confdir = os.path.join(short_dir, "etc")
    os.makedirs(confdir)
    with open(os.path.join(confdir, "minion"), "w") as handle:
        handle.write(f"id: m1\nsock_dir: {sock_dir}\n")
    start_bus(procs, "minion", sock_dir, "m1")
    listen = Proc(["-m", "raetsalt.cli.event", "listen", "--minion", "-c", confdir,
                   "--tag", "app/*/done", "--match-type", "fnmatch", "--out", "json"])
    procs.append(listen)
    # The listener subscribes before its first read; fire until it has surely subscribed.
    fire_args = ["-m", "raetsalt.cli.event", "fire", "-c", confdir]
    for attempt in range(20):
        skipped = Proc([*fire_args, "app/x/started", json.dumps({"n": attempt})])
        procs.append(skipped)
        assert skipped.wait(10) == 0
        fire = Proc([*fire_args, "app/x/done", json.dumps({"n": attempt})])
        procs.append(fire)
        assert fire.wait(10) == 0
        line = listen.readline(0.5)
        if line is not None:
            break
    assert line is not None
    event = json.loads(line)
    assert event["tag"] == "app/x/done" and event["data"]["n"] >= 0 and "_stamp" in event["data"]


def test_cli_fire_without_bus_fails(procs: list[Proc], short_dir: str) -> None:
    fire = Proc(["-m", "raetsalt.cli.event", "fire", "--master", "--sock-dir", short_dir,
                 "t", "{}"])
    procs.append(fire)
    assert fire.wait(10) == 1
