"""Several masters, one fleet: a cluster of 3 masters (separate ``raetsalt-master``
processes, own ports, ``cluster_id`` with a ``cluster_store`` on a PostgreSQL server this
benchmark starts, ``cluster_pki_dir`` and ``cluster_peers``) and N simulated minions
(``bench/many_minions.py``: real road stacks, one process per helper) listing all three
with ``cluster_id`` set, so each minion holds the master a rendezvous hash of its id
picks.

    .venv/bin/python bench/bench_cluster.py [--count 1000] [--runs 3] [--helpers 2]

Each run, from a cold start: every minion connected; ``raetsalt '*' test.ping`` from each
master (seconds and returns: every master answers for the whole fleet, through the
masters holding the minions); revocation latency (``raetsalt-key -d`` on one master of a
minion another master holds, until that master ends its session: from the command's
start, and from the deciding master's log line); each master's CPU while idle and while
a job a second (``test.ping`` to ten minions spread over the masters, published on the
first master) runs for ``--load-seconds``; SIGKILL of the master holding the most
minions; failover time (until every minion holds a session again, read from the helpers'
status files every 0.2 s); ``--freeze``: the first helper stopped that long, so the
masters' probes of its minions fail and they answer again on the same sessions (a starved
machine); then ``'*' test.ping`` from each survivor, again until the whole fleet answers
(90 s at most; ``--logs``: which minions a survivor still misses, which master holds
each, and the registry's row).  Prints each run and the medians.  The masters
auto-accept.

At 3,000 minions (``--count 3000 --helpers 3 --alive-period 5 --wait 600``) the minions
need CPU to connect: on a loaded 2-core machine they may not all connect.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_many_minions import cpu_seconds  # noqa: E402

sys.path.insert(0, str(HERE.parent / "tests"))
NAMES = ("ca", "cb", "cc")
FREEZE = [0.0]
"""``--freeze``: seconds the first helper is stopped after the failover."""
ALIVE = [2.0, 0.0]
"""raet_alive_period of the masters and minions (``--alive-period``) and the minions'
master_alive_interval (``--wait``)."""
LOG_LINES: dict[str, list[tuple[float, str]]] = {}
"""Each master's log lines with the time they were read (for the revocation latency)."""
LOG_DIR: list[Path] = []
"""``--logs``: the directory each master's whole log is copied to (and the minions'
status files name the master each minion holds, for the diagnosis of a shortfall)."""


def free_port() -> int:
    """A port for a master's cluster road (the peers must know it before it starts; a
    benchmark may race for it: a master that cannot bind it fails its run)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_master(root: Path, name: str, cluster: str) -> tuple[subprocess.Popen[str], int]:
    conf = root / name
    conf.mkdir()
    (conf / "master").write_text(
        f"root_dir: {conf}\ninterface: 127.0.0.1\nid: {name}\nraet_port: 0\n"
        f"auto_accept: true\ntimeout: 30\nraet_alive_period: {ALIVE[0]}\n{cluster}")
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("raetsalt-master")), "-c", str(conf), "-l", "info"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"serving on 127\.0\.0\.1:(\d+)", line)
        if found:
            threading_drain(proc, name)
            return proc, int(found.group(1))
    raise SystemExit(f"bench_cluster: master {name} did not start")


def threading_drain(proc: subprocess.Popen[str], name: str) -> None:
    import threading

    lines = LOG_LINES.setdefault(name, [])
    copy = (LOG_DIR[0] / f"{time.strftime('%H%M%S')}-{name}.log").open("w") \
        if LOG_DIR else None

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "key of minion" in line:
                lines.append((time.monotonic(), line))
            if copy is not None:
                copy.write(line)
                copy.flush()

    threading.Thread(target=drain, daemon=True).start()


def logged(name: str, fragment: str, after: float, timeout: float = 30.0) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for when, line in list(LOG_LINES.get(name, [])):
            if when >= after and fragment in line:
                return when
        time.sleep(0.005)  # polling the drained log (a measure, not a test)
    return None


def revocation(root: Path, masters: list[str], held: dict[str, str]) -> tuple[float, float]:
    """``raetsalt-key -d`` on one master of a minion another holds: seconds until the
    holder ends its session, from the command's start and from the decision."""
    minion, holder = next(iter(held.items()))
    deciding = next(n for n in masters if n != holder)
    start = time.monotonic()
    subprocess.run([str(Path(sys.executable).with_name("raetsalt-key")), "-c",
                    str(root / deciding), "-d", minion, "-y"], capture_output=True, timeout=60)
    decided = logged(deciding, f"key of minion {minion} (accepted): delete by the operator",
                     start)
    ended = logged(holder, f"key of minion {minion} (accepted): delete by the cluster", start)
    if decided is None or ended is None:
        return -1.0, -1.0
    return ended - start, ended - decided


def cpu_under_load(root: Path, masters: dict[str, tuple[subprocess.Popen[str], int]],
                   first: str, targets: list[str], seconds: float) -> dict[str, float]:
    """Each master's CPU (fraction of a core) idle, then with a job a second."""
    result: dict[str, float] = {}
    cpu0 = {n: cpu_seconds(p.pid) for n, (p, _) in masters.items()}
    time.sleep(seconds)  # idle: the measure's window
    for n, (p, _) in masters.items():
        result[f"cpu_idle_{n}"] = (cpu_seconds(p.pid) - cpu0[n]) / seconds
    cpu0 = {n: cpu_seconds(p.pid) for n, (p, _) in masters.items()}
    start = time.monotonic()
    jobs: list[subprocess.Popen[bytes]] = []
    while time.monotonic() - start < seconds:
        jobs.append(subprocess.Popen(
            [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(root / first), "-L",
             ",".join(targets), "test.ping", "--async"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        time.sleep(max(0.0, start + len(jobs) - time.monotonic()))  # one a second
    took = time.monotonic() - start
    for job in jobs:
        job.wait(60)
    for n, (p, _) in masters.items():
        result[f"cpu_1job_{n}"] = (cpu_seconds(p.pid) - cpu0[n]) / took
    return result


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
    took, answered = ping_who(root, name)
    return took, len(answered)


def ping_who(root: Path, name: str, timeout: int = 30) -> tuple[float, set[str]]:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(root / name), "*", "test.ping",
         "--out", "json", "--static", "-t", str(timeout)], capture_output=True, text=True,
        timeout=300)
    took = time.monotonic() - start
    try:
        answers = json.loads(done.stdout or "{}")
    except ValueError:
        answers = {}
    if not answers:
        print(f"  ping from {name}: exit {done.returncode}: {done.stderr.strip()[-300:]}",
              flush=True)
    return took, {m for m, v in answers.items() if v is True}


def wait_connected(files: list[Path], count: int, timeout: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if status(files)["connected"] >= count:
            return time.monotonic() - start
        time.sleep(0.2)  # polling the helpers' status files (a measure, not a test)
    return None


def outage(root: Path, server: Any, store: str, targets: list[str], seconds: float
           ) -> dict[str, float]:
    """The database stopped for ``seconds`` while a job a second is published from each
    master in turn: the slowest answer meanwhile, and how many of the returns the clients
    got are in the database once it is back."""
    import psycopg

    answers: list[tuple[str, int]] = []
    slowest = 0.0
    server.stop()
    start = time.monotonic()
    try:
        turn = 0
        while time.monotonic() - start < seconds:
            began = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "raetsalt.cli.salt", "-c", str(root / NAMES[turn % 3]),
                 "-L", ",".join(targets), "test.ping", "--out", "json", "--static",
                 "--show-jid", "-t", "30"], capture_output=True, text=True, timeout=120)
            slowest = max(slowest, time.monotonic() - began)
            turn += 1
            jid, _, rest = done.stdout.partition("\n")
            try:
                got = json.loads(rest or "{}")
            except ValueError:
                got = {}
            answers.append((jid.removeprefix("jid: "), sum(1 for v in got.values() if v)))
            time.sleep(max(0.0, start + turn - time.monotonic()))  # one a second
    finally:
        server.start()
    acknowledged = sum(n for _, n in answers)
    jids = [jid for jid, _ in answers]
    stored = 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with psycopg.connect(store) as conn:
            row = conn.execute("SELECT count(*) FROM salt_returns WHERE jid = ANY(%s)",
                               (jids,)).fetchone()
        stored = int(row[0]) if row else 0
        if stored >= acknowledged:
            break
        time.sleep(0.5)  # polling the database while the spools drain
    return {"outage_s": seconds, "outage_jobs": len(answers),
            "outage_acked": acknowledged, "outage_stored": stored,
            "outage_slowest_answer_s": slowest}


def diagnose(name: str, missing: list[str], files: list[Path], ports: dict[str, str],
             store: str) -> None:
    """Which minions a master's ping misses, which master each holds (the minions'
    status), and what the cluster's registry table says of them."""
    import psycopg

    holders: dict[str, str | None] = {}
    for path in files:
        try:
            holders.update(json.loads(path.read_text()).get("holders", {}))
        except (OSError, ValueError):
            continue
    with psycopg.connect(store) as conn:
        rows = dict(conn.execute(
            "SELECT minion, master FROM raetsalt_cluster_minions WHERE minion = ANY(%s)",
            (missing,)).fetchall())
    by = statistics.multimode(ports.get(holders.get(m) or "", "none") for m in missing)
    print(f"  {name} misses {len(missing)}: held by {by} (most); e.g. " + ", ".join(
        f"{m} held by {ports.get(holders.get(m) or '', holders.get(m))}, registry "
        f"{rows.get(m)}" for m in missing[:8]), flush=True)


def one_run(count: int, helpers: int, store: str, load_seconds: float,
            server: Any = None, outage_seconds: float = 0.0) -> dict[str, float]:
    root = Path(tempfile.mkdtemp(prefix="rsbc", dir="/tmp"))
    shm = Path(tempfile.mkdtemp(prefix="rsbc", dir="/dev/shm"))
    masters: dict[str, tuple[subprocess.Popen[str], int]] = {}
    procs: list[subprocess.Popen[str]] = []
    LOG_LINES.clear()
    roads = {name: free_port() for name in NAMES}
    try:
        for name in NAMES:
            if name != NAMES[0]:  # the first master created the cluster's keys
                (root / "pki" / name).mkdir(parents=True)
                shutil.copy2(root / "pki" / NAMES[0] / "cluster.json", root / "pki" / name)
            peers = ", ".join(f"'127.0.0.1:{roads[n]}'" for n in NAMES if n != name)
            masters[name] = start_master(root, name, (
                f"cluster_id: fleet1\ncluster_store: '{store}'\n"
                f"cluster_pki_dir: {root / 'pki' / name}\ncluster_port: {roads[name]}\n"
                f"cluster_peers: [{peers}]\n"))
        listed = ",".join(f"127.0.0.1:{port}" for _, port in masters.values())
        per = -(-count // helpers)
        files = []
        ids: list[str] = []
        for index in range(helpers):
            n = min(per, count - index * per)
            if n <= 0:
                break
            ids.extend(f"c{index}x{j:05d}" for j in range(n))
            path = shm / f"status{index}.json"
            files.append(path)
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / "many_minions.py"), "--root", str(shm),
                 "--master", listed, "--count", str(n),
                 "--extra", f"cluster_id: fleet1;master_alive_interval: {ALIVE[1]}",
                 "--prefix", f"c{index}x", "--inline-jobs", "--nice", "10",
                 *(["--holders"] if LOG_DIR else []),
                 "--status", str(path), "--alive-period", str(ALIVE[0])],
                stdout=subprocess.DEVNULL, text=True))
        connected = wait_connected(files, count, 600)
        if connected is None:
            raise SystemExit(f"bench_cluster: only {status(files)} connected")
        result: dict[str, float] = {"connect_s": connected}
        took_each = []
        for name in NAMES:
            took, returns = ping_all(root, name)
            took_each.append(took)
            result[f"ping_{name}_s"] = took
            result[f"returns_{name}"] = returns
        result["publish_all_s"] = statistics.median(took_each)
        result["returns_before"] = min(result[f"returns_{n}"] for n in NAMES)
        ports = {f"127.0.0.1:{port}": n for n, (_, port) in masters.items()}
        from raetsalt.services.masters import rendezvous_order
        holder = {m: ports[rendezvous_order(m, list(ports))[0]] for m in ids}
        held = {n: sum(1 for m in ids if holder[m] == n) for n in NAMES}
        other = {m: h for m, h in holder.items() if h != NAMES[0]}
        result["revoke_cli_s"], result["revoke_s"] = revocation(
            root, list(NAMES), {next(iter(other)): other[next(iter(other))]})
        targets = [m for n in NAMES for m in [m for m in ids[1:] if holder[m] == n][:3]]
        targets.append(ids[-1])
        result.update(cpu_under_load(root, masters, NAMES[0], targets, load_seconds))
        if outage_seconds > 0:
            result.update(outage(root, server, store, targets, outage_seconds))
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
        if FREEZE[0] > 0:  # the first helper's minions starved: silent, then back
            procs[0].send_signal(signal.SIGSTOP)
            time.sleep(FREEZE[0])  # how long they are starved (the measure's condition)
            procs[0].send_signal(signal.SIGCONT)
            start = time.monotonic()
        after, last = [], []
        deadline = time.monotonic() + 90
        for name in masters:  # the first answer, then again until the whole fleet
            _took, answered = ping_who(root, name)
            after.append(len(answered))
            while len(answered) < count and time.monotonic() < deadline:
                _took, answered = ping_who(root, name, 10)
            last.append(len(answered))
            if len(answered) < count:
                diagnose(name, sorted(set(ids) - answered), files, ports, store)
        result["returns_after"] = min(after)
        result["whole_again_s"] = time.monotonic() - start
        result["returns_last"] = min(last)
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
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # clean up the processes
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--load-seconds", type=float, default=20.0)
    parser.add_argument("--alive-period", type=float, default=2.0,
                        help="raet_alive_period of masters and minions (a loaded machine "
                             "starves the simulated minions: a longer period keeps them)")
    parser.add_argument("--wait", type=float, default=0.0,
                        help="the minions' master_alive_interval: how long a master that "
                             "has not answered yet is waited for (0: 30 s)")
    parser.add_argument("--outage", type=float, default=0.0,
                        help="stop the database this many seconds under load (first run)")
    parser.add_argument("--freeze", type=float, default=0.0,
                        help="after the failover, stop the first helper's minions this "
                             "many seconds (a starved machine: their masters' probes fail, "
                             "and they answer again on the same sessions)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--logs", help="copy each master's log into this directory and "
                        "explain a shortfall after the failover (which minions, held where)")
    parser.add_argument("--helpers", type=int, default=2)
    args = parser.parse_args()
    ALIVE[0] = args.alive_period
    ALIVE[1] = args.wait
    FREEZE[0] = args.freeze
    if args.logs:
        LOG_DIR.append(Path(args.logs))
        LOG_DIR[0].mkdir(parents=True, exist_ok=True)
    print(f"3 masters x {args.count} minions (cluster_id: rendezvous, raet_alive_period "
          f"{args.alive_period}); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    from pg import Postgres, server_bin

    bindir = server_bin()
    if bindir is None:
        raise SystemExit("bench_cluster: PostgreSQL's server binaries are not installed")
    pgroot = Path(tempfile.mkdtemp(prefix="rsbcpg", dir="/tmp"))
    server = Postgres(bindir, pgroot)
    server.init()
    server.start()
    runs = []
    try:
        server.create_database(server.dbname)
        for index in range(args.runs):
            store = server.create_database("bench")
            result = one_run(args.count, args.helpers, store, args.load_seconds, server,
                             args.outage if index == 0 else 0.0)
            runs.append(result)
            print(f"run {index + 1}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float)
                                                   else f"{k} {v}" for k, v in result.items()),
                  flush=True)
    finally:
        server.stop()
        shutil.rmtree(pgroot, ignore_errors=True)
    keys = ("publish_all_s", "returns_before", "revoke_cli_s", "revoke_s", "failover_s",
            "moved", "returns_after", *(f"cpu_idle_{n}" for n in NAMES),
            *(f"cpu_1job_{n}" for n in NAMES))
    print("medians: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in keys))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
