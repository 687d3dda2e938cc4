"""Salt's own ``LocalClient`` against a raetsalt master, beside raetsalt's clients.

    .venv/bin/python bench/bench_local_client.py [--rounds 40]

Starts a real ``raetsalt-master`` (``salt_local_clients: true``) and two minions, then,
round after round in the same run, times ``test.ping`` to both minions through:

* Salt 3008's unmodified ``salt.client.LocalClient(c_path=<conf>/master).cmd`` (one
  client kept for the whole run, in its own process: Salt's ZeroMQ request channel,
  Salt's event sockets served by the master);
* raetsalt's ``raetsalt.clients.LocalClient.cmd`` (the master's lane; the reactor's
  client), in the same process as Salt's;
* the ``raetsalt '*' test.ping`` command line (a new process per call, so its start-up
  counts, as it does for a user).

Prints the median, p10 and p90 of each (milliseconds) and the ratio of the medians.
Needs the salt extra.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from daemons.helpers import make_world  # noqa: E402

WORKER = """\
import json, sys, time
import salt.client
from raetsalt.clients import LocalClient as RaetLocal
from raetsalt.config import load_node_config
conf = sys.argv[1]
salt_client = salt.client.LocalClient(c_path=conf + "/master")
raet_client = RaetLocal(load_node_config(conf, "master"))
for line in sys.stdin:
    which = line.strip()
    start = time.perf_counter()
    if which == "salt":
        got = salt_client.cmd("*", "test.ping", timeout=30)
    else:
        got = raet_client.cmd("*", "test.ping", timeout=30)
    took = time.perf_counter() - start
    print(json.dumps({"which": which, "ms": took * 1000, "n": len(got)}), flush=True)
"""


def _stats(values: list[float]) -> str:
    values = sorted(values)
    p10 = values[len(values) // 10]
    p90 = values[(len(values) * 9) // 10]
    return f"median {statistics.median(values):7.1f}  p10 {p10:7.1f}  p90 {p90:7.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with make_world() as world:
        port = 20000 + os.getpid() % 30000
        conf = world.master_dir(f"auto_accept: true\nsalt_local_clients: true\n"
                                f"ret_port: {port}\n")
        master = world.start("master", conf)
        line = master.peek(("Salt's event sockets in", "not served"), 60)
        if line is None or "not served" in line:
            print("the request channel did not start:", line)
            return 1
        for name in ("minion1", "minion2"):
            minion = world.start("minion", world.minion_dir(name, name))
            minion.expect("connected to the master themaster", timeout=60)
        worker = subprocess.Popen([sys.executable, "-c", WORKER, str(conf)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert worker.stdin is not None and worker.stdout is not None
        times: dict[str, list[float]] = {"salt": [], "raet": [], "cli": []}
        with tempfile.TemporaryDirectory():
            for round_no in range(args.rounds + 2):
                for which in ("salt", "raet"):
                    worker.stdin.write(which + "\n")
                    worker.stdin.flush()
                    answer = json.loads(worker.stdout.readline())
                    assert answer["n"] == 2, answer
                    if round_no >= 2:  # the first rounds warm up (imports, connections)
                        times[which].append(answer["ms"])
                start = time.perf_counter()
                done = world.cli("salt", conf, "*", "test.ping", "--out", "json", "--static",
                                  "-t", "30")
                took = (time.perf_counter() - start) * 1000
                assert done.returncode == 0 and len(json.loads(done.stdout)) == 2, done
                if round_no >= 2:
                    times["cli"].append(took)
        worker.stdin.close()
        worker.wait(30)
        load = os.getloadavg()
        print(f"test.ping to 2 minions, {args.rounds} rounds interleaved, "
              f"load average {load[0]:.1f} (2 cores)")
        labels = {"salt": "Salt's LocalClient.cmd", "raet": "raetsalt.clients.cmd",
                  "cli": "raetsalt CLI (process)"}
        for which, label in labels.items():
            print(f"  {label:24s} {_stats(times[which])}  ms")
        salt_median = statistics.median(times["salt"])
        print(f"  ratio Salt LocalClient / raetsalt client: "
              f"{salt_median / statistics.median(times['raet']):.2f}; "
              f"Salt LocalClient / CLI: {salt_median / statistics.median(times['cli']):.2f}")
        master.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
