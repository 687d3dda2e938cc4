"""``make bench``: run the benchmarks that exist so far (each prints its own table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    "bench_bus.py",
    "bench_road.py",
    "bench_wan.py",
    "bench_daemons.py",
    "bench_many_minions.py",
]


def main() -> int:
    failed = 0
    for name in BENCHES:
        print(f"\n### {name}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / name)])
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
