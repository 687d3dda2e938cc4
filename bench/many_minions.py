"""Many real minions in one process, for benchmarks: each has its own config, keep, road
port, manor yard and job service, exactly as ``raetsalt-minion`` builds them
(``open_node``, ``MinionLink``, ``MinionService``); one selector loop services them all.

    .venv/bin/python bench/many_minions.py --root DIR --master 127.0.0.1:PORT --count 200

Prints ``ready`` once every node is open and connecting; stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from raetsalt.config import minion_config
from raetsalt.daemon.jobs import MinionService
from raetsalt.daemon.service import MinionLink, ensure_dirs, open_node
from raetsalt.execution.grains import core_grains
from raetsalt.execution.loader import Loader


class Minion:
    def __init__(self, opts: dict[str, Any], loader: Loader, grains: dict[str, Any]) -> None:
        self.node = open_node(opts, "minion")
        self.link = MinionLink(self.node, opts)
        link = self.link
        self.jobs = MinionService(self.node, opts, lambda: link.connected,
                                  loader=loader, grains=grains)

    def service(self) -> None:
        events = self.jobs.handle(self.node.service_ready())
        if self.jobs.sent_road:
            self.jobs.sent_road = False
            events.extend(self.jobs.handle(self.node.service_ready()))
        self.link.handle(events)

    def timeout(self) -> float | None:
        waits = [w for w in (self.node.timeout(), self.jobs.timeout()) if w is not None]
        return min(waits) if waits else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--master", required=True, help="host:port of the master's road")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--prefix", default="mm")
    args = parser.parse_args()
    root = Path(args.root)
    loader = Loader()
    base = core_grains("x")  # detected once; every minion reports the same host facts
    minions: list[Minion] = []
    selector = selectors.DefaultSelector()
    for index in range(args.count):
        minion_id = f"{args.prefix}{index:04d}"
        confdir = root / minion_id
        confdir.mkdir(parents=True, exist_ok=True)
        (confdir / "minion").write_text(
            f"id: {minion_id}\nroot_dir: {confdir}\ninterface: 127.0.0.1\nraet_port: 0\n"
            f"master: {args.master}\nrandom_reauth_delay: 2.0\n"
            f"sock_dir: {root / 'sock'}\nexecution_mode: native\n"  # no Salt zygote each
        )
        opts = minion_config(confdir / "minion")
        ensure_dirs(opts)
        minion = Minion(opts, loader, {**base, "id": minion_id})
        minion.node.register(selector, minion)
        minion.jobs.register(selector, minion)
        minion.link.connect()
        minions.append(minion)
    stop = False
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    selector.register(wake_r, selectors.EVENT_READ, None)

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True
        try:
            wake_w.send(b"\0")
        except OSError:
            pass

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print("ready", flush=True)
    while not stop:
        waits = [(m.timeout(), m) for m in minions]
        known = [w for w, _ in waits if w is not None]
        started = time.monotonic()
        ready = selector.select(min(known) if known else 1.0)
        elapsed = time.monotonic() - started + 0.0005
        due = {id(m): m for w, m in waits if w is not None and w <= elapsed}
        for key, _events in ready:
            if key.data is not None:
                due[id(key.data)] = key.data
        for minion in due.values():
            minion.service()
    for minion in minions:
        minion.jobs.close()
        minion.node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
