"""``event_return`` throughput through a real master's bus, and its outage case.

    .venv/bin/python bench/bench_event_return.py [--events 60000] [--producers 2]
        [--runs 3] [--batch 2000] [--returner sqlite3|pgjsonb|both] [--outage 30]

Starts a real ``raetsalt-master`` with ``event_return`` (whitelist ``bench/*``) and
``--producers`` local processes, each a script on the master's ``sock_dir`` firing its
share of ``--events`` events with ``SaltEvent.fire_event`` (the lane path any local
script uses; each event ~100 bytes).  A run starts when the producers are told to go and
ends when the database holds every event of the run (counted every 20 ms): events/s =
events / that time.  Prints each run, the median of ``--runs`` and their spread, and the
load average.  ``pgjsonb`` needs PostgreSQL's server binaries (a throwaway server is
started as in the tests, tests/pg.py).

``--outage S`` (after the runs, for each returner): the database is unavailable for S
seconds (sqlite3: another process holds an exclusive lock on it; pgjsonb: the server is
stopped) while the producers fire ``--events``, and the master is restarted in the middle
of it; then the database comes back and the bench waits for every event: prints how many
were fired, stored and lost (0 is the target; the exit code is 1 otherwise).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from procstat import children, cpu_seconds, terminate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

PRODUCER = """
import sys
from raetsalt.event import SaltEvent
sock_dir, prefix, first, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
bus = SaltEvent("master", sock_dir)
bus.connect_pull()
print("ready", flush=True)
sys.stdin.readline()
refused = 0
for n in range(first, first + count):
    data = {"id": "minion%d" % (n % 100), "n": n, "return": True, "retcode": 0}
    while not bus.fire_event(data, "%s/%d" % (prefix, n), timeout=5000):
        refused += 1
print("done", refused, flush=True)
"""


class Master:
    def __init__(self, confdir: Path) -> None:
        tool = Path(sys.executable).with_name("raetsalt-master")
        self.proc = subprocess.Popen([str(tool), "-c", str(confdir), "-l", "info"],
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []

    def wait_line(self, fragment: str, timeout: float = 60.0) -> str:
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            if fragment in line:
                threading.Thread(target=self._drain, daemon=True).start()
                return line
        raise SystemExit(f"bench_event_return: no {fragment!r} from the master")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def stop(self) -> None:
        terminate(self.proc, 30)


def master_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the master and of its children (the automation process)."""
    return cpu_seconds(pid), sum(cpu_seconds(k) for k in children(pid))


def start_producers(sock_dir: str, prefix: str, first: int, events: int,
                    producers: int) -> list[subprocess.Popen[str]]:
    procs = []
    share = events // producers
    for p in range(producers):
        count = share if p < producers - 1 else events - share * (producers - 1)
        proc = subprocess.Popen([sys.executable, "-c", PRODUCER, sock_dir, prefix,
                                 str(first + p * share), str(count)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
    for proc in procs:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("bench_event_return: a producer did not start")
    return procs


def go(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(procs: list[subprocess.Popen[str]]) -> int:
    refused = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        refused += int(out.split()[-1]) if out.split() else 0
    return refused


def wait_count(count: Callable[[], int], want: int, timeout: float,
               stall: float = 20.0) -> tuple[float, int]:
    """Polls ``count()`` every 20 ms until it reaches ``want``, or for ``timeout`` s, or
    until it has not moved for ``stall`` s: (the time of the last change, the count)."""
    deadline = time.monotonic() + timeout
    got = count()
    moved = time.monotonic()
    while got < want and time.monotonic() < deadline and time.monotonic() - moved < stall:
        time.sleep(0.02)  # the bench's polling period
        now = count()
        if now != got:
            got, moved = now, time.monotonic()
    return (time.monotonic() if got >= want else moved), got


def sqlite_counter(db: Path, distinct: bool = False) -> Callable[[], int]:
    """Rows in ``salt_events`` (``distinct``: distinct tags, each event's being its own)."""
    what = "COUNT(DISTINCT tag)" if distinct else "COUNT(*)"

    def count() -> int:
        if not db.exists():
            return 0
        try:
            conn = sqlite3.connect(db, timeout=0.01)
            try:
                return int(conn.execute(f"SELECT {what} FROM salt_events").fetchone()[0])
            finally:
                conn.close()
        except sqlite3.OperationalError as exc:
            return 0 if "no such table" in str(exc) else -1  # -1: locked
    return count


def pg_counter(conninfo: str) -> Callable[[], int]:
    import psycopg

    held: list[psycopg.Connection[tuple[int]]] = []

    def count() -> int:
        try:
            if not held or held[0].closed or held[0].broken:
                held[:] = [psycopg.connect(conninfo, autocommit=True, connect_timeout=2)]
            row = held[0].execute("SELECT COUNT(*) FROM salt_events").fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
        except psycopg.OperationalError:
            return -1  # the server is stopped
        return int(row[0]) if row else 0
    return count


def master_conf(confdir: Path, returner: str, batch: int, extra: str) -> None:
    confdir.mkdir(parents=True, exist_ok=True)
    (confdir / "master").write_text(
        f"root_dir: {confdir}\ninterface: 127.0.0.1\nid: themaster\nraet_port: 0\n"
        f"event_return: {returner}\nevent_return_queue: {batch}\n"
        f"event_return_whitelist: ['bench/*']\n{extra}")


def throughput(root: Path, returner: str, args: argparse.Namespace,
               extra: str, counter: Callable[[], int]) -> list[float]:
    from raetsalt.config import load_node_config

    confdir = root / f"ma-{returner}"
    master_conf(confdir, returner, args.batch, extra)
    sock_dir = load_node_config(confdir, "master")["sock_dir"]
    master = Master(confdir)
    rates: list[float] = []
    try:
        master.wait_line("event_return listening on the master's bus")
        for run in range(args.runs):
            procs = start_producers(sock_dir, f"bench/{run}", run * args.events,
                                    args.events, args.producers)
            cpu = master_cpu(master.proc.pid)
            started = time.monotonic()
            go(procs)
            ended, got = wait_count(counter, (run + 1) * args.events, 300)
            spent = master_cpu(master.proc.pid)
            refused = finish(procs)
            took = ended - started
            rates.append(args.events / took)
            print(f"  {returner} run {run + 1}: {args.events} events in {took:.2f} s = "
                  f"{args.events / took:,.0f} events/s ({got - run * args.events} stored, "
                  f"{refused} fire retries; CPU: master {spent[0] - cpu[0]:.2f} s, "
                  f"automation process {spent[1] - cpu[1]:.2f} s; load average "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
            if got < (run + 1) * args.events:
                print("  events missing; the master's warnings:", flush=True)
                for line in master.lines:
                    if "WARN" in line or "ERROR" in line:
                        print("   ", line.rstrip(), flush=True)
    finally:
        master.stop()
    return rates


def outage(root: Path, returner: str, args: argparse.Namespace, extra: str,
           counter: Callable[[], int], take_down: Callable[[], None],
           bring_up: Callable[[], None]) -> int:
    """The database unavailable for ``args.outage`` s with a master restart in the middle;
    returns the number of events lost."""
    from raetsalt.config import load_node_config

    confdir = root / f"ma-outage-{returner}"
    master_conf(confdir, returner, args.batch, extra)
    sock_dir = load_node_config(confdir, "master")["sock_dir"]
    master = Master(confdir)
    fired = 0
    retries = 0
    lost = 0
    try:
        master.wait_line("event_return listening on the master's bus")
        before = max(counter(), 0)
        take_down()
        down = time.monotonic()
        per_phase = args.events // 2
        for phase in range(2):
            procs = start_producers(sock_dir, "bench/outage", fired, per_phase,
                                    args.producers)
            go(procs)
            retries += finish(procs)
            fired += per_phase
            if phase == 0:
                master.stop()  # a master restart during the outage
                master = Master(confdir)
                master.wait_line("event_return listening on the master's bus")
        rest = args.outage - (time.monotonic() - down)
        if rest > 0:
            time.sleep(rest)  # the rest of the outage
        bring_up()
        up = time.monotonic()
        failed = sum(f"returner {returner} failed" in line for line in master.lines)
        print(f"  {returner} down for {up - down:.1f} s with a master restart; {fired} "
              f"events fired meanwhile ({retries} fire retries; {failed} failure line(s) logged "
              "since the restart)",
              flush=True)
        ended, got = wait_count(counter, before + fired, 300)
        lost = before + fired - got
        print(f"  after the database came back: all in {ended - up:.2f} s; "
              f"{got - before} rows for {fired} events: lost {max(lost, 0)}", flush=True)
    finally:
        master.stop()
    return max(lost, 0)


def summary(name: str, rates: list[float]) -> None:
    if not rates:
        return
    print(f"event_return {name} through the master's bus: median "
          f"{statistics.median(rates):,.0f} events/s (runs: "
          f"{', '.join(f'{r:,.0f}' for r in rates)}; spread {min(rates):,.0f}-"
          f"{max(rates):,.0f})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=60000)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--returner", choices=("sqlite3", "pgjsonb", "both"),
                        default="sqlite3")
    parser.add_argument("--outage", type=float, default=0.0,
                        help="seconds of database outage to test (0: none)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rser", dir="/tmp"))
    print(f"({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"{args.producers} producer processes, batches of {args.batch})", flush=True)
    lost = 0
    try:
        if args.returner in ("sqlite3", "both"):
            db = root / "events.db"
            summary("sqlite3", throughput(root, "sqlite3", args,
                                          f"sqlite3.database: {db}\n", sqlite_counter(db)))
            if args.outage > 0:
                down_db = root / "outage.db"
                locker = sqlite3.connect(down_db, isolation_level=None)
                lost += outage(root, "sqlite3", args,
                               f"sqlite3.database: {down_db}\nsqlite3.timeout: 0.05\n",
                               sqlite_counter(down_db, distinct=True),
                               # another process holds an exclusive lock on it
                               lambda: locker.execute("BEGIN EXCLUSIVE"),
                               lambda: locker.execute("ROLLBACK"))
        if args.returner in ("pgjsonb", "both"):
            from pg import Postgres, server_bin

            bindir = server_bin()
            if bindir is None:
                print("pgjsonb: skipped, PostgreSQL's server binaries are not installed")
            else:
                server = Postgres(bindir, Path(tempfile.mkdtemp(prefix="rspg", dir="/tmp")))
                server.init()
                server.start()
                try:
                    conninfo = server.create_database("bench")
                    summary("pgjsonb", throughput(
                        root, "pgjsonb", args, f"cluster_store: '{conninfo}'\n",
                        pg_counter(conninfo)))
                    if args.outage > 0:
                        other = server.create_database("outage")
                        lost += outage(root, "pgjsonb", args,
                                       f"cluster_store: '{other}'\n", pg_counter(other),
                                       server.stop, server.start)  # the server stopped
                finally:
                    if server.running():
                        server.stop()
                    shutil.rmtree(server.root, ignore_errors=True)
        print(f"(load average {os.getloadavg()[0]:.1f} at the end)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
