"""``raetsalt-key -L`` over a keep of N minions: what an operator waits for.

    .venv/bin/python bench/bench_keys.py [--minions 10000] [--runs 5] [--keep-dir DIR]

Builds (once per DIR; a temp dir by default) a master's keep as a master of N accepted
minions leaves it: N role records and N remote records, plus a few pending, rejected and
denied keys, then runs ``raetsalt-key -L`` (a new process each time, as an operator
does, with its modules byte-compiled as an installed package has them) ``--runs`` times
and prints the median and the spread, and the interpreter's bare start-up for
comparison.  Target: 10,000 keys listed in at most 100 ms (salt-key reads
a file per key: about 10 s; its opt-in mmap key cache 5-10 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raetsalt.keep.records import (
    Acceptance,
    KeepWrite,
    LocalRecord,
    RemoteRecord,
    RoleRecord,
)
from raetsalt.keep.store import FileKeep


def _hex(index: int, salt: str) -> str:
    return (f"{salt}{index:08x}" * 8)[:64]


def build(root: Path, minions: int) -> Path:
    """A master config dir under ``root`` whose keep holds ``minions`` accepted minions."""
    confdir = root / "conf"
    confdir.mkdir(parents=True, exist_ok=True)
    (confdir / "master").write_text(f"root_dir: {root}\npki_dir: {root}/pki\nid: themaster\n")
    keep = FileKeep(root / "pki" / "road", durable=False)
    if keep.load_local() is not None:
        return confdir
    writes: list[KeepWrite] = []
    for index in range(minions):
        name = f"minion{index:05d}"
        state = Acceptance.ACCEPTED
        if index % 1000 == 1:
            state = Acceptance.PENDING
        elif index % 1000 == 2:
            state = Acceptance.REJECTED
        writes.append(KeepWrite.role(RoleRecord(name, state, _hex(index, "a"), _hex(index, "b"))))
        writes.append(KeepWrite.remote(RemoteRecord(
            name=name, role=name, uid=index + 2, fuid=2, ha=("10.0.0.1", 4510 + index % 50000),
            sid=1, main=False, kind=0, joined=True,
        )))
    keep.commit(writes)
    keep.save_local(LocalRecord(
        name="themaster", role="themaster", main=True, kind=0, sighex="1" * 64,
        prihex="2" * 64, ha=("127.0.0.1", 4506), puid=minions + 2,
    ))
    keep.commit([
        KeepWrite.denied(f"minion{index:05d}", [(_hex(index, "c"), _hex(index, "d"))])
        for index in range(3, minions, 1000)
    ])
    return confdir


def _time(command: list[str], runs: int, env: dict[str, str],
          cpu: list[float] | None = None) -> list[float]:
    """Wall time of each run; the CPU time (user + system) of each goes to ``cpu``: on a
    loaded machine it varies less than the wall time."""
    took = []
    for _ in range(runs):
        before = os.times()
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        took.append(time.perf_counter() - started)
        after = os.times()
        if cpu is not None:
            cpu.append(after.children_user - before.children_user
                       + after.children_system - before.children_system)
        if done.returncode != 0:
            raise SystemExit(f"{command}: exit {done.returncode}: {done.stderr}")
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minions", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep-dir", help="build (or reuse) the keep here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_keys.") as tmp:
        root = Path(args.keep_dir or tmp)
        started = time.perf_counter()
        confdir = build(root, args.minions)
        built = time.perf_counter() - started
        listing = [sys.executable, "-m", "raetsalt.cli.key", "-c", str(confdir), "-L",
                   "--out", "json"]
        # As installed: byte-compiled modules (pip compiles them; a checkout run with
        # PYTHONDONTWRITEBYTECODE would compile every module at every start).  The
        # first run below writes them under the temp dir.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        done = subprocess.run(listing, capture_output=True, text=True, check=True, env=env)
        count = sum(len(v) for v in json.loads(done.stdout).values())
        cpu: list[float] = []
        took = _time(listing, args.runs, env, cpu)
        bare = _time([sys.executable, "-c", "pass"], args.runs, env)
        print(json.dumps({
            "minions": args.minions,
            "keys_listed": count,
            "build_s": round(built, 2),
            "list_median_ms": round(statistics.median(took) * 1000, 1),
            "list_ms": [round(t * 1000, 1) for t in took],
            "list_cpu_median_ms": round(statistics.median(cpu) * 1000, 1),
            "load_average": [round(v, 2) for v in os.getloadavg()],
            "python_startup_median_ms": round(statistics.median(bare) * 1000, 1),
            "cpu_count": os.cpu_count(),
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
