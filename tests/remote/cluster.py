"""A real master and minions for the remote-execution, peer and ACL tests."""

from __future__ import annotations

import io
import json
import os
import pwd
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemons.helpers import Daemon, World

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent

ALIVE = 1.5
"""raet_alive_period of the test clusters."""


def json_docs(text: str) -> dict[str, Any]:
    """Merge the JSON documents raetsalt prints (one per minion without --static)."""
    decoder = json.JSONDecoder()
    merged: dict[str, Any] = {}
    index = 0
    while index < len(text):
        if text[index].isspace():
            index += 1
            continue
        doc, index = decoder.raw_decode(text, index)
        merged.update(doc)
    return merged


def wait_event(bus: MasterEvent, tag: str, timeout: float = 10.0) -> dict[str, Any]:
    """The next event on the master bus whose tag starts with ``tag``."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        event = bus.get_event(wait=remaining, tag=tag, full=True)
        if event is not None:
            return event  # type: ignore[no-any-return]
    raise AssertionError(f"no event {tag!r} within {timeout} s")


@dataclass
class Started:
    master_conf: Path
    master: Daemon
    minions: dict[str, Daemon]
    confs: dict[str, Path]
    bus: MasterEvent


@contextmanager
def started_cluster(world: World, master_extra: str, grains: dict[str, str],
                    minion_d: dict[str, str] | None = None) -> Iterator[Started]:
    """Start a master (``master_extra`` config) and one minion per ``grains`` entry and
    wait until every minion has reported in (its ``salt/minion/<id>/start`` event).
    ``minion_d`` gives a minion more config in ``minion.d/`` (which overrides the base
    file, ``execution_mode`` for example)."""
    master_conf = world.master_dir(master_extra, alive=ALIVE)
    master = world.start("master", master_conf)
    master.expect("serving on")
    bus = MasterEvent(load_node_config(master_conf, "master")["sock_dir"])
    try:
        confs = {
            name: world.minion_dir(name, name, f"grains:\n  {text}\n", alive=ALIVE)
            for name, text in grains.items()
        }
        for name, text in (minion_d or {}).items():
            (confs[name] / "minion.d").mkdir(exist_ok=True)
            (confs[name] / "minion.d" / "test.conf").write_text(text)
        minions = {name: world.start("minion", conf) for name, conf in confs.items()}
        started: set[str] = set()
        while started != set(grains):
            event = wait_event(bus, "salt/minion/", timeout=60.0)  # a loaded machine
            if event["tag"].endswith("/start"):
                started.add(event["tag"].split("/")[2])
        yield Started(master_conf, master, minions, confs, bus)
    finally:
        bus.destroy()


def run_as(user: str, home: str, main: Callable[[list[str]], int], argv: list[str]
           ) -> tuple[int, str, str]:
    """Run a CLI's ``main(argv)`` in a child forked as ``user`` (root only); returns
    (exit code, stdout, stderr)."""
    info = pwd.getpwnam(user)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns
        code = 99
        try:
            os.close(out_r)
            os.close(err_r)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
            os.setgroups([])
            os.setgid(info.pw_gid)
            os.setuid(info.pw_uid)
            os.environ["HOME"] = home
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        stdout = out.read().decode()
        stderr = err.read().decode()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stdout, stderr


def daemon_logs(lines: int = 40, **daemons: Daemon) -> str:
    """The last ``lines`` log lines of each daemon, named, for a failure's message."""
    return "\n".join(f"--- {name}:\n" + "\n".join(daemon.drain()[-lines:])
                     for name, daemon in daemons.items())
