"""``make demo``: what raetsalt can do so far, on loopback, step by step.

A main estate runs in its own process (``raetsalt-road listen --echo``); this process is a
second estate that joins it, allows a session and exchanges messages of 100 B, 64 KiB
and 1 MiB, then shows that a garbage datagram is dropped and counted while the session
keeps working, and a presence (alive) round trip.  Later stages of the project grow this
into the full master/minion story.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from raetsalt.drivers.udp import RoadStack
from raetsalt.engine.events import Allowed, Joined
from raetsalt.keep.records import AutoMode


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="raetsalt-demo-"))
    port = free_port()
    step(
        f"start a main estate in its own process on 127.0.0.1:{port} (keys accepted on first sight)"
    )
    listener = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "raetsalt.cli.road",
            "listen",
            "--ha",
            f"127.0.0.1:{port}",
            "--keep",
            str(root / "main"),
            "--name",
            "main",
            "--auto-accept",
            "--echo",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stderr is not None
        print("   " + listener.stderr.readline().strip())  # "listening on ..."
        with RoadStack(
            root / "minion", ("127.0.0.1", 0), name="minion", auto=AutoMode.ONCE
        ) as stack:
            step(
                f"estate 'minion' on {stack.address[0]}:{stack.address[1]} joins the main "
                "(long-term key exchange)"
            )
            started = time.perf_counter()
            stack.connect(("127.0.0.1", port))
            stack.run_until(lambda evs: any(isinstance(e, Joined) for e in evs), timeout=10)
            print(
                f"   joined in {1000 * (time.perf_counter() - started):.1f} ms; "
                f"the main's key is now in {root / 'minion'}"
            )
            stack.run_until(
                lambda evs: (
                    any(isinstance(e, Allowed) for e in evs) or stack.road.remote("main").allowed
                ),
                timeout=10,
            )
            print(
                "   allowed: short-term session keys agreed (hello/cookie/initiate/ack) "
                f"after {1000 * (time.perf_counter() - started):.1f} ms"
            )
            profile = stack.road.remote("main").profile
            wire = {
                "native": "native profile: both ends are raetsalt, so coalesced 64 KB datagrams, "
                "authenticated by the session box",
                "raet": "raet 0.6.8 format: 1 KiB packets, each encrypted and signed",
            }[profile]
            print(f"   wire format agreed inside the handshake: {wire}")

            for size in (100, 64 * 1024, 1024 * 1024):
                step(f"send a {size:,} byte message; the main echoes it back")
                payload = hashlib.sha256(str(size).encode()).hexdigest() * (size // 64 + 1)
                body = {"size": size, "data": payload[:size]}
                started = time.perf_counter()
                stack.send("main", body)
                reply = next(stack.messages(timeout=30))
                elapsed = time.perf_counter() - started
                assert reply.body == body, "echo differs from what was sent"
                print(
                    f"   echo verified in {1000 * elapsed:.1f} ms "
                    f"({2 * size / elapsed / 1e6:.1f} MB/s both ways, {profile} profile)"
                )

            step("an attacker sends two malformed datagrams to the minion")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
                for junk in (b"ri RAET\npl zz\n\n", os.urandom(300)):
                    attacker.sendto(junk, stack.address)
            stack.service(0.2)
            drops = {k: v for k, v in stack.road.stats.items() if k.startswith("drop_")}
            print(f"   dropped and counted, nothing answered: {drops}")
            stack.send("main", {"still": "working"})
            reply = next(stack.messages(timeout=10))
            print(f"   the session still works: {reply.body}")

            step("presence: an alive round trip")
            started = time.perf_counter()
            stack.alive(stack.road.remote("main").uid)
            stack.run_until(
                lambda evs: (
                    stack.road.remote("main").alive is True
                    and not stack.road.remote("main").transactions
                ),
                timeout=5,
            )
            print(f"   main is alive ({1000 * (time.perf_counter() - started):.2f} ms)")
        step("stop the main (SIGTERM)")
    finally:
        listener.send_signal(signal.SIGTERM)
        try:
            code = listener.wait(timeout=5)
        except subprocess.TimeoutExpired:
            listener.kill()
            code = listener.wait()
    print(f"   main exited with code {code}\n\ndone.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
