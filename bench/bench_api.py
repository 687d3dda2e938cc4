"""REST API figures: ``POST /`` ``local`` ``test.ping`` on 10 minions (requests/s and
p50, against the same publication sent over the master's command socket, as ``raetsalt``
sends it for a user, and over its lane, as the API sends it), ``raetsalt '*' test.ping``
as a command, ``/events`` events/s to one SSE client, and the CPU of 100 idle SSE
clients.

    .venv/bin/python bench/bench_api.py [--requests 300] [--runs 3] [--cli 10]
                                        [--events 20000] [--idle 10] [--pings-only]
                                        [--base DIR]

``--base DIR``: the concurrent figures below for the code in DIR (another version's
checkout, compiled modules built) and this one, side by side, taking turns.

``--pings-only``: the test.ping figures alone (one client per path, then 1, 2 and 4
concurrent HTTP clients against one command-socket client, interleaved: requests/s, p50
and p95), without the command, runner, ``/events`` and idle figures.

The three paths run interleaved, ten requests each in turn, so that the machine's load
weighs on them alike; each of ``--runs`` runs gives a rate and a p50 per path, and the
figures printed are the median of the runs with their spread (lowest-highest).

Starts a real master, 10 minions and ``raetsalt-api`` (tests/api/helpers.py) in a
temporary directory on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from api.helpers import Site, started_site  # noqa: E402

from raetsalt.api.master import Credentials, MasterLink  # noqa: E402
from raetsalt.cli._publish import publish  # noqa: E402
from raetsalt.config import load_node_config  # noqa: E402
from raetsalt.drivers.cmdsock import StreamClient, command_socket_path  # noqa: E402
from raetsalt.event import SaltEvent  # noqa: E402

MINIONS = 10
PATHS = ("http", "cmdsock", "lane")
INCOMPLETE = dict.fromkeys(PATHS, 0)
FAILED: list[tuple[int, bytes]] = []
"""Concurrent requests answered other than 200: (status, the start of the body)."""
BENCH_API = "  thread_pool: 160\n  sse_queue: 100000\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ping_over_http(site: Site, token: str, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=60)
    body = json.dumps([{"client": "local", "tgt": "*", "fun": "test.ping"}])
    headers = {"X-Auth-Token": token, "Content-Type": "application/json",
               "Accept": "application/json"}
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn.request("POST", "/", body, headers)
        response = conn.getresponse()
        data = json.loads(response.read())
        times.append(time.perf_counter() - start)
        assert response.status == 200, data
        if len(data["return"][0]) != MINIONS:
            INCOMPLETE["http"] += 1
    conn.close()
    return times


def ping_over_lane(site: Site, token: str, count: int) -> list[float]:
    link = MasterLink(load_node_config(site.master_conf, "master"))
    auth = Credentials(token=token)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        pub = link.publish(auth, "*", "glob", "test.ping", [], 10.0)
        got = dict(pub.returns(time.monotonic() + 10.0))
        times.append(time.perf_counter() - start)
        if len(got) != MINIONS:
            INCOMPLETE["lane"] += 1
    link.close()
    return times


def ping_over_cmdsock(site: Site, token: str, count: int) -> list[float]:
    """The publication as ``raetsalt -a`` sends it for a user: the command socket."""
    client = StreamClient(command_socket_path(load_node_config(site.master_conf, "master")))
    args = argparse.Namespace(delimiter=":")
    times = []
    for _ in range(count):
        start = time.perf_counter()
        pub = publish(client, "*", "glob", "test.ping", [], args, 10.0, {"token": token})
        got = dict(pub.returns(time.monotonic() + 10.0))
        times.append(time.perf_counter() - start)
        if len(got) != MINIONS:
            INCOMPLETE["cmdsock"] += 1
    client.close()
    return times


PINGS = {"http": ping_over_http, "cmdsock": ping_over_cmdsock, "lane": ping_over_lane}


def cli_pings(site: Site, count: int) -> list[float]:
    """``raetsalt '*' test.ping`` as a command (a new process each time: its start-up
    counts)."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "raetsalt.cli.salt", "-c",
                               str(site.master_conf), "*", "test.ping", "--out", "json",
                               "--static"], capture_output=True, text=True, timeout=60)
        times.append(time.perf_counter() - start)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(json.loads(done.stdout)) == MINIONS, done.stdout
    return times


def runner_over_http(site: Site, token: str, count: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=60)
    body = json.dumps([{"client": "runner", "fun": "manage.up"}])
    headers = {"X-Auth-Token": token, "Content-Type": "application/json"}
    times = []
    for _ in range(count):
        start = time.perf_counter()
        conn.request("POST", "/", body, headers)
        response = conn.getresponse()
        response.read()
        times.append(time.perf_counter() - start)
        assert response.status == 200
    conn.close()
    return times


def runner_over_lane(site: Site, token: str, count: int) -> list[float]:
    link = MasterLink(load_node_config(site.master_conf, "master"))
    auth = Credentials(token=token)
    times = []
    for _ in range(count):
        start = time.perf_counter()
        link.runner(auth, "manage.up", [], 10.0)
        times.append(time.perf_counter() - start)
    link.close()
    return times


def welcome(site: Site, seconds: float) -> float:
    """``GET /`` (no master involved): the HTTP stack's own rate."""
    conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=60)
    done = 0
    stop = time.monotonic() + seconds
    started = time.monotonic()
    while time.monotonic() < stop:
        conn.request("GET", "/")
        conn.getresponse().read()
        done += 1
    conn.close()
    return done / (time.monotonic() - started)


CONCURRENT = (("http x1", "http", 1), ("http x2", "http", 2), ("http x4", "http", 4),
              ("cmdsock x1", "cmdsock", 1))


def clients_pinging(site: Site, token: str, path: str, clients: int, each: int
                    ) -> tuple[float, list[float]]:
    """``clients`` threads, each sending ``each`` pings over ``path`` back to back: the
    wall time and every request's latency."""
    times: list[list[float]] = [[] for _ in range(clients)]

    def worker(index: int) -> None:
        times[index] = PINGS[path](site, token, each)

    seconds = in_threads(worker, clients)
    return seconds, [t for each_times in times for t in each_times]


def in_threads(worker: Callable[[int], None], count: int) -> float:
    """Run ``worker(0)`` ... ``worker(count - 1)`` in threads at once: the wall time."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def p95_ms(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1] * 1000


def concurrency(sites: dict[str, tuple[Site, str]], requests: int, runs: int
                ) -> list[dict[str, tuple[float, float, float]]]:
    """Per run and ``<site name><label of CONCURRENT>``: requests/s, p50 and p95 (ms);
    the labels and the sites (``{name: (site, token)}``) take turns, 40 requests per
    client at a time."""
    out = []
    keys = [(name, *c) for c in CONCURRENT for name in sites]
    for _ in range(runs):
        wall: dict[str, float] = {name + label: 0.0 for name, label, _p, _c in keys}
        lat: dict[str, list[float]] = {key: [] for key in wall}
        for _ in range(max(1, requests // 40)):
            for name, label, path, clients in keys:
                site, token = sites[name]
                seconds, times = clients_pinging(site, token, path, clients, 40)
                wall[name + label] += seconds
                lat[name + label] += times
        out.append({key: (len(lat[key]) / wall[key], p50_ms(lat[key]), p95_ms(lat[key]))
                    for key in wall})
    return out


def concurrent_http(site: Site, token: str, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def worker(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=60)
        body = json.dumps([{"client": "local", "tgt": "*", "fun": "test.ping"}])
        headers = {"X-Auth-Token": token, "Content-Type": "application/json"}
        while time.monotonic() < stop:
            conn.request("POST", "/", body, headers)
            response = conn.getresponse()
            answer = response.read()
            if response.status != 200:
                FAILED.append((response.status, answer[:200]))
                continue
            done[index] += 1
        conn.close()

    seconds = in_threads(worker, clients)
    return sum(done) / seconds


def open_stream(site: Site, token: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", site.api.port), timeout=60)
    sock.sendall(f"GET /events HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {token}\r\n\r\n".encode())
    data = b""
    while b"retry: 400" not in data:
        data += sock.recv(65536)
    return sock


def fire(sock_dir: str, count: int) -> None:
    bus = SaltEvent("master", sock_dir)  # fires only: never subscribed
    sent = 0
    while sent < count:
        if bus.fire_event({"n": sent, "bench": True}, "bench/api/event"):
            sent += 1
    while not bus.fire_event({"done": True}, "bench/api/done"):
        pass  # the bus did not take it (full): the reader waits for this one
    bus.destroy()


def events_per_second(site: Site, token: str, count: int) -> tuple[float, int]:
    sock = open_stream(site, token)
    sock_dir = load_node_config(site.master_conf, "master")["sock_dir"]
    firer = multiprocessing.Process(target=fire, args=(sock_dir, count))
    received = 0
    tail = b""
    first: float | None = None
    last = time.perf_counter()
    sock.settimeout(1.0)
    firer.start()
    # The bus drops what a listener that is behind cannot take (the end mark too, maybe):
    # 10 s without one of our events ends the count.
    while time.perf_counter() - last < 10.0:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            break
        data = tail + chunk
        got = data.count(b"tag: bench/api/event\n")
        if got:
            last = time.perf_counter()
            if first is None:
                first = last
        received += got
        if b"tag: bench/api/done" in data:
            break
        tail = data[-64:]
        received -= tail.count(b"tag: bench/api/event\n")
    elapsed = last - (first or last)
    firer.join()
    sock.close()
    return received / max(elapsed, 1e-9), received


def idle_cpu(site: Site, token: str, clients: int, seconds: float) -> tuple[float, float]:
    pid = site.api.daemon.popen.pid
    before = cpu_seconds(pid)
    time.sleep(seconds)
    base = (cpu_seconds(pid) - before) / seconds
    socks = [open_stream(site, token) for _ in range(clients)]
    before = cpu_seconds(pid)
    time.sleep(seconds)
    loaded = (cpu_seconds(pid) - before) / seconds
    for sock in socks:
        sock.close()
    return base, loaded


def p50_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def spread(values: list[float], fmt: str) -> str:
    """The median of ``values`` and their range."""
    return (f"{format(statistics.median(values), fmt)} "
            f"[{format(min(values), fmt).strip()}-{format(max(values), fmt).strip()}]")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300,
                        help="test.ping requests per path and run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cli", type=int, default=10,
                        help="raetsalt '*' test.ping commands timed (0: none)")
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--pings-only", action="store_true",
                        help="only the test.ping figures (module docstring)")
    parser.add_argument("--base", default=None,
                        help="a checkout of another version: compare (``compare``)")
    args = parser.parse_args()
    if args.base:
        return compare(args)
    results: dict[str, Any] = {}
    with started_site(MINIONS, BENCH_API) as site:
        try:
            return _measure(site, args, results)
        except Exception:
            print("\n".join(site.api.daemon.drain()[-30:]), file=sys.stderr)
            raise


def _measure(site: Site, args: argparse.Namespace, results: dict[str, Any]) -> int:
    token = site.login()
    results["welcome_rps"] = welcome(site, 2.0)
    for ping in PINGS.values():
        ping(site, token, 20)  # warm up every path
    INCOMPLETE.update(dict.fromkeys(PATHS, 0))
    runs: list[dict[str, tuple[float, float]]] = []
    for _ in range(args.runs):
        times: dict[str, list[float]] = {path: [] for path in PATHS}
        for _ in range(args.requests // 10):  # interleaved: the load weighs on all alike
            for path, ping in PINGS.items():
                times[path] += ping(site, token, 10)
        runs.append({path: (len(t) / sum(t), p50_ms(t)) for path, t in times.items()})
    results["ping_runs"] = runs
    print(json.dumps({"ping_runs": runs}), flush=True)
    if args.pings_only:
        return _pings_only(site, token, args, runs, results)
    results["cli_p50_ms"] = p50_ms(cli_pings(site, args.cli)) if args.cli else None
    runner_http, runner_lane = [], []
    for _ in range(args.requests // 10):
        runner_http += runner_over_http(site, token, 10)
        runner_lane += runner_over_lane(site, token, 10)
    results["runner_http_p50_ms"] = p50_ms(runner_http)
    results["runner_lane_p50_ms"] = p50_ms(runner_lane)
    for clients in (4, 8):
        results[f"http_{clients}_clients_rps"] = concurrent_http(site, token, clients,
                                                                  5.0)
    if FAILED:
        print(f"concurrent HTTP requests that failed: {len(FAILED)}, e.g. {FAILED[:3]}")
    rate, received = events_per_second(site, token, args.events)
    if not received:
        print("no event arrived; raetsalt-api's log:\n"
              + "\n".join(site.api.daemon.drain()[-20:]), file=sys.stderr)
    results["sse_events_per_s"] = rate
    results["sse_events_received"] = received
    base, loaded = idle_cpu(site, token, 100, args.idle)
    results["idle_cpu_no_clients_pct"] = base * 100
    results["idle_cpu_100_sse_clients_pct"] = loaded * 100
    _print_pings(args, runs)
    if results["cli_p50_ms"] is not None:
        print(f"raetsalt '*' test.ping (a process each time): p50 "
              f"{results['cli_p50_ms']:.0f} ms over {args.cli} runs")
    print(f"runner manage.up p50: HTTP {results['runner_http_p50_ms']:.2f} ms, lane "
          f"{results['runner_lane_p50_ms']:.2f} ms; GET / {results['welcome_rps']:.0f} req/s")
    for clients in (4, 8):
        print(f"  HTTP, {clients} clients: {results[f'http_{clients}_clients_rps']:7.1f} req/s")
    print("  (requests where a minion did not return within the 10 s timeout: "
          + ", ".join(f"{path} {INCOMPLETE[path]}" for path in PATHS) + ")")
    print(f"/events to one client: {results['sse_events_per_s']:9.0f} events/s "
          f"({results['sse_events_received']} of {args.events} fired)")
    print(f"raetsalt-api CPU, idle: {results['idle_cpu_no_clients_pct']:.2f} % of a core; "
          f"with 100 idle SSE clients: {results['idle_cpu_100_sse_clients_pct']:.2f} %")
    print(json.dumps(results))
    return 0


def _print_pings(args: argparse.Namespace, runs: list[dict[str, tuple[float, float]]]
                 ) -> None:
    print(f"local test.ping on {MINIONS} minions, one client in sequence, median of "
          f"{args.runs} runs of {args.requests} requests per path [lowest-highest]:")
    for path in PATHS:
        rates = [run[path][0] for run in runs]
        p50s = [run[path][1] for run in runs]
        print(f"  {path:8s} {spread(rates, '7.1f')} req/s   p50 {spread(p50s, '6.2f')} ms")
    gaps = [run["http"][1] - run["cmdsock"][1] for run in runs]
    print(f"  HTTP - command socket p50: {spread(gaps, '+.2f')} ms")


def _pings_only(site: Site, token: str, args: argparse.Namespace,
                runs: list[dict[str, tuple[float, float]]], results: dict[str, Any]) -> int:
    conc = concurrency({"": (site, token)}, args.requests, args.runs)
    results["concurrency_runs"] = conc
    _print_pings(args, runs)
    _print_concurrency(args, conc, [""])
    print("  (requests where a minion did not return within the 10 s timeout: "
          + ", ".join(f"{path} {INCOMPLETE[path]}" for path in PATHS) + ")")
    print(json.dumps(results))
    return 0


def _print_concurrency(args: argparse.Namespace,
                       conc: list[dict[str, tuple[float, float, float]]],
                       names: list[str]) -> None:
    print(f"concurrent clients, each 40 pings at a time in turn, median of {args.runs} runs "
          f"of {args.requests} requests per line [lowest-highest]:")
    for label, _path, _clients in CONCURRENT:
        for name in names:
            key = name + label
            rates = [run[key][0] for run in conc]
            p50s = [run[key][1] for run in conc]
            p95s = [run[key][2] for run in conc]
            print(f"  {key:15s} {spread(rates, '7.1f')} req/s   p50 {spread(p50s, '6.2f')} "
                  f"ms   p95 {spread(p95s, '6.2f')} ms")
        if len(names) == 2:
            ratios = [run[names[1] + label][0] / run[names[0] + label][0] for run in conc]
            print(f"  {'':15s} {names[1].strip()} / {names[0].strip()} requests/s: "
                  f"{spread(ratios, '.2f')}")


def compare(args: argparse.Namespace) -> int:
    """``--base DIR``: the concurrency figures of the code in ``DIR`` (a checkout of
    another version, its compiled modules built) and of this one, each on its own master,
    minions and API at the same time, taking turns."""
    os.chdir(tempfile.gettempdir())  # ``python -m`` daemons import from their cwd first
    with ExitStack() as stack:
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.path.abspath(args.base)
        try:
            base = stack.enter_context(started_site(MINIONS, BENCH_API))
        finally:
            if saved is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = saved
        this = stack.enter_context(started_site(MINIONS, BENCH_API))
        sites = {"base ": (base, base.login()), "this ": (this, this.login())}
        for site, token in sites.values():
            for ping in PINGS.values():
                ping(site, token, 20)  # warm up every path
        conc = concurrency(sites, args.requests, args.runs)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    _print_concurrency(args, conc, list(sites))
    print(json.dumps({"concurrency_runs": conc}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
