"""Road benchmark: raetsalt vs raet 0.6.8 vs ZeroMQ CURVE, two processes on 127.0.0.1.

    .venv/bin/python bench/bench_road.py [--quick] [--cases a,b,c,d,h,e,f,E]
                                         [--variants NAME,...] [--datagram-size N]
                                         [--skip-raet] [--skip-zmq] [--reps 5]
                                         [--profile DIR] [--json-only]

Cases (each run is a fresh pair of processes from ``bench/road_worker.py``):

  a  100 B one-way messages/s          b  1 KiB one-way messages/s
  c  1 MiB one-way messages, MB/s      d  100 B request/response, p50 and p99 latency
  h  100 B request/response p50/p99 while 4 x 1 MiB messages stay outstanding on the same
     road (head-of-line blocking; raetsalt variants only), with the bulk MB/s meanwhile
  e  join + allow of N = 1, 100, 1000 estates (one helper process) to one main
  f  peak RSS of the main once 1000 remotes are allowed (taken from e's N = 1000 run)
  E  1 MiB throughput through a UDP relay dropping 10 % (vs 0 %) of datagrams each way
     (raetsalt variants only)

Like for like: the ZeroMQ CURVE row that ratios are taken against (``zmq-curve``) encodes
bodies with msgpack, as the native profile does; ``zmq-curve-json`` (JSON, the first
version's baseline) and ``zmq-raw`` (bytes encoded before the clock starts, compared
not decoded: libzmq CURVE alone) are extra rows.  ``--datagram-size 1400`` makes the
native profile use real-network datagrams on loopback too (where it would use 65,000 B).
``raetsalt-native`` queues many messages with ``send_many`` (the batch API);
``raetsalt-native-single`` with one ``send`` each; ``raetsalt-native-nospin`` is case d
without the driver's busy polling (``RoadStack(busy_poll=0)``), so the round trip and
the CPU per round trip (both processes) it trades are side by side.

Every message is checked by the receiver (sequence number and full content, see
``road_worker.Payload``); a run counts only if all ``count`` messages arrived intact and
the sender saw each one delivered.  The exit status is 1 only when a raetsalt case has
no verified run; an anchor that fails (raet 0.6.8 at N = 1000 joins) says so in the
table.  Figures are medians over the repetitions (5 unless ``--reps``); ratios
(``x raet``, ``x zmq``) divide this run's medians (for latency, the other side's by
ours, so > 1 always means "better than").  Cases a, b, c and d run their repetitions
variant after variant (one run of each, then the next repetition), and a second table
gives, per case, the median and the spread (lowest-highest) of the runs and, for ours,
the ratio against ZeroMQ-msgpack of each pair run back to back (median and spread of
those ratios), which a load that comes and goes shifts much less than the medians.
CPU is user + system ``getrusage`` time of both processes over the measured phase, per
message and per MB (10^6 bytes) of payload.

Variants: see ``VARIANTS``.  A variant whose RoadConfig options do not exist yet (the
native profile) is shown as n/a; it runs as soon as ``RoadConfig`` accepts them.
raet 0.6.8 is slow, so it gets fewer messages per run (the table shows the counts).
Keeps live in a temporary directory (tmpfs ``/dev/shm`` when present); raetsalt keeps
are ``FileKeep(durable=False)``, i.e. without fsync.  These are not tests; ``make test``
never runs them.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "road_worker.py")
RELAY = os.path.join(HERE, "udp_relay.py")
MiB = 1024 * 1024


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str
    """Worker implementation: ``raetsalt``, ``raet`` or ``zmq``."""
    config: dict[str, Any] = field(default_factory=dict)
    """``RoadConfig`` overrides (raetsalt only): how a profile is chosen."""
    cases: str = "abcdhefE"
    config_if_known: dict[str, Any] = field(default_factory=dict)
    """``RoadConfig`` overrides applied only where ``RoadConfig`` has the field (pins the
    compat variant to the raet profile once a profile switch exists)."""
    worker: dict[str, Any] = field(default_factory=dict)
    """Worker options (``codec`` for ZeroMQ, ``batch`` for raetsalt senders)."""

    def road_config(self) -> dict[str, Any]:
        if self.kind != "raetsalt" or not self.config_if_known:
            return dict(self.config)
        from raetsalt.engine.road import RoadConfig

        known = {f.name for f in dataclasses.fields(RoadConfig)}
        return {**{k: v for k, v in self.config_if_known.items() if k in known}, **self.config}

    def missing(self) -> str | None:
        """Why this variant cannot run here, or None."""
        if self.kind == "raetsalt":
            from raetsalt.engine.road import RoadConfig

            known = {f.name for f in dataclasses.fields(RoadConfig)}
            unknown = sorted(set(self.config) - known)
            if unknown:
                return f"RoadConfig has no {', '.join(unknown)} yet"
        elif self.kind == "raet":
            sys.path.insert(0, os.path.join(ROOT, "tests"))
            from raetpeer_client import raet_available

            if not raet_available():
                return "raet 0.6.8 not installed"
        elif self.kind == "zmq":
            try:
                import zmq
            except ImportError:
                return "pyzmq not installed"
            if not zmq.has("curve"):
                return "libzmq without CURVE"
        return None


VARIANTS = [
    Variant("raetsalt-native", "raetsalt", {"native": True}, worker={"batch": True}),
    Variant("raetsalt-native-single", "raetsalt", {"native": True}, cases="abd"),
    # Case d without busy polling (docs/transport.md): the latency and CPU it trades.
    Variant("raetsalt-native-nospin", "raetsalt", {"native": True}, cases="d",
            worker={"busy_poll": 0.0}),
    Variant("raetsalt-compat", "raetsalt", config_if_known={"native": False}),
    Variant("raet-0.6.8", "raet", cases="abcdef"),
    Variant("zmq-curve", "zmq", cases="abcdef", worker={"codec": "msgpack"}),
    Variant("zmq-curve-json", "zmq", cases="abcd", worker={"codec": "json"}),
    Variant("zmq-raw", "zmq", cases="abcd", worker={"codec": "raw"}),
]
RAET, ZMQ = "raet-0.6.8", "zmq-curve"

# Messages per run (per variant kind), window of undelivered messages, and per-run caps.
# Keyed by variant name first, then by kind.  The native profile gets ZeroMQ-sized runs:
# at its speed 3000 messages last a few milliseconds and measure only the ramp-up.
COUNTS = {
    "raetsalt-native": {"a": 50000, "b": 50000, "c": 100, "d": 3000, "h": 500, "E": 10},
    "raetsalt-native-single": {"a": 50000, "b": 50000, "d": 3000},
    "raetsalt-native-nospin": {"d": 3000},
    "raetsalt": {"a": 3000, "b": 2000, "c": 10, "d": 1000, "h": 50, "E": 3},
    "raet": {"a": 1000, "b": 600, "c": 3, "d": 300},
    "zmq": {"a": 50000, "b": 50000, "c": 300, "d": 3000},
}
QUICK_DIVISOR = 10
WINDOWS = {
    "raetsalt-native": {"a": 8192, "b": 4096, "c": 8, "E": 8},
    "raetsalt-native-single": {"a": 8192, "b": 4096},
    "raetsalt": {"a": 64, "b": 64, "c": 2, "E": 2},
    "raet": {"a": 32, "b": 32, "c": 1},
    "zmq": {},
}
SIZES = {"a": 100, "b": 1024, "c": MiB, "d": 100, "h": 100, "E": MiB}
HOL_BULK = 4
"""1 MiB messages kept outstanding during case h."""
JOIN_NS = [(1, 3), (100, 3), (1000, 1)]  # (N, repetitions)
QUICK_JOIN_NS = [(1, 1), (20, 1)]
LOSS = 0.10
RUN_TIMEOUT = 40.0
"""Seconds a worker may spend on its part of one run before it gives up."""
JOIN_TIMEOUT = 30.0
"""Seconds the N estates get to be allowed (raet 0.6.8 does not always make it at N = 1000)."""
HOLD_RSS = 1.0
"""Seconds the main keeps serving its N allowed remotes before its peak RSS is read."""


class BenchError(RuntimeError):
    pass


class Proc:
    """A worker process speaking JSON lines on stdout; stdin EOF tells it to stop."""

    def __init__(self, argv: list[str], label: str) -> None:
        self.label = label
        self._err = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, cwd=ROOT
        )
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._lines.put(json.loads(raw))
        self._lines.put(None)

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-2000:]

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise BenchError(
                    f"{self.label}: no {event!r} within {timeout:.0f} s\n{self.stderr()}"
                ) from None
            if line is None:
                raise BenchError(f"{self.label}: exited before {event!r}\n{self.stderr()}")
            if line.get("event") == event:
                return line

    def eof(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()

    def stop(self, timeout: float = 5.0) -> None:
        self.eof()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._err.close()


DATAGRAM_SIZE: dict[str, int] = {}
"""``--datagram-size``: native datagram size overrides for every raetsalt variant."""


def worker(role: str, variant: Variant, opts: dict[str, Any], label: str) -> Proc:
    config = {**variant.road_config(), **(DATAGRAM_SIZE if variant.kind == "raetsalt" else {})}
    opts = {"timeout": RUN_TIMEOUT, "config": config, **variant.worker, **opts}
    return Proc(
        [sys.executable, WORKER, role, variant.kind, json.dumps(opts)], f"{variant.name} {label}"
    )


@contextlib.contextmanager
def processes() -> Any:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            proc.stop()


def run_messages(
    variant: Variant,
    tmp: str,
    size: int,
    count: int,
    window: int,
    loss: float | None = None,
    profile: str | None = None,
) -> dict[str, Any]:
    base = {"tmp": tmp, "size": size, "count": count, "window": window}
    with processes() as procs:
        extra = {"profile_out": f"{profile}-recv.prof"} if profile else {}
        server = worker("recv", variant, {**base, **extra}, "receiver")
        procs.append(server)
        ready = server.expect("ready", 30)
        peer = ready["ha"]
        relay_stats: dict[str, Any] = {}
        if loss is not None:
            relay = Proc([sys.executable, RELAY, f"{peer[0]}:{peer[1]}", str(loss)], "relay")
            procs.append(relay)
            peer = relay.expect("ready", 10)["ha"]
        extra = {"profile_out": f"{profile}-send.prof"} if profile else {}
        client = worker(
            "send", variant, {**base, **extra, "peer": peer, "key": ready.get("key")}, "sender"
        )
        procs.append(client)
        received = server.expect("result", RUN_TIMEOUT + 20)
        client.eof()
        sent = client.expect("result", RUN_TIMEOUT + 20)
        if loss is not None:
            relay.eof()
            relay_stats = relay.expect("final", 5)
    elapsed = received["t_last"] - sent["t0"] if received.get("t_first") else float("nan")
    ok = (
        bool(received.get("verified"))
        and sent.get("delivered") == count
        and not received.get("error")
    )
    cpu = received["cpu"] + sent["cpu"]
    rate = count / elapsed if ok and elapsed > 0 else None
    return {
        "ok": ok,
        "msg_per_s": rate,
        "mb_per_s": rate * size / 1e6 if rate else None,
        "cpu_s": cpu,
        "cpu_s_per_msg": cpu / count,
        "cpu_s_per_mb": cpu / (count * size / 1e6),
        "out_of_order": received.get("out_of_order"),
        "error": received.get("error") or sent.get("error"),
        "relay": relay_stats or None,
        "tx_datagrams": (sent.get("stats") or {}).get("tx"),
    }


def request_response(
    variant: Variant, tmp: str, roles: tuple[str, str], options: dict[str, Any]
) -> dict[str, Any]:
    """Run a server role and a client role against it; the client's result."""
    server_role, client_role = roles
    with processes() as procs:
        server = worker(server_role, variant, {"tmp": tmp}, server_role)
        procs.append(server)
        ready = server.expect("ready", 30)
        options = {"tmp": tmp, "peer": ready["ha"], "key": ready.get("key"), **options}
        client = worker(client_role, variant, options, client_role)
        procs.append(client)
        result: dict[str, Any] = client.expect("result", RUN_TIMEOUT + 20)
        if server_role == "echo":  # what answering cost the server (busy polling included)
            server.eof()
            result["cpu_server"] = server.expect("final", 20).get("cpu")
        return result


def run_rtt(variant: Variant, tmp: str, count: int) -> dict[str, Any]:
    result = request_response(variant, tmp, ("echo", "ping"), {"size": 100, "count": count})
    server = result.get("cpu_server")
    return {
        "ok": bool(result["verified"]),
        "p50_us": result["p50_us"],
        "p99_us": result["p99_us"],
        "cpu_s_client": result["cpu"],
        "cpu_us_per_rtt": (result["cpu"] + server) / count * 1e6 if server is not None else None,
    }


def run_hol(variant: Variant, tmp: str, count: int) -> dict[str, Any]:
    options = {"size": 100, "count": count, "bulk": HOL_BULK}
    result = request_response(variant, tmp, ("hol-echo", "hol-ping"), options)
    keys = ("idle_p50_us", "p50_us", "p99_us", "bulk_mb_per_s")
    return {"ok": bool(result["verified"]), **{key: result[key] for key in keys}}


def run_join(variant: Variant, tmp: str, n: int) -> dict[str, Any]:
    with processes() as procs:
        main = worker(
            "main", variant, {"tmp": tmp, "n": n, "timeout": JOIN_TIMEOUT + 60}, f"main N={n}"
        )
        procs.append(main)
        ready = main.expect("ready", 30)
        fleet = worker(
            "fleet",
            variant,
            {
                "tmp": tmp,
                "n": n,
                "peer": ready["ha"],
                "key": ready.get("key"),
                "timeout": JOIN_TIMEOUT,
            },
            f"fleet N={n}",
        )
        procs.append(fleet)
        fleet.expect("created", 120)
        at_fleet = fleet.expect("result", JOIN_TIMEOUT + 20)
        if at_fleet.get("error"):
            main.eof()  # the fleet gave up: the main reports how many it allowed
        at_main = main.expect("result", 20)
        time.sleep(HOLD_RSS)  # the main keeps serving its N remotes (presence) meanwhile
        main.eof()
        final = main.expect("final", 15)
    ok = not at_main.get("error") and not at_fleet.get("error") and at_main.get("allowed") == n
    if not ok:
        raise BenchError(
            f"only {at_main.get('allowed')}/{n} allowed at the main within {JOIN_TIMEOUT:.0f} s"
        )
    end = max(at_main.get("t_all", 0.0), at_fleet.get("t_all", 0.0))
    return {
        "ok": ok,
        "seconds": end - at_fleet["t0"] if ok else None,
        "cpu_s_main": at_main.get("cpu"),
        "cpu_s_fleet": at_fleet.get("cpu"),
        "rss_base_kib": ready.get("maxrss_kib"),
        "rss_peak_kib": final.get("maxrss_kib"),
        "remotes": final.get("remotes"),
        "error": at_main.get("error") or at_fleet.get("error"),
    }


def median(values: list[float | None]) -> float | None:
    good = [v for v in values if v is not None]
    return statistics.median(good) if good else None


def summarize(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs), "ok_runs": sum(1 for r in runs if r["ok"])}
    for key in keys:
        good = [r[key] for r in runs if r["ok"] and r.get(key) is not None]
        out[key] = median(good)
        if len(good) > 1:
            out[f"{key}_spread"] = [min(good), max(good)]
    errors = [r["error"] for r in runs if r.get("error")]
    if errors:
        out["errors"] = errors[:3]
    return out


def repeat(reps: int, fn: Callable[[], dict[str, Any]], label: str) -> list[dict[str, Any]]:
    runs = []
    for _ in range(reps):
        try:
            runs.append(fn())
        except BenchError as exc:
            print(f"  ! {label}: {exc}", file=sys.stderr)
            runs.append({"ok": False, "error": str(exc).splitlines()[0]})
    return runs


PAIRED = "abcd"
"""Cases whose repetitions run variant after variant (one run of each, then the next
repetition), so each of our runs has a ZeroMQ run right beside it to be divided by."""
PAIR_KEYS = {"a": "msg_per_s", "b": "msg_per_s", "c": "mb_per_s", "d": "p50_us"}


def one_run(variant: Variant, case: str, tmp: str, args: argparse.Namespace) -> dict[str, Any]:
    """One repetition of a paired case (a, b, c, d) for one variant."""
    kind = variant.name if variant.name in COUNTS else variant.kind
    scale = QUICK_DIVISOR if args.quick else 1
    label = f"{variant.name} case {case}"
    if case in "abc":
        count = max(1, COUNTS[kind][case] // scale)
        window = WINDOWS[kind].get(case, 0)
        runs = repeat(1, lambda: run_messages(variant, tmp, SIZES[case], count, window), label)
    else:
        count = max(10, COUNTS[kind][case] // scale)
        runs = repeat(1, lambda: run_rtt(variant, tmp, count), label)
    return {**runs[0], "count": count}


def summarize_paired(case: str, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if case == "d":
        keys = ["p50_us", "p99_us", "cpu_s_client", "cpu_us_per_rtt"]
        return [{"count": runs[0]["count"], **summarize(runs, keys)}]
    keys = ["msg_per_s", "mb_per_s", "cpu_s_per_msg", "cpu_s_per_mb", "out_of_order"]
    size = SIZES[case]
    return [{"count": runs[0]["count"], "size": size, **summarize(runs, keys)}]


def pair_ratios(
    case: str, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> list[float]:
    """Ours / theirs for each repetition where both ran (theirs / ours for latency)."""
    key = PAIR_KEYS[case]
    out = []
    for mine, other in zip(ours, theirs, strict=False):
        if mine.get("ok") and other.get("ok"):
            r = ratio(mine.get(key), other.get(key), case == "d")
            if r is not None:
                out.append(r)
    return out


def measure(
    variant: Variant, case: str, tmp: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Results of one unpaired case (h, e, f, E) for one variant: one dict per sub-case
    (N for e)."""
    kind = variant.name if variant.name in COUNTS else variant.kind
    reps = 1 if args.quick else args.reps
    scale = QUICK_DIVISOR if args.quick else 1
    label = f"{variant.name} case {case}"
    if case == "h":
        count = max(10, COUNTS[kind][case] // scale)
        runs = repeat(reps, lambda: run_hol(variant, tmp, count), label)
        keys = ["idle_p50_us", "p50_us", "p99_us", "bulk_mb_per_s"]
        return [{"count": count, "bulk": HOL_BULK, **summarize(runs, keys)}]
    if case in "ef":
        results = []
        for n, n_reps in QUICK_JOIN_NS if args.quick else JOIN_NS:
            runs = repeat(n_reps, lambda n=n: run_join(variant, tmp, n), f"{label} N={n}")
            keys = ["seconds", "cpu_s_main", "cpu_s_fleet", "rss_base_kib", "rss_peak_kib"]
            results.append({"n": n, **summarize(runs, keys)})
        return results
    if case == "E":
        count = max(2, COUNTS[kind][case] // (2 if args.quick else 1))
        window = WINDOWS[kind][case]
        out = {}
        for loss in (0.0, LOSS):
            runs = repeat(
                reps,
                lambda loss=loss: run_messages(variant, tmp, MiB, count, window, loss),
                label,
            )
            out[loss] = summarize(runs, ["mb_per_s", "cpu_s_per_mb"])
            relays = [r["relay"] for r in runs if r.get("relay")]
            if relays:
                out[loss]["relay_dropped"] = relays[-1].get("dropped")
                out[loss]["relay_forwarded"] = relays[-1].get("forwarded")
        clean, lossy = out[0.0].get("mb_per_s"), out[LOSS].get("mb_per_s")
        lossy_runs = out[LOSS].get("mb_per_s_spread")
        return [
            {
                "count": count,
                "loss": LOSS,
                "clean": out[0.0],
                "lossy": out[LOSS],
                "retained": lossy / clean if clean and lossy else None,
                "retained_spread": (
                    [v / clean for v in lossy_runs] if clean and lossy_runs else None
                ),
                "target_retained": 0.8,
            }
        ]
    raise ValueError(case)


# -------------------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if digits == 0 and abs(value) >= 100:
        return f"{value:,.0f}"
    return (
        f"{value:.{max(digits, 2 if abs(value) < 100 else 1)}g}"
        if digits < 0
        else f"{value:.{digits}f}"
    )


def ratio(ours: float | None, theirs: float | None, lower_is_better: bool = False) -> float | None:
    if not ours or not theirs:
        return None
    return theirs / ours if lower_is_better else ours / theirs


METRICS: dict[str, list[tuple[str, str, bool, int]]] = {
    # case -> (row label, key, lower is better, decimals)
    "a": [("100 B msg/s", "msg_per_s", False, 0), ("  CPU ms/msg", "cpu_s_per_msg", True, 3)],
    "b": [
        ("1 KiB msg/s", "msg_per_s", False, 0),
        ("  CPU ms/msg", "cpu_s_per_msg", True, 3),
        ("  CPU s/MB", "cpu_s_per_mb", True, 3),
    ],
    "c": [("1 MiB MB/s", "mb_per_s", False, 2), ("  CPU s/MB", "cpu_s_per_mb", True, 3)],
    "d": [
        ("RTT p50 us", "p50_us", True, 0),
        ("RTT p99 us", "p99_us", True, 0),
        ("  CPU us/RTT (both)", "cpu_us_per_rtt", True, 0),
    ],
    "h": [
        ("HOL idle p50 us", "idle_p50_us", True, 0),
        ("HOL p50 us (4x1MiB)", "p50_us", True, 0),
        ("HOL p99 us (4x1MiB)", "p99_us", True, 0),
        ("  bulk MB/s meanwhile", "bulk_mb_per_s", False, 1),
    ],
}


def cell(value: float | None, key: str, digits: int) -> str:
    if value is None:
        return "-"
    if key == "cpu_s_per_msg":
        value *= 1000  # shown in ms
    return f"{value:,.{digits}f}"


def print_table(
    results: dict[str, dict[str, list[dict[str, Any]]]],
    variants: list[Variant],
    skipped: dict[str, str],
) -> None:
    names = [v.name for v in variants]
    ours = [v.name for v in variants if v.kind == "raetsalt" and v.name not in skipped]
    header = (
        ["case"]
        + names
        + [
            f"{o} x{other.split('-')[0]}"
            for o in ours
            for other in (RAET, ZMQ)
            if other in names and other not in skipped
        ]
    )
    rows: list[list[str]] = []

    def get(name: str, case: str, index: int = 0) -> dict[str, Any]:
        found = results.get(name, {}).get(case) or []
        return found[index] if index < len(found) else {}

    def add_row(
        label: str,
        values: dict[str, float | None],
        lower: bool,
        fmtv: Callable[[float | None], str],
        counts: dict[str, str] | None = None,
    ) -> None:
        row = [label]
        for name in names:
            if name in skipped:
                row.append("n/a")
            else:
                text = fmtv(values.get(name))
                if counts and name in counts:
                    text += f" ({counts[name]})"
                row.append(text)
        for o in ours:
            for other in (RAET, ZMQ):
                if other in names and other not in skipped:
                    r = ratio(values.get(o), values.get(other), lower)
                    row.append("-" if r is None else f"{r:.2f}")
        rows.append(row)

    for case, metrics in METRICS.items():
        if not any(case in results.get(n, {}) for n in names):
            continue
        for label, key, lower, digits in metrics:
            values = {n: get(n, case).get(key) for n in names}
            counts = (
                {n: str(get(n, case).get("count")) for n in names if get(n, case)}
                if key in ("msg_per_s", "mb_per_s", "p50_us")
                else None
            )
            add_row(label, values, lower, lambda v, k=key, d=digits: cell(v, k, d), counts)
    if any("e" in results.get(n, {}) or "f" in results.get(n, {}) for n in names):
        case = "e" if any("e" in results.get(n, {}) for n in names) else "f"
        join_ns = sorted({sub["n"] for n in names for sub in results.get(n, {}).get(case) or []})
        for index, n_remotes in enumerate(join_ns):
            values = {n: get(n, case, index).get("seconds") for n in names}
            fails = {
                n: "failed: " + get(n, case, index)["errors"][0][:40]
                for n in names
                if get(n, case, index).get("ok_runs") == 0 and get(n, case, index).get("errors")
            }
            add_row(f"join+allow N={n_remotes} s", values, True, lambda v: cell(v, "s", 3))
            for n, why in fails.items():
                rows[-1][1 + names.index(n)] = why
            cpu = {
                n: (get(n, case, index).get("cpu_s_main") or 0)
                + (get(n, case, index).get("cpu_s_fleet") or 0)
                or None
                for n in names
            }
            add_row("  CPU s (main+fleet)", cpu, True, lambda v: cell(v, "s", 3))
        last = {n: (results.get(n, {}).get(case) or [{}])[-1] for n in names}
        rss = {
            n: (v.get("rss_peak_kib") / 1024 if v.get("rss_peak_kib") else None)
            for n, v in last.items()
        }
        label_n = next((v.get("n") for v in last.values() if v.get("n")), "?")
        add_row(f"main peak RSS MiB N={label_n}", rss, True, lambda v: cell(v, "", 1))
    for name in names:
        found = results.get(name, {}).get("E")
        if found:
            e = found[0]
            rows.append(
                [
                    f"E 1 MiB MB/s 0%/{int(LOSS * 100)}% loss ({name})",
                    f"{cell(e['clean'].get('mb_per_s'), '', 2)} / "
                    f"{cell(e['lossy'].get('mb_per_s'), '', 2)}",
                    f"retained {cell(e['retained'], '', 2)} "
                    f"[{spread_text(e.get('retained_spread'), 2)}] (target >= 0.80)",
                ]
            )
    widths = [
        max(len(r[i]) if i < len(r) else 0 for r in [header, *rows]) for i in range(len(header))
    ]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=False)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
    print("\n(n) = messages per run; xraet / xzmq = ours vs theirs, > 1 is better for us.")
    for name, why in skipped.items():
        print(f"n/a {name}: {why}")


def spread_text(spread: list[float] | None, digits: int) -> str:
    if not spread:
        return "-"
    return f"{spread[0]:,.{digits}f}-{spread[1]:,.{digits}f}"


def print_spread(
    results: dict[str, dict[str, list[dict[str, Any]]]],
    pairs: dict[str, dict[str, list[float]]],
    variants: list[Variant],
    skipped: dict[str, str],
) -> None:
    """Per paired case and variant: the median and the spread (lowest-highest) of the
    repetitions, and for ours the ratio against ZeroMQ of each pair run back to back."""
    labels = {"a": "100 B msg/s", "b": "1 KiB msg/s", "c": "1 MiB MB/s", "d": "RTT p50 us"}
    print("\nmedian [lowest-highest] of the runs; x zmq: median [lowest-highest] of the ratios"
          " of the pairs run back to back (> 1 is better for us)")
    for case in PAIRED:
        key = PAIR_KEYS[case]
        for v in variants:
            found = results.get(v.name, {}).get(case)
            if v.name in skipped or not found:
                continue
            sub = found[0]
            digits = 2 if case == "c" else 0
            text = (
                f"  {labels[case]:12} {v.name:24} {cell(sub.get(key), key, digits):>10} "
                f"[{spread_text(sub.get(f'{key}_spread'), digits)}]  ok {sub['ok_runs']}/"
                f"{sub['runs']}"
            )
            ratios = pairs.get(v.name, {}).get(case)
            if ratios:
                text += (
                    f"  x zmq {statistics.median(ratios):.2f} "
                    f"[{min(ratios):.2f}-{max(ratios):.2f}] ({len(ratios)} pairs)"
                )
            print(text)


def emit_json(results: dict[str, dict[str, list[dict[str, Any]]]], meta: dict[str, Any]) -> None:
    def value(name: str, case: str, key: str, index: int = 0) -> float | None:
        found = results.get(name, {}).get(case) or []
        return found[index].get(key) if index < len(found) else None

    lower_keys = {"p50_us", "p99_us", "seconds", "rss_peak_kib", "cpu_s_per_msg", "cpu_s_per_mb"}
    for name, cases in results.items():
        for case, subs in cases.items():
            for index, sub in enumerate(subs):
                record = {"bench": "road", "case": case, "variant": name, **sub}
                for other in (RAET, ZMQ):
                    if other == name or other not in results:
                        continue
                    ratios = {}
                    for key in (
                        "msg_per_s",
                        "mb_per_s",
                        "p50_us",
                        "p99_us",
                        "seconds",
                        "rss_peak_kib",
                        "cpu_s_per_msg",
                        "cpu_s_per_mb",
                    ):
                        if key in sub:
                            r = ratio(
                                sub.get(key), value(other, case, key, index), key in lower_keys
                            )
                            if r is not None:
                                ratios[key] = round(r, 3)
                    if ratios:
                        record[f"ratio_vs_{other.split('-')[0]}"] = ratios
                record.update(meta)
                print(json.dumps(record, separators=(",", ":"), default=str))


def print_profiles(tmp: str, args: argparse.Namespace) -> None:
    import pstats

    variant = next(v for v in VARIANTS if v.name == "raetsalt-compat")
    for case in "ac":
        count = max(1, COUNTS["raetsalt"][case] // (QUICK_DIVISOR if args.quick else 1))
        prefix = os.path.join(args.profile, f"road-{case}")
        result = run_messages(
            variant, tmp, SIZES[case], count, WINDOWS["raetsalt"][case], profile=prefix
        )
        print(
            f"\n### cProfile raetsalt-compat case {case} ({SIZES[case]} B x {count}): "
            f"{fmt(result['msg_per_s'], 1)} msg/s under the profiler"
        )
        for side in ("send", "recv"):
            print(f"--- {side}er, top 14 by own time")
            stats = pstats.Stats(f"{prefix}-{side}.prof")
            stats.sort_stats("tottime").print_stats(14)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one repetition (smoke)")
    parser.add_argument(
        "--cases", default="a,b,c,d,h,e,f,E", help="comma list of a,b,c,d,h,e,f,E"
    )
    parser.add_argument("--skip-raet", action="store_true")
    parser.add_argument("--skip-zmq", action="store_true")
    parser.add_argument("--variants", default="", help="comma list of variant names (default: all)")
    parser.add_argument(
        "--reps", type=int, default=5, help="repetitions per case (N=1000 joins: 1)"
    )
    parser.add_argument(
        "--profile", metavar="DIR", help="only profile raetsalt-compat cases a and c"
    )
    parser.add_argument("--json-only", action="store_true")
    parser.add_argument(
        "--datagram-size",
        type=int,
        metavar="N",
        help="native datagram size on loopback too (1400: what a real network gets)",
    )
    args = parser.parse_args(argv)
    if args.datagram_size:
        DATAGRAM_SIZE.update(
            native_datagram_size=args.datagram_size,
            native_loopback_datagram_size=args.datagram_size,
        )
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    bad = [c for c in cases if c not in "abcdhefE" or len(c) != 1]
    if bad:
        parser.error(f"unknown cases {bad}")
    if "f" in cases and "e" in cases:
        cases.remove("f")  # f is read from e's N = 1000 run
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    tmp = tempfile.mkdtemp(prefix="bench-road-", dir=base)
    try:
        if args.profile:
            os.makedirs(args.profile, exist_ok=True)
            print_profiles(tmp, args)
            return 0
        chosen = [v for v in VARIANTS if not args.variants or v.name in args.variants.split(",")]
        skipped: dict[str, str] = {}
        for v in chosen:
            why = v.missing()
            if (v.kind == "raet" and args.skip_raet) or (v.kind == "zmq" and args.skip_zmq):
                why = "skipped by option"
            if why:
                skipped[v.name] = why
        started = time.monotonic()
        meta = {
            "quick": args.quick,
            "host": os.uname().nodename,
            "cpus": os.cpu_count(),
            "loadavg_start": round(os.getloadavg()[0], 2),
            "keeps": f"{base or '/tmp'} (raetsalt durable=False)",
            "datagram_size": args.datagram_size,
        }
        results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        pairs: dict[str, dict[str, list[float]]] = {}
        for case in cases:
            if case in PAIRED:
                runnable = [v for v in chosen if v.name not in skipped and case in v.cases]
                t = time.monotonic()
                raw: dict[str, list[dict[str, Any]]] = {v.name: [] for v in runnable}
                for _ in range(1 if args.quick else args.reps):
                    for v in runnable:
                        raw[v.name].append(one_run(v, case, tmp, args))
                for v in runnable:
                    results.setdefault(v.name, {})[case] = summarize_paired(case, raw[v.name])
                    if v.kind == "raetsalt" and ZMQ in raw:
                        pairs.setdefault(v.name, {})[case] = pair_ratios(
                            case, raw[v.name], raw[ZMQ]
                        )
                if not args.json_only:
                    print(f"  case {case}: {time.monotonic() - t:5.1f} s", file=sys.stderr,
                          flush=True)
                continue
            for v in chosen:
                if v.name in skipped or case not in v.cases:
                    continue
                t = time.monotonic()
                results.setdefault(v.name, {})[case] = measure(v, case, tmp, args)
                if not args.json_only:
                    print(
                        f"  {v.name:16} case {case}: {time.monotonic() - t:5.1f} s",
                        file=sys.stderr,
                        flush=True,
                    )
        meta["wall_s"] = round(time.monotonic() - started, 1)
        meta["loadavg_end"] = round(os.getloadavg()[0], 2)
        if not args.json_only:
            print_table(results, chosen, skipped)
            print_spread(results, pairs, chosen, skipped)
            print(
                f"\nwall {meta['wall_s']} s, load average {meta['loadavg_start']} -> "
                f"{meta['loadavg_end']}, "
                f"keeps in {meta['keeps']}\n"
            )
        emit_json(results, meta)
        for name, by_case in pairs.items():
            for case, ratios in by_case.items():
                record = {"bench": "road", "case": case, "variant": name, "pairs_vs_zmq": ratios}
                print(json.dumps({**record, **meta}, separators=(",", ":"), default=str))
        kinds = {v.name: v.kind for v in VARIANTS}
        failed = [
            f"{n}:{c}"
            for n, cs in results.items()
            for c, subs in cs.items()
            for s in subs
            if s.get("ok_runs", 1) == 0 or s.get("clean", {}).get("ok_runs", 1) == 0
        ]
        ours = [f for f in failed if kinds[f.split(":")[0]] == "raetsalt"]
        if failed:
            print(f"no verified run: {', '.join(failed)}", file=sys.stderr)
        return 1 if ours else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
