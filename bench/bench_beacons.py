"""Beacons at fleet scale: N simulated minions, a beacon event each every I seconds.

    .venv/bin/python bench/bench_beacons.py [--count 1000] [--every 10] [--beats 6]
        [--idle 20]

A real ``raetsalt-master`` and N minions in helper processes (``bench/many_minions.py``,
real road stacks at nice 10): once all are connected, the master's CPU is measured over
``--idle`` seconds, then every minion fires ``salt/beacon/<id>/bench/`` through its
manor's ``fire_master`` (as the scheduler process does with Salt's beacon events) every
``--every`` seconds, ``--beats`` times, staggered over the interval.  A listener on the
master's bus counts the events: received of sent, the delay from firing to the master's
bus (p50, p99, max), how many arrived later than two intervals, and the master's CPU
while they flowed (% of one core, and above idle).  The machine is shared: its load
average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_many_minions import Cluster, cpu_seconds, load  # noqa: E402

from raetsalt.config import load_node_config  # noqa: E402
from raetsalt.event import SaltEvent  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--beats", type=int, default=6)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--helpers", type=int, default=1)
    args = parser.parse_args()
    cluster = Cluster(args.count, helpers=args.helpers, alive_period=3.0)
    beacon_go = cluster.shm / "beacons-go"
    cluster.helper_args = ["--beacon-every", str(args.every), "--beacon-beats",
                           str(args.beats), "--beacon-go", str(beacon_go)]
    try:
        cluster.start_master()
        assert cluster.master is not None
        pid = cluster.master.pid
        cluster.start_helpers()
        cluster.go(600)
        took = cluster.wait_for("connected", 600)
        if took is None:
            raise SystemExit(f"not every minion connected: {cluster.status()}")
        sock_dir = load_node_config(cluster.master_dir, "master")["sock_dir"]
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(args.idle)  # the idle window being measured
        idle = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        # Subscribed now: a listener that let the connection's events pile up while the
        # idle window ran would be a stalled one (the bus bounds what it keeps for it).
        bus = SaltEvent("master", sock_dir, listen=True)
        beacon_go.touch()
        start = time.monotonic()
        cpu1 = cpu_seconds(pid)
        expected = args.count * args.beats
        delays: list[float] = []
        seen: set[tuple[str, int]] = set()
        window = args.every * args.beats
        deadline = start + window + 2 * args.every
        fired_end = None
        while time.monotonic() < deadline and len(seen) < expected:
            event = bus.get_event(wait=0.5, tag="salt/beacon/", full=True)
            if event is None:
                continue
            data = event["data"]
            seen.add((str(data.get("id")), int(data.get("beat", -1))))
            delays.append(time.time() - float(data["sent"]))
            if len(seen) == expected:
                fired_end = time.monotonic()
        end = fired_end or time.monotonic()
        busy = (cpu_seconds(pid) - cpu1) / (end - start)
        bus.destroy()
        delays.sort()
        row = {
            "minions": args.count, "every_s": args.every, "beats": args.beats,
            "received": len(seen), "sent": expected,
            "delay_p50_ms": round(1000 * statistics.median(delays), 1) if delays else None,
            "delay_p99_ms": round(1000 * delays[int(0.99 * (len(delays) - 1))], 1)
            if delays else None,
            "delay_max_ms": round(1000 * delays[-1], 1) if delays else None,
            "later_than_2_intervals": sum(1 for d in delays if d > 2 * args.every),
            "master_cpu_idle_pct": round(100 * idle, 1),
            "master_cpu_beacons_pct": round(100 * busy, 1),
            "master_cpu_for_beacons_pct": round(100 * (busy - idle), 1),
            "events_per_s": round(args.count / args.every, 1),
            "load": load(),
        }
        print(json.dumps(row))
        return 0 if len(seen) == expected and row["later_than_2_intervals"] == 0 else 1
    finally:
        cluster.stop()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
