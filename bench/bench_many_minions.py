"""One master, many minions: the scale table.

    .venv/bin/python bench/bench_many_minions.py [--counts 1000,2000,5000,10000] [--runs 3]
        [--steady 300] [--idle 30] [--short]

For each N: a real ``raetsalt-master`` (auto_accept, its keep and job cache on disk) and
N real minions in helper processes (``bench/many_minions.py``: real road stacks, a heap
of timers, jobs answered in process, at nice 10, their files on tmpfs), then

* **connect**: seconds from a cold start (no keys anywhere; the minions are built first,
  then all start connecting at once) until every minion says its session with the
  master is up;
* **ping**: ``raetsalt '*' test.ping --static --out json`` (process start included),
  ``--runs`` times: seconds and returns received;
* **idle CPU**: the master's CPU over ``--idle`` seconds of steady state, in % of one core;
* **RSS**: the master's resident memory after the pings;
* **lost**: how many times a minion declared the master lost during ``--steady``
  seconds of steady state (the idle window is part of it);
* **recovery**: seconds from a master SIGKILL + restart until every minion has a new
  session with it, with no operator action;
* **per minion**: master CPU per minion to connect and per ping (ms, the keep and cache
  writer threads included) and idle CPU per minion (us/s).

``--ping-only`` stops after the pings (no idle, steady or recovery windows);
``--profile DIR`` records py-spy profiles of the master, of one helper and of each ping's
CLI during the pings (py-spy must be in the venv), and the row gets the kernel's UDP
counters' growth over the pings (``/proc/net/snmp``: receive-buffer errors are drops).

``--short`` is the ``make bench`` mode: N = 200, one ping, 5 s windows.  The load of the
machine (load average) is printed with each row: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from raetsalt.config import load_node_config

HERE = Path(__file__).resolve().parent
PER_HELPER = 1250
"""Minions per helper process (each minion holds about six file descriptors)."""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def udp_counters() -> dict[str, int]:
    """The kernel's UDP counters (``/proc/net/snmp``), e.g. ``RcvbufErrors``."""
    lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines()
             if line.startswith("Udp:")]
    return {key: int(value) for key, value in zip(lines[0][1:], lines[1][1:], strict=True)}


def py_spy(target: list[str], out: Path) -> subprocess.Popen[str]:
    """``py-spy record`` of ``target`` (``--pid P`` or ``-- command``), to ``out``."""
    tool = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(tool), "record", "--format", "raw", "--rate", "200", "--nonblocking",
         "-o", str(out), *target],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def load() -> float:
    return os.getloadavg()[0]


def _serving_port(master: subprocess.Popen[str], log_file: Path, offset: int,
                  timeout: float = 60.0) -> int | None:
    """The port of the master's "serving on" line written after ``offset`` of its log file;
    None if the master exited first (its port was taken)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log_file.exists():
            with log_file.open(encoding="utf-8", errors="replace") as handle:
                handle.seek(offset)
                for line in handle:
                    if "serving on 127.0.0.1:" in line:
                        return int(line.split("serving on 127.0.0.1:", 1)[1].split()[0])
        if master.poll() is not None:
            return None
        time.sleep(0.05)
    raise SystemExit("bench_many_minions: the master did not serve within a minute")


class Cluster:
    """A master and its simulated minions under ``root``."""

    def __init__(self, count: int, *, helpers: int, alive_period: float) -> None:
        self.count = count
        self.root = Path(tempfile.mkdtemp(prefix="rsm", dir="/tmp"))  # the master: disk
        self.shm = Path(tempfile.mkdtemp(prefix="rsm", dir="/dev/shm"))  # the minions
        self.port = 0  # until the master has bound a free one (start_master)
        self.master_dir = self.root / "ma"
        self.master_dir.mkdir()
        self.alive_period = alive_period
        self.master_lines: list[str] = []
        """More lines for the master's config (``--master-config``)."""
        self._write_master_config()
        self.master: subprocess.Popen[str] | None = None
        self.helpers: list[subprocess.Popen[str]] = []
        self.status_files: list[Path] = []
        self.helper_count = helpers
        self.helper_args: list[str] = []
        """More arguments for ``many_minions.py`` (the beacon benchmark's)."""

    def _write_master_config(self) -> None:
        # The console shows errors only; the log file says where the master serves.
        (self.master_dir / "master").write_text(
            f"root_dir: {self.master_dir}\ninterface: 127.0.0.1\nid: benchmaster\n"
            f"raet_port: {self.port}\nauto_accept: true\ntimeout: 30\n"
            f"raet_alive_period: {self.alive_period}\nlog_level_logfile: info\n"
            + "".join(f"{line}\n" for line in self.master_lines)
        )

    def start_master(self, stats: Path | None = None) -> None:
        """Start the master: on a free port the first time (raet_port 0, the port read from
        its log), on that port again after a restart (again while another socket holds it
        for a moment: the master exits with "address already in use")."""
        tool = [str(Path(sys.executable).with_name("raetsalt-master"))]
        if stats is not None:  # the road's counters into ``stats`` every second
            tool = [sys.executable, str(HERE / "master_stats.py"), str(stats)]
        log_file = Path(load_node_config(self.master_dir, "master")["log_file"])
        for _attempt in range(10):
            seen = log_file.stat().st_size if log_file.exists() else 0
            self.master = subprocess.Popen(
                [*tool, "-c", str(self.master_dir), "-l", "error"], text=True
            )
            port = _serving_port(self.master, log_file, seen)
            if port is not None:
                if not self.port:
                    self.port = port
                    self._write_master_config()  # a restart binds the same port
                return
            time.sleep(0.2)
        raise SystemExit("bench_many_minions: the master did not start (see its log file)")

    def kill_master(self) -> None:
        assert self.master is not None
        self.master.kill()
        self.master.wait(10)

    def start_helpers(self) -> None:
        per = -(-self.count // self.helper_count)
        for index in range(self.helper_count):
            count = min(per, self.count - index * per)
            if count <= 0:
                break
            status = self.shm / f"status{index}.json"
            self.status_files.append(status)
            self.helpers.append(subprocess.Popen(
                [sys.executable, str(HERE / "many_minions.py"), "--root", str(self.shm),
                 "--master", f"127.0.0.1:{self.port}", "--count", str(count),
                 "--prefix", f"m{index}x", "--inline-jobs", "--nice", "10",
                 "--status", str(status), "--alive-period", str(self.alive_period),
                 "--go", str(self.shm / "go"), *self.helper_args],
                stdout=subprocess.DEVNULL, text=True))

    def go(self, timeout: float) -> None:
        """Wait until every helper has built its minions, then let them all connect."""
        start = time.monotonic()
        while sum(1 for path in self.status_files if path.exists()) < len(self.helpers):
            if time.monotonic() - start > timeout:
                raise RuntimeError("the helpers did not build their minions in time")
            for proc in self.helpers:
                if proc.poll() is not None:
                    raise RuntimeError(f"a helper exited with {proc.returncode}")
            time.sleep(0.2)  # polling the helpers' status files
        (self.shm / "go").touch()

    def helpers_cpu(self) -> float:
        """CPU seconds the simulated minions' processes used so far."""
        return sum(cpu_seconds(proc.pid) for proc in self.helpers if proc.poll() is None)

    def status(self, after: float = 0.0) -> dict[str, int]:
        """The helpers' status summed (files written before ``after`` count as nothing)."""
        total = {"count": 0, "connected": 0, "lost": 0, "since_epoch": 0}
        for path in self.status_files:
            try:
                part = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if float(part.get("at", 0.0)) <= after:
                continue
            for key in total:
                total[key] += int(part.get(key, 0))
        return total

    def wait_for(self, key: str, timeout: float, *, after: float = 0.0) -> float | None:
        """Seconds until ``status(after)[key]`` reaches N, or None after ``timeout``."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.status(after).get(key, 0) >= self.count:
                return time.monotonic() - start
            for proc in self.helpers:
                if proc.poll() is not None:
                    raise RuntimeError(f"a helper exited with {proc.returncode}")
            time.sleep(0.2)  # polling the helpers' status files
        return None

    def ping(self, timeout: float, profile: Path | None = None) -> tuple[float, int]:
        salt = Path(sys.executable).with_name("raetsalt")
        command = [str(salt), "-c", str(self.master_dir), "*", "test.ping", "--out", "json",
                   "--static", "-t", str(int(timeout))]
        if profile is not None:
            tool = Path(sys.executable).with_name("py-spy")
            command = [str(tool), "record", "--format", "raw", "--rate", "200",
                       "--nonblocking", "-o", str(profile), "--", *command]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        took = time.perf_counter() - start
        # py-spy, when profiling, writes its own lines around the document.
        text = "\n".join(line for line in done.stdout.splitlines()
                         if not line.startswith("py-spy>"))
        try:
            returns = json.loads(text) if text.strip() else {}
        except ValueError:
            returns = {}
        return took, sum(1 for value in returns.values() if value is True)

    def stop(self) -> None:
        procs = [p for p in [*self.helpers, self.master] if p is not None]
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)


def profile(where: str | None, pid: int, name: str) -> subprocess.Popen[str] | None:
    """``py-spy record`` of the master into ``where/name.txt`` (collapsed stacks), if asked."""
    if where is None:
        return None
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(spy), "record", "--pid", str(pid), "--format", "raw", "--threads",
         "--rate", "50", "-o", str(Path(where) / f"{name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def stop_profile(spy: subprocess.Popen[str] | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


def measure(count: int, args: argparse.Namespace) -> dict[str, Any]:
    helpers = max(args.processes, -(-count // PER_HELPER))
    cluster = Cluster(count, helpers=helpers, alive_period=args.alive_period)
    if args.master_config:
        cluster.master_lines = list(args.master_config)
        cluster._write_master_config()
    row: dict[str, Any] = {"minions": count, "load_start": round(load(), 1)}
    try:
        stats = Path(args.stats) if args.stats else None
        cluster.start_master(None if stats is None else stats / f"connect{count}.json")
        cluster.start_helpers()
        cluster.go(600.0)
        assert cluster.master is not None
        pid = cluster.master.pid
        cpu0 = cpu_seconds(pid)
        spy = profile(args.spy, pid, f"connect{count}")
        helpers0 = cluster.helpers_cpu()
        connect = cluster.wait_for("connected", args.connect_timeout)
        stop_profile(spy)
        row["connect_s"] = None if connect is None else round(connect, 1)
        row["ms_cpu_per_minion_connect"] = round(1000 * (cpu_seconds(pid) - cpu0) / count, 2)
        row["helpers_cpu_connect_s"] = round(cluster.helpers_cpu() - helpers0, 1)
        if stats is not None:
            shutil.copy(stats / f"connect{count}.json", stats / f"connect{count}.end.json")
        if connect is None:
            row["connected"] = cluster.status()["connected"]
        pings = []
        spies: list[subprocess.Popen[str]] = []
        if args.profile:
            out = Path(args.profile)
            out.mkdir(parents=True, exist_ok=True)
            spies = [py_spy(["--pid", str(pid)], out / f"master{count}.txt"),
                     py_spy(["--pid", str(cluster.helpers[0].pid)], out / f"helper{count}.txt")]
        udp0 = udp_counters()
        for run in range(0 if args.no_ping else args.runs):
            cpu0 = cpu_seconds(pid)
            spy = Path(args.profile) / f"cli{count}-{run}.txt" if args.profile else None
            took, returned = cluster.ping(args.ping_timeout, spy)
            pings.append((round(took, 2), returned, cpu_seconds(pid) - cpu0))
        udp1 = udp_counters()
        row["udp"] = {key: udp1[key] - udp0[key] for key in udp1 if udp1[key] != udp0[key]}
        for spy_proc in spies:
            spy_proc.send_signal(signal.SIGINT)
            spy_proc.wait(60)
        row["ping"] = [(t, r) for t, r, _ in pings]
        if pings:
            cpu_per_ping = sorted(c for _, _, c in pings)[len(pings) // 2]
            row["ms_cpu_per_minion_per_ping"] = round(1000 * cpu_per_ping / count, 3)
        row["rss_mib"] = round(rss_mib(pid), 1)
        if args.ping_only:
            return row
        lost0 = cluster.status()["lost"]
        cpu0, start = cpu_seconds(pid), time.monotonic()
        time.sleep(args.idle)  # the measurement window itself
        idle = (cpu_seconds(pid) - cpu0) / (time.monotonic() - start)
        row["idle_cpu_pct"] = round(100 * idle, 1)
        row["idle_us_per_minion_s"] = round(1e6 * idle / count, 1)
        rest = args.steady - args.idle
        if rest > 0:
            time.sleep(rest)  # the rest of the steady-state window
        row["lost_in_steady"] = cluster.status()["lost"] - lost0
        epoch = time.time()
        (cluster.shm / "epoch").write_text(repr(epoch))
        cluster.kill_master()
        cluster.start_master(None if stats is None else stats / f"recovery{count}.json")
        assert cluster.master is not None
        spy = profile(args.spy, cluster.master.pid, f"recovery{count}")
        cpu0, helpers0 = cpu_seconds(cluster.master.pid), cluster.helpers_cpu()
        recovery = cluster.wait_for("since_epoch", args.recovery_timeout, after=epoch)
        stop_profile(spy)
        row["master_cpu_recovery_s"] = round(cpu_seconds(cluster.master.pid) - cpu0, 1)
        row["helpers_cpu_recovery_s"] = round(cluster.helpers_cpu() - helpers0, 1)
        if stats is not None:
            shutil.copy(stats / f"recovery{count}.json", stats / f"recovery{count}.end.json")
        row["recovery_s"] = None if recovery is None else round(recovery, 1)
        if recovery is None:
            row["recovered"] = cluster.status(epoch)["since_epoch"]
    finally:
        cluster.stop()
        row["load_end"] = round(load(), 1)
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    head = ("| N | connect s (ms CPU/minion) | test.ping s (returns) | ms CPU/minion/ping | "
            "idle CPU % (us/minion/s) | RSS MiB | lost | recovery s | load |")
    print(head)
    print("|" + "---|" * 9)
    for row in rows:
        pings = ", ".join(f"{t} ({r})" for t, r in row.get("ping", []))
        connect = row.get("connect_s")
        connect_text = f"{connect}" if connect is not None else f"> limit ({row['connected']})"
        recovery = row.get("recovery_s")
        recovery_text = (f"{recovery}" if recovery is not None
                         else f"> limit ({row.get('recovered')})")
        connect_text += f" ({row.get('ms_cpu_per_minion_connect')})"
        print(f"| {row['minions']} | {connect_text} | {pings} | "
              f"{row.get('ms_cpu_per_minion_per_ping')} | {row.get('idle_cpu_pct')} "
              f"({row.get('idle_us_per_minion_s')}) | {row.get('rss_mib')} | "
              f"{row.get('lost_in_steady')} | {recovery_text} | "
              f"{row['load_start']} -> {row['load_end']} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,2000,5000,10000")
    parser.add_argument("--runs", type=int, default=3, help="pings per N")
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--steady", type=float, default=300.0)
    parser.add_argument("--processes", type=int, default=4, help="helper processes (at least)")
    parser.add_argument("--alive-period", type=float, default=3.0)
    parser.add_argument("--connect-timeout", type=float, default=180.0)
    parser.add_argument("--recovery-timeout", type=float, default=180.0)
    parser.add_argument("--ping-timeout", type=float, default=30.0)
    parser.add_argument("--no-ping", action="store_true", help="skip the test.ping phase")
    parser.add_argument("--stats", metavar="DIR", help="the master road's counters, as JSON")
    parser.add_argument("--spy", metavar="DIR", help="py-spy the master's connect and recovery")
    parser.add_argument("--master-config", action="append", metavar="LINE",
                        help="a line for the master's config, e.g. 'raet_crypto_threads: 0'")
    parser.add_argument("--ping-only", action="store_true",
                        help="stop after the pings (no idle, steady or recovery windows)")
    parser.add_argument("--profile", help="directory for py-spy profiles of the pings")
    parser.add_argument("--short", action="store_true", help="N=200, one ping, 5 s windows")
    args = parser.parse_args()
    if args.short:
        args.counts, args.runs, args.idle, args.steady = "200", 1, 5.0, 5.0
        args.processes, args.connect_timeout, args.recovery_timeout = 2, 60.0, 60.0
    rows = []
    failed = False
    for count in [int(c) for c in args.counts.split(",")]:
        row = measure(count, args)
        rows.append(row)
        print(json.dumps({"bench": "many_minions", **row}), flush=True)
        failed |= row.get("connect_s") is None or (
            not args.ping_only and row.get("recovery_s") is None)
    print_table(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
