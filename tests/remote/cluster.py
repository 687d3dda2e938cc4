"""A real master and minions for the remote-execution, peer and ACL tests."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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
            event = wait_event(bus, "salt/minion/")
            if event["tag"].endswith("/start"):
                started.add(event["tag"].split("/")[2])
        yield Started(master_conf, master, minions, confs, bus)
    finally:
        bus.destroy()
