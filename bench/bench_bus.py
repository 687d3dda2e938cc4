"""Event throughput: one emitter process to one listener process.

raetsalt: emitter -> bus host (``python -m raetsalt.event serve``) -> listener, the Salt API
(``SaltEvent.fire_event`` / ``MasterEvent.get_event``).  raet 0.6.8: a LaneStack emitter
yard sending straight to a LaneStack listener yard (raet has no bus; this is the same
one-to-one case over its lane, JSON bodies since its msgpack path is broken).

Each run: the listener subscribes and says ready; the emitter records the monotonic clock
(system-wide on Linux) and fires N events of ~60 bytes; the listener records the clock at
the last event.  events/s = N / (last - start).  Prints the median of --runs runs.

    .venv/bin/python bench/bench_bus.py [--count 50000] [--runs 3] [--skip-raet]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

RAETSALT_LISTENER = """
import sys, time
from raetsalt.event import MasterEvent
sock_dir, count = sys.argv[1], int(sys.argv[2])
event = MasterEvent(sock_dir)
print("ready", flush=True)
got = 0
while got < count:
    data = event.get_event(wait=20, tag="bench")
    if data is None:
        break
    got += 1
print(got, time.monotonic(), flush=True)
"""

RAETSALT_EMITTER = """
import sys, time
from raetsalt.event import SaltEvent
sock_dir, count = sys.argv[1], int(sys.argv[2])
event = SaltEvent("master", sock_dir)
event.connect_pull()
start = time.monotonic()
refused = 0
for n in range(count):
    if not event.fire_event({"n": n, "message": "a drop in the bucket"}, "bench"):
        refused += 1
print(start, refused, flush=True)
"""

RAET_PRELUDE = """
import sys, time
sys.path.insert(0, TESTS_DIR)
import raet_shim
raet = raet_shim.load()
raet_shim.mute_console()
from raet.lane import stacking, yarding
sock_dir, count = sys.argv[1], int(sys.argv[2])
"""

RAET_LISTENER = RAET_PRELUDE + """
stack = stacking.LaneStack(name="listener", lanename="bench", sockdirpath=sock_dir)
print("ready", flush=True)
got = 0
deadline = time.monotonic() + 60
while got < count and time.monotonic() < deadline:
    stack.serviceAll()
    while stack.rxMsgs:
        stack.rxMsgs.popleft()
        got += 1
print(got, time.monotonic(), flush=True)
stack.server.close()
"""

RAET_EMITTER = RAET_PRELUDE + """
stack = stacking.LaneStack(name="emitter", lanename="bench", sockdirpath=sock_dir)
remote = yarding.RemoteYard(stack=stack, lanename="bench", name="listener", dirpath=sock_dir)
stack.addRemote(remote)
start = time.monotonic()
for n in range(count):
    body = {"tag": "bench", "data": {"n": n, "message": "a drop in the bucket"}}
    stack.transmit(body, remote.uid)
    if n % 64 == 63:
        stack.serviceAll()
while stack.txMsgs or stack.txes:
    stack.serviceAll()
print(start, 0, flush=True)
stack.server.close()
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)


def _run_pair(
    listener_code: str, emitter_code: str, sock_dir: str, count: int
) -> tuple[float, int]:
    listener = _python(listener_code, sock_dir, str(count))
    assert listener.stdout is not None
    try:
        if listener.stdout.readline().strip() != "ready":
            raise RuntimeError("listener did not start")
        emitter = _python(emitter_code, sock_dir, str(count))
        out, _ = emitter.communicate(timeout=120)
        start = float(out.split()[0])
        got, end = listener.stdout.readline().split()
        return int(got) / (float(end) - start), int(got)
    finally:
        listener.kill()
        listener.wait()


def bench_raetsalt(count: int) -> tuple[float, int]:
    base = tempfile.mkdtemp(prefix="rsb", dir="/tmp")
    sock_dir = os.path.join(base, "s")
    host = subprocess.Popen([sys.executable, "-m", "raetsalt.event", "serve", "--node", "master",
                             "--sock-dir", sock_dir], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert host.stdout is not None
        if not host.stdout.readline().startswith("serving "):
            raise RuntimeError("bus host did not start")
        return _run_pair(RAETSALT_LISTENER, RAETSALT_EMITTER, sock_dir, count)
    finally:
        host.terminate()
        host.wait()
        shutil.rmtree(base, ignore_errors=True)


def bench_raet(count: int) -> tuple[float, int]:
    base = tempfile.mkdtemp(prefix="rab", dir="/tmp")
    tests = os.path.join(ROOT, "tests")
    try:
        return _run_pair(RAET_LISTENER.replace("TESTS_DIR", repr(tests)),
                         RAET_EMITTER.replace("TESTS_DIR", repr(tests)),
                         base, count)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=50000)
    parser.add_argument("--raet-count", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-raet", action="store_true")
    args = parser.parse_args()
    cases = [("raetsalt bus (emitter -> manor -> listener)", bench_raetsalt, args.count)]
    if not args.skip_raet:
        cases.append(("raet 0.6.8 LaneStack (emitter -> listener)", bench_raet, args.raet_count))
    for name, func, count in cases:
        rates = []
        for _ in range(args.runs):
            rate, got = func(count)
            rates.append(rate)
            if got != count:
                print(f"  warning: {name}: {got} of {count} events arrived")
        print(f"{name}: {statistics.median(rates):,.0f} events/s "
              f"(median of {args.runs}; runs: {', '.join(f'{r:,.0f}' for r in rates)}; "
              f"{count} events of ~60 B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
