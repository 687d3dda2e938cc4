"""Two masters serving one fleet, and a failover: a runnable example (loopback only).

    .venv/bin/python examples/two_masters.py

Starts, under a temporary directory: a PostgreSQL server of its own (the binaries of
Debian's ``postgresql`` package; ``apt-get install postgresql``), two masters of one
cluster (``cluster_id``, ``cluster_store``, ``cluster_pki_dir``: the first creates the
cluster's keys and they are copied to the second, ``cluster_peers``) and four minions
listing both masters with ``cluster_id``.  Then: ``raetsalt '*' test.ping`` on each
master (each answers for the whole fleet, though each holds only some of the minions),
``raetsalt-key -L`` on each, one master killed (SIGKILL), its minions moving to the
other, and the ping again.  Every command and its output are printed.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from pg import Postgres, server_bin  # noqa: E402  (the test suite's throwaway server)

BIN = Path(sys.executable).parent
MINIONS = ("web1", "web2", "db1", "db2")


def port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(tool: str, conf: Path, *args: str) -> str:
    command = [str(BIN / tool), "-c", str(conf), *args]
    print(f"\n$ {tool} -c {conf.name} {' '.join(args)}", flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    print(done.stdout.rstrip() or done.stderr.rstrip(), flush=True)
    return done.stdout


def wait_for(daemon: subprocess.Popen[str], fragment: str, timeout: float = 60) -> str:
    assert daemon.stderr is not None
    deadline = time.monotonic() + timeout
    for line in daemon.stderr:
        if fragment in line:
            threading.Thread(target=lambda: [None for _ in daemon.stderr or ()],
                             daemon=True).start()  # the rest of its log: read, not shown
            return line
        if time.monotonic() > deadline:
            break
    raise SystemExit(f"example: no {fragment!r} in time")


def start(node: str, conf: Path, extra: str) -> subprocess.Popen[str]:
    """Write ``conf/<node>`` (the cluster's common keys and ``extra``) and start it."""
    (conf / node).write_text(
        f"id: {conf.name}\nroot_dir: {conf}\ninterface: 127.0.0.1\nraet_port: 0\n"
        f"raet_alive_period: 1.0\ncluster_id: fleet1\n{extra}")
    return subprocess.Popen([str(BIN / f"raetsalt-{node}"), "-c", str(conf), "-l", "info"],
                            stderr=subprocess.PIPE, text=True)


def main() -> int:
    bindir = server_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL's server binaries are needed: apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="rs2m", dir="/tmp"))
    pgroot = Path(tempfile.mkdtemp(prefix="rs2mpg", dir="/tmp"))  # its own (server's user)
    server = Postgres(bindir, pgroot)
    server.init()
    server.start()
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        server.create_database(server.dbname)
        store = server.create_database("fleet")
        roads = {"m1": port(), "m2": port()}
        ports: dict[str, int] = {}
        for name, other in (("m1", "m2"), ("m2", "m1")):
            conf = root / name
            conf.mkdir()
            pki = root / "cluster-pki" / name
            if name == "m2":  # copied once from the first master
                pki.mkdir(parents=True)
                shutil.copy2(root / "cluster-pki" / "m1" / "cluster.json", pki)
            procs[name] = start("master", conf, (
                f"auto_accept: true\ncluster_store: '{store}'\ncluster_pki_dir: {pki}\n"
                f"cluster_port: {roads[name]}\ncluster_peers: ['127.0.0.1:{roads[other]}']\n"))
            line = wait_for(procs[name], "serving on 127.0.0.1:")
            ports[name] = int(line.split("serving on 127.0.0.1:")[1].split()[0])
            print(f"master {name}: minions' road 127.0.0.1:{ports[name]}, masters' road "
                  f"127.0.0.1:{roads[name]}", flush=True)
        for minion in MINIONS:
            conf = root / minion
            conf.mkdir()
            procs[minion] = start("minion", conf, (
                f"master: ['127.0.0.1:{ports['m1']}', '127.0.0.1:{ports['m2']}']\n"
                f"execution_mode: native\ngrains:\n  role: {minion[:-1]}\n"))
            held = wait_for(procs[minion], "connected to the master")
            print(f"minion {minion}: {held.split('] ', 1)[-1].strip()}", flush=True)
        for name in ("m1", "m2"):
            run("raetsalt", root / name, "*", "test.ping", "-t", "10")
            run("raetsalt-key", root / name, "-L")
        print("\n# master m1 is killed (SIGKILL); its minions move to m2", flush=True)
        procs.pop("m1").send_signal(signal.SIGKILL)
        time.sleep(6)  # a demonstration's pause: about two alive periods plus a join
        run("raetsalt", root / "m2", "*", "test.ping", "-t", "10")
        return 0
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(pgroot, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
