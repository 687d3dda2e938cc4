"""Reactor throughput and the bus latency other listeners see meanwhile.

    .venv/bin/python bench/bench_reactor.py [--events 2000] [--probes 200]

Starts a real ``raetsalt-master`` (auto_accept) with one reactor entry, ``bench/*`` ->
an SLS file (jinja|yaml, Salt's renderers) whose reaction publishes ``test.arg`` to the
minion ``ghost`` with the event's number and send time.  ``ghost`` joined once and then
stopped, so each reaction goes the whole way through the master (publisher ACL, job id,
job cache, ``salt/job/<jid>/new`` on the bus) without a minion process running jobs.

1. Throughput: the bench fires ``--events`` events on the master's bus as fast as it
   can and counts their ``salt/job/<jid>/new`` events: events/s matched, rendered and
   dispatched = events / (last new - first fire), and the latency fire -> job (median,
   p99).
2. Bus latency for another listener: a probe listener on ``probe``; ``--probes`` probe
   events (one every 5 ms) while the reactor is idle, then again while it works through
   a second burst.  Prints the median and p99 of both.

Needs the salt extra (the reactor renders with Salt's renderers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from procstat import children, cpu_seconds, terminate

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent, SaltEvent

SLS = """\
bench_job:
  local.test.arg:
    - tgt: ghost
    - args:
      - {{ data['n'] }}
      - {{ data['t'] }}
"""


class Daemon:
    def __init__(self, node: str, confdir: Path) -> None:
        tool = Path(sys.executable).with_name(f"raetsalt-{node}")
        self.proc = subprocess.Popen([str(tool), "-c", str(confdir), "-l", "info"],
                                     stderr=subprocess.PIPE, text=True)

    def wait_line(self, *fragments: str, timeout: float = 60.0) -> dict[str, str]:
        """The first line holding each fragment (in any order); then the rest of the
        daemon's output is drained in the background."""
        assert self.proc.stderr is not None
        found: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            found.update({f: line for f in fragments if f in line and f not in found})
            if len(found) == len(fragments):
                threading.Thread(target=self._drain, daemon=True).start()
                return found
        raise SystemExit(f"bench_reactor: no {fragments!r} from the daemon")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    def stop(self) -> None:
        terminate(self.proc, 20)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def count_jobs(sock_dir: str, want: int, out: dict[str, Any], ready: threading.Event) -> None:
    bus = MasterEvent(sock_dir)
    ready.set()
    latencies: list[float] = []
    deadline = time.monotonic() + 120
    while len(latencies) < want and time.monotonic() < deadline:
        event = bus.get_event(wait=1, tag="salt/job/", full=True)
        if event is None or not str(event["tag"]).endswith("/new"):
            continue
        arg = event["data"].get("arg") or []
        if len(arg) == 2:
            latencies.append(time.monotonic() - float(arg[1]))
    out["last"] = time.monotonic()
    out["latencies"] = latencies
    bus.destroy()


def probe(sock_dir: str, count: int) -> list[float]:
    """Bus latency of ``count`` probe events (one every 5 ms) to a listener."""
    listener = MasterEvent(sock_dir)
    emitter = SaltEvent("master", sock_dir)
    got: list[float] = []
    done = threading.Event()

    def listen() -> None:
        while len(got) < count:
            data = listener.get_event(wait=5, tag="probe")
            if data is None:
                break
            got.append(time.monotonic() - float(data["t"]))
        done.set()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    for _ in range(count):
        emitter.fire_event({"t": time.monotonic()}, "probe")
        time.sleep(0.005)  # the probe rate, not synchronisation
    done.wait(30)
    listener.destroy()
    emitter.destroy()
    return got


def burst(sock_dir: str, count: int, first: int) -> float:
    emitter = SaltEvent("master", sock_dir)
    started = time.monotonic()
    for n in range(first, first + count):
        emitter.fire_event({"n": n, "t": time.monotonic()}, f"bench/{n}")
    emitter.destroy()
    return started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args()
    try:
        import salt.template  # noqa: F401
    except ImportError:
        print("bench_reactor: needs the salt extra (Salt's renderers)")
        return 0
    root = Path(tempfile.mkdtemp(prefix="rsb", dir="/tmp"))
    daemons: list[Daemon] = []
    try:
        (root / "bench.sls").write_text(SLS)
        master_dir, ghost_dir = root / "ma", root / "gh"
        master_dir.mkdir()
        ghost_dir.mkdir()
        (master_dir / "master").write_text(
            f"root_dir: {master_dir}\ninterface: 127.0.0.1\nid: themaster\n"
            f"raet_port: 0\nauto_accept: true\n"
            f"reactor:\n  - 'bench/*':\n    - {root}/bench.sls\n")
        master = Daemon("master", master_dir)
        daemons.append(master)
        lines = master.wait_line("serving on", "reactor listening on the master's bus")
        port = int(lines["serving on"].split("serving on 127.0.0.1:", 1)[1].split()[0])
        (ghost_dir / "minion").write_text(
            f"id: ghost\nroot_dir: {ghost_dir}\ninterface: 127.0.0.1\nraet_port: 0\n"
            f"master: 127.0.0.1:{port}\nexecution_mode: native\n")
        ghost = Daemon("minion", ghost_dir)
        ghost.wait_line("connected to the master")
        ghost.stop()
        sock_dir = load_node_config(master_dir, "master")["sock_dir"]

        idle = probe(sock_dir, args.probes)

        out: dict[str, Any] = {}
        ready = threading.Event()
        counter = threading.Thread(target=count_jobs, args=(sock_dir, args.events, out, ready))
        counter.start()
        ready.wait(10)
        started = burst(sock_dir, args.events, 0)
        counter.join()
        took = out["last"] - started
        latencies = out["latencies"]
        print(f"reactor: {len(latencies)}/{args.events} events matched, rendered and "
              f"dispatched in {took:.2f} s = {len(latencies) / took:.0f} events/s; "
              f"fire -> job published: median {statistics.median(latencies) * 1000:.1f} ms, "
              f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms (queueing included)")

        master_pid = master.proc.pid
        child_pids = children(master_pid)
        before = (cpu_seconds(master_pid), sum(cpu_seconds(c) for c in child_pids))
        busy_started = time.monotonic()
        out2: dict[str, Any] = {}
        ready2 = threading.Event()
        counter2 = threading.Thread(target=count_jobs,
                                    args=(sock_dir, args.events, out2, ready2))
        counter2.start()
        ready2.wait(10)
        sender = threading.Thread(target=burst, args=(sock_dir, args.events, args.events))
        sender.start()
        busy = probe(sock_dir, args.probes)
        sender.join()
        counter2.join()
        busy_took = time.monotonic() - busy_started
        after = (cpu_seconds(master_pid), sum(cpu_seconds(c) for c in child_pids))
        for name, values in (("idle reactor", idle), ("busy reactor", busy)):
            if values:
                print(f"bus latency to another listener, {name}: median "
                      f"{statistics.median(values) * 1000:.2f} ms, p99 "
                      f"{percentile(values, 0.99) * 1000:.2f} ms ({len(values)} probes)")
        print(f"(second burst: {len(out2['latencies'])}/{args.events} dispatched in "
              f"{busy_took:.1f} s; CPU meanwhile: master {after[0] - before[0]:.2f} s, "
              f"reactor process {after[1] - before[1]:.2f} s; {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f})")
    finally:
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
