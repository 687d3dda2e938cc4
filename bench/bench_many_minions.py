"""``raetsalt '*' test.ping`` against many minions (issue 6, F).

    .venv/bin/python bench/bench_many_minions.py [--count 200] [--processes 4] [--runs 3]

Starts a real ``raetsalt-master`` (auto_accept) and ``--count`` real minions spread over
``--processes`` helper processes (``bench/many_minions.py``: each minion has its own
config, keep, road port and job service), waits until the master has heard every
minion's start event, then times the ``raetsalt '*' test.ping --out json --static``
command (process start included) until every minion's return is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rsm", dir="/tmp"))
    port = free_port()
    (root / "ma").mkdir()
    (root / "ma" / "master").write_text(
        f"root_dir: {root / 'ma'}\ninterface: 127.0.0.1\nid: benchmaster\n"
        f"raet_port: {port}\nauto_accept: true\ntimeout: 10\n"
    )
    tool = Path(sys.executable).with_name("raetsalt-master")
    master = subprocess.Popen([str(tool), "-c", str(root / "ma"), "-l", "warning"], text=True)
    helpers: list[subprocess.Popen[str]] = []
    try:
        sock_dir = load_node_config(root / "ma", "master")["sock_dir"]
        bus = None
        deadline = time.monotonic() + 20
        while bus is None:
            try:
                bus = MasterEvent(sock_dir)
            except Exception:  # noqa: BLE001 - the master is still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # polling for the master's socket to appear
        per = -(-args.count // args.processes)
        started_at = time.monotonic()
        for index in range(args.processes):
            count = min(per, args.count - index * per)
            if count <= 0:
                break
            helpers.append(subprocess.Popen(
                [sys.executable, str(HERE / "many_minions.py"), "--root", str(root / f"h{index}"),
                 "--master", f"127.0.0.1:{port}", "--count", str(count),
                 "--prefix", f"m{index}x"],
                stdout=subprocess.PIPE, text=True))
        # Connected = the master has the minion's grains (its first hello, which also fires
        # the start event).  A slow listener may miss bus events; the master's minion data
        # cache settles that.
        cached = Path(load_node_config(root / "ma", "master")["cachedir"]) / "minions"
        deadline = time.monotonic() + 120
        reported = 0
        while reported < args.count:
            if time.monotonic() > deadline:
                print(f"only {reported} of {args.count} minions connected", file=sys.stderr)
                return 1
            bus.get_event(wait=0.5, tag="salt/minion/")
            reported = len(list(cached.glob("*.json"))) if cached.is_dir() else 0
        print(f"{args.count} minions connected in {time.monotonic() - started_at:.1f} s")
        salt = Path(sys.executable).with_name("raetsalt")
        times = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            done = subprocess.run([str(salt), "-c", str(root / "ma"), "*", "test.ping",
                                   "--out", "json", "--static", "-t", "30"],
                                  capture_output=True, text=True)
            took = time.perf_counter() - t0
            returns = json.loads(done.stdout) if done.stdout.strip() else {}
            ok = sum(1 for v in returns.values() if v is True)
            times.append(took)
            print(f"raetsalt '*' test.ping: {ok}/{args.count} returned True in {took:.2f} s "
                  f"(exit {done.returncode}; target < 5 s)", flush=True)
        print(json.dumps({"bench": "many_minions", "minions": args.count,
                          "ping_seconds": [round(t, 3) for t in times]}))
        return 0
    finally:
        procs: list[subprocess.Popen[str]] = [*helpers, master]
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
