"""``make bench``: run the benchmarks that exist so far (each prints its own table)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    ["bench_bus.py"],
    ["bench_road.py"],
    ["bench_wan.py"],
    ["bench_daemons.py"],
    ["bench_wakeup.py"],
    ["bench_reactor.py", "--events", "1000"],
    ["bench_event_return.py"],
    ["bench_many_minions.py", "--short"],  # the full table: bench_many_minions.py alone
]


def main() -> int:
    failed = 0
    for name in BENCHES:
        print(f"\n### {' '.join(name)}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / name[0]), *name[1:]])
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
