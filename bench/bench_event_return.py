"""``event_return`` throughput: events spooled and given to the built-in ``sqlite3``
returner, in the master's automation process's own classes (no bus).

    .venv/bin/python bench/bench_event_return.py [--events 50000]

The reader's side appends batches of 512 events to the spool (one sync per batch, as
the bus reader does); the sender gives them to SQLite in batches of ``--batch``.
Prints events/s from the first append to the last committed batch.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from raetsalt.daemon.eventreturn import EventReturn, event_returners


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=50000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rser", dir="/tmp"))
    try:
        opts = {"cachedir": str(root), "id": "m", "sock_dir": str(root),
                "event_return": "sqlite3", "sqlite3.database": str(root / "events.db"),
                "event_return_queue": args.batch}
        er = EventReturn(opts, event_returners(opts))
        started = time.monotonic()
        for first in range(0, args.events, 512):
            er.add([(f"salt/job/{n}/ret/minion{n % 100}",
                     {"id": f"minion{n % 100}", "return": True, "retcode": 0, "n": n})
                    for n in range(first, min(args.events, first + 512))])
        spooled = time.monotonic()
        done = threading.Event()
        while er.stats["returned"] < args.events:
            done.wait(0.01)  # polling the sender's counter
        took = time.monotonic() - started
        er.close()
        with sqlite3.connect(root / "events.db") as conn:
            rows = conn.execute("SELECT COUNT(*) FROM salt_events").fetchone()[0]
        print(f"event_return: {args.events} events spooled in {spooled - started:.2f} s, "
              f"in SQLite after {took:.2f} s = {args.events / took:,.0f} events/s "
              f"({rows} rows, batches of {args.batch})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
