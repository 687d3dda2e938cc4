"""Daemon figures: idle CPU of a connected minion, and the round trip of an
event fired on a minion's bus until it is seen on the master's bus, through both
daemons' flows and the road.

    .venv/bin/python bench/bench_daemons.py [--events 500] [--idle 10]

Starts a real ``raetsalt-master`` and ``raetsalt-minion`` (auto_accept) in a temporary
directory on 127.0.0.1, waits until the minion is connected, then measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent, MinionEvent


def start(node: str, confdir: Path) -> subprocess.Popen[str]:
    tool = Path(sys.executable).with_name(f"raetsalt-{node}")
    return subprocess.Popen(
        [str(tool), "-c", str(confdir), "-l", "info"], stderr=subprocess.PIPE, text=True
    )


def wait_line(proc: subprocess.Popen[str], fragment: str, timeout: float = 20.0) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if fragment in line:
            return line
    raise SystemExit(f"bench_daemons: no {fragment!r} from the daemon")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rsb", dir="/tmp"))
    (root / "ma").mkdir()
    (root / "ma" / "master").write_text(  # raet_port 0: the master binds a free port
        f"root_dir: {root / 'ma'}\ninterface: 127.0.0.1\nid: benchmaster\n"
        f"raet_port: 0\nauto_accept: true\n"
    )
    master = start("master", root / "ma")
    minion: subprocess.Popen[str] | None = None
    try:
        serving = wait_line(master, "serving on")
        port = int(serving.split("serving on 127.0.0.1:", 1)[1].split()[0])
        (root / "mi").mkdir()
        (root / "mi" / "minion").write_text(
            f"id: benchminion\nroot_dir: {root / 'mi'}\ninterface: 127.0.0.1\nraet_port: 0\n"
            f"master: 127.0.0.1:{port}\nexecution_mode: native\n"  # the transport, not Salt
        )
        minion = start("minion", root / "mi")
        wait_line(minion, "connected to the master")
        # Idle CPU of the connected minion (alive traffic only).
        before = cpu_seconds(minion.pid)
        time.sleep(args.idle)  # the measurement itself: a fixed idle window
        idle = (cpu_seconds(minion.pid) - before) / args.idle
        # Event round trip: minion bus -> minion daemon -> road -> master daemon -> master bus.
        master_opts = load_node_config(root / "ma", "master")
        minion_opts = load_node_config(root / "mi", "minion")
        listener = MasterEvent(master_opts["sock_dir"])
        emitter = MinionEvent(minion_opts)
        listener.get_event(wait=0.01, tag="bench/")  # subscribe before the first event
        times: list[float] = []
        lost = 0
        for n in range(args.events):
            started = time.perf_counter()
            emitter.fire_master({"n": n}, f"bench/{n}")
            event = listener.get_event(wait=2.0, tag=f"bench/{n}", full=True)
            if event is None:
                lost += 1
                continue
            times.append(time.perf_counter() - started)
        result = {
            "bench": "daemons",
            "minion_idle_cpu_percent": round(100 * idle, 2),
            "event_rtt_p50_ms": round(1000 * statistics.median(times), 3) if times else None,
            "event_rtt_p99_ms": round(1000 * sorted(times)[int(0.99 * (len(times) - 1))], 3)
            if times
            else None,
            "events": args.events,
            "lost": lost,
        }
        print(
            f"minion idle CPU over {args.idle:.0f} s: "
            f"{result['minion_idle_cpu_percent']} % (target < 2 %)"
        )
        print(
            f"event minion bus -> master bus: p50 {result['event_rtt_p50_ms']} ms, "
            f"p99 {result['event_rtt_p99_ms']} ms over {len(times)} events, {lost} lost "
            "(target p50 <= 2 ms)"
        )
        print(json.dumps(result))
        return 0 if times and not lost else 1
    finally:
        for proc in (minion, master):
            if proc is None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
