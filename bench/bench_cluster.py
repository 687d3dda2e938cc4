"""Several masters, one fleet: 3 masters (separate ``raetsalt-master`` processes, own
ports) and N simulated minions (``bench/many_minions.py``: real road stacks, one process)
listing all three with ``cluster_id`` set, so each minion holds the master a rendezvous
hash of its id picks.

    .venv/bin/python bench/bench_cluster.py [--count 300] [--runs 3] [--helpers 2]

Each run, from a cold start: every minion connected; ``raetsalt '*' test.ping`` from each
master (seconds, and returns: each master answers for the minions it holds, the sum is
the fleet); SIGKILL of the master holding the most minions; failover time (until every
minion holds a session again, read from the helpers' status files every 0.2 s); then
``'*' test.ping`` from each survivor (the sum must be the fleet again).  Per-master CPU
seconds over the run.  Prints each run and the medians.  The masters auto-accept (the
shared key store is not part of this measure: tests/store and tests/daemons cover it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_many_minions import cpu_seconds  # noqa: E402

NAMES = ("ca", "cb", "cc")


def start_master(root: Path, name: str) -> tuple[subprocess.Popen[str], int]:
    conf = root / name
    conf.mkdir()
    (conf / "master").write_text(
        f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: 0\n"
        "auto_accept: true\ntimeout: 30\nraet_alive_period: 2.0\n")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("raetsalt-master")), "-c", str(conf), "-l", "info"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"serving on 127\.0\.0\.1:(\d+)", line)
        if found:
            # the rest of its console is not read: send it nowhere
            threading_drain(proc)
            return proc, int(found.group(1))
    raise SystemExit(f"bench_cluster: master {name} did not start")


def threading_drain(proc: subprocess.Popen[str]) -> None:
    import threading

    def drain() -> None:
        assert proc.stderr is not None
        for _ in proc.stderr:
            pass

    threading.Thread(target=drain, daemon=True).start()


def status(files: list[Path]) -> dict[str, int]:
    total = {"count": 0, "connected": 0, "moves": 0}
    for path in files:
        try:
            part = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for key in total:
            total[key] += int(part.get(key, 0))
    return total


def ping_all(root: Path, name: str) -> tuple[float, int]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(root / name), "*", "test.ping",
         "--out", "json", "--static", "-t", "30"], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - start
    try:
        answers = json.loads(done.stdout or "{}")
    except ValueError:
        answers = {}
    return took, sum(1 for v in answers.values() if v is True)


def wait_connected(files: list[Path], count: int, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if status(files)["connected"] >= count:
            return time.monotonic() - start
        time.sleep(0.2)  # polling the helpers' status files (a measure, not a test)
    return None


def one_run(count: int, helpers: int) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="rsbc", dir="/tmp"))
    shm = Path(tempfile.mkdtemp(prefix="rsbc", dir="/dev/shm"))
    masters: dict[str, tuple[subprocess.Popen[str], int]] = {}
    procs: list[subprocess.Popen[str]] = []
    try:
        for name in NAMES:
            masters[name] = start_master(root, name)
        listed = ",".join(f"127.0.0.1:{port}" for _, port in masters.values())
        per = -(-count // helpers)
        files = []
        for index in range(helpers):
            n = min(per, count - index * per)
            if n <= 0:
                break
            path = shm / f"status{index}.json"
            files.append(path)
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "many_minions.py"), "--root", str(shm),
                 "--master", listed, "--extra", "cluster_id: fleet1", "--count", str(n),
                 "--prefix", f"c{index}x", "--inline-jobs", "--nice", "10",
                 "--status", str(path), "--alive-period", "2.0"],
                stdout=subprocess.DEVNULL, text=True))
        if wait_connected(files, count, 600) is None:
            raise SystemExit(f"bench_cluster: only {status(files)} connected")
        cpu0 = {n: cpu_seconds(p.pid) for n, (p, _) in masters.items()}
        result: dict[str, float] = {}
        held: dict[str, int] = {}
        slowest = 0.0
        for name in NAMES:
            took, returns = ping_all(root, name)
            held[name] = returns
            slowest = max(slowest, took)
            result[f"returns_{name}"] = returns
        result["publish_all_s"] = slowest
        result["returns_before"] = sum(held.values())
        victim = max(held, key=lambda n: held[n])
        proc, _port = masters.pop(victim)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        start = time.monotonic()
        moves = status(files)["moves"]
        back = None
        while time.monotonic() - start < 300:  # every moved minion holds a session again
            now = status(files)
            if now["moves"] - moves >= held[victim] and now["connected"] >= count:
                back = time.monotonic() - start
                break
            time.sleep(0.2)  # polling the helpers' status files (a measure, not a test)
        result["failover_s"] = -1.0 if back is None else back
        result["moved"] = held[victim]
        after = 0
        for name in masters:
            _took, returns = ping_all(root, name)
            after += returns
        result["returns_after"] = after
        for name, (p, _) in masters.items():
            result[f"cpu_{name}_s"] = cpu_seconds(p.pid) - cpu0[name]
        return result
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for p, _ in masters.values():
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--helpers", type=int, default=2)
    args = parser.parse_args()
    print(f"3 masters x {args.count} minions (cluster_id: rendezvous); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    runs = []
    for index in range(args.runs):
        result = one_run(args.count, args.helpers)
        runs.append(result)
        print(f"run {index + 1}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float)
                                               else f"{k} {v}" for k, v in result.items()))
    keys = ("publish_all_s", "returns_before", "failover_s", "moved", "returns_after")
    print("medians: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in keys))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
