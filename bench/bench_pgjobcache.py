"""The pgjsonb job cache's write rate: N returns saved as the master's loop does (a pass of
``--per-pass`` at a time), then how long until PostgreSQL holds them all, and what the
loop itself spent (save + commit_now).  Starts its own server like the tests
(tests/pg.py).  Medians of ``--runs``.

    .venv/bin/python bench/bench_pgjobcache.py [--returns 20000] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from pg import Postgres, server_bin  # noqa: E402

from raetsalt.store.pgjobcache import PgJobCache  # noqa: E402


def run(database: str, returns: int, per_pass: int) -> tuple[float, float]:
    spool = tempfile.mkdtemp(prefix="rsbs")
    cache = PgJobCache({"cluster_store": database}, spool)
    jid = "20261126120000000001"
    cache.save_load(jid, {"fun": "test.ping"})
    loop = 0.0
    started = time.perf_counter()
    for start in range(0, returns, per_pass):
        t = time.perf_counter()
        for n in range(start, min(returns, start + per_pass)):
            cache.save_return(jid, f"minion{n:06d}", {"return": True, "retcode": 0,
                                                      "success": True, "fun": "test.ping",
                                                      "fun_args": []})
        cache.commit_now()
        loop += time.perf_counter() - t
    assert cache.flush(600)
    total = time.perf_counter() - started
    cache.close()
    return total, loop


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--returns", type=int, default=20_000)
    parser.add_argument("--per-pass", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bindir = server_bin()
    if bindir is None:
        print("no PostgreSQL server binaries", file=sys.stderr)
        return 1
    server = Postgres(bindir, Path(tempfile.mkdtemp(prefix="rspg", dir="/tmp")))
    server.init()
    server.start()
    try:
        results = [run(server.create_database("bench"), args.returns, args.per_pass)
                   for _ in range(args.runs)]
    finally:
        server.stop()
    total = statistics.median(r[0] for r in results)
    loop = statistics.median(r[1] for r in results)
    print(f"{args.returns} returns: all in PostgreSQL after {total:.2f} s "
          f"({args.returns / total:,.0f}/s); the loop spent {loop * 1000:.0f} ms "
          f"({loop / args.returns * 1e6:.1f} us a return); medians of {args.runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
