"""How fast a daemon's loop wakes for a datagram: ``Waiter.wait`` on a socket that becomes
ready while the loop waits out a long tick.

    .venv/bin/python bench/bench_wakeup.py [--trials 200]

The functional tests check that a ready socket ends the wait; this measures how long it
takes (target: p50 well under a millisecond after the send, thread start-up included).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time

import raetsalt  # noqa: F401  (collections.abc before ioflo)
from raetsalt.flo.skedder import Waiter


class _Readable:
    """A ``Wakeable`` over one end of a socketpair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def register(self, selector: object, data: object = None) -> None:
        selector.register(self.sock, 1, data)  # type: ignore[attr-defined]

    def unregister(self, selector: object) -> None:
        selector.unregister(self.sock)  # type: ignore[attr-defined]

    def timeout(self) -> float | None:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    waiter = Waiter()
    a, b = socket.socketpair()
    delays: list[float] = []
    try:
        waiter.watch(_Readable(a))
        sent: list[float] = []

        def send() -> None:
            sent.append(time.perf_counter())
            b.send(b"x")

        for _ in range(args.trials):
            sender = threading.Timer(0.002, send)
            sender.start()
            if not waiter.wait(10.0):
                print("bench_wakeup: the wait ended without the datagram")
                return 1
            woke = time.perf_counter()
            sender.join()
            a.recv(16)
            delays.append(woke - sent[-1])
    finally:
        waiter.close()
        a.close()
        b.close()
    delays.sort()
    result = {
        "bench": "wakeup",
        "trials": args.trials,
        "p50_us": round(1e6 * statistics.median(delays), 1),
        "p99_us": round(1e6 * delays[int(0.99 * (len(delays) - 1))], 1),
    }
    print(f"wake-up after a datagram: p50 {result['p50_us']} us, p99 {result['p99_us']} us "
          f"over {args.trials} trials (target p50 < 1000 us)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
