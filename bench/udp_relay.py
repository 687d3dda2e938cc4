"""A UDP relay between clients and one target: random loss, and optionally a bottleneck.

    python bench/udp_relay.py HOST:PORT LOSS [SEED] [--rate BYTES_PER_S] [--delay S]
                                                    [--queue N] [--move-after N]

Binds a *front* socket (the address clients send to, printed in the ``ready`` line) and,
per client, a *back* socket that talks to the target HOST:PORT, so the target sees each
client at its own address (as behind a NAT).  Datagrams go front -> back -> target and
target -> back -> front -> client, each direction dropped with probability LOSS (0..1)
from one seeded generator, so runs are repeatable.

Without ``--rate`` a datagram is forwarded at once (bench_road case E).  With it, each
direction is a bottleneck (``raetsalt.testing.fakenet.Bottleneck``, the FakeNet model in
real time): datagrams leave one after the other at the rate, wait in a drop-tail queue of
``--queue`` datagrams (dropped when it is full), then ``--delay`` seconds (one way) before
they are sent on; LOSS is the link's random loss, before the queue.  ``--move-after N``
gives a client a new back socket (a new address, as a NAT rebinding does) after its N-th
datagram to the target (address migration).

Stops on stdin EOF and prints a ``final`` line with the counts (per direction with a rate).
Every socket gets 4 MiB buffers, so the relay itself loses nothing extra.  At most
``MAX_CLIENTS`` clients get a back socket; datagrams of others are counted and dropped.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import resource
import selectors
import socket
import sys
import time
from typing import Any

from raetsalt.testing.fakenet import Bottleneck, Link

Address = tuple[str, int]
MAX_CLIENTS = 64
BUFFER = 4 * 1024 * 1024


def udp_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, BUFFER)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    return sock


class Relay:
    def __init__(self, target: Address, loss: float, seed: int, args: argparse.Namespace):
        self.target = target
        self.rng = random.Random(seed)
        self.loss = loss
        self.sel = selectors.DefaultSelector()
        self.front = udp_socket()
        self.sel.register(self.front, selectors.EVENT_READ, None)
        self.backs: dict[Address, socket.socket] = {}
        self.sent_by: dict[Address, int] = {}
        self.move_after: int = args.move_after
        self.counts = {"forwarded": 0, "dropped": 0, "send_error": 0, "refused": 0, "moved": 0}
        self.links: dict[str, Bottleneck] = {}
        if args.rate:
            for direction in ("up", "down"):
                self.links[direction] = Bottleneck(Link(args.rate, args.delay, args.queue, loss))
        self._due: list[tuple[float, int, socket.socket, Address, bytes]] = []
        self._seq = itertools.count()

    def back(self, client: Address) -> socket.socket | None:
        sock = self.backs.get(client)
        moved = self.move_after and self.sent_by.get(client) == self.move_after
        if sock is None or moved:
            if sock is None and len(self.backs) >= MAX_CLIENTS:
                self.counts["refused"] += 1
                return None
            if sock is not None:  # the NAT rebinds: the old mapping is gone
                self.sel.unregister(sock)
                sock.close()
                self.counts["moved"] += 1
            sock = self.backs[client] = udp_socket()
            self.sel.register(sock, selectors.EVENT_READ, client)
        self.sent_by[client] = self.sent_by.get(client, 0) + 1
        return sock

    def forward(self, direction: str, data: bytes, out: socket.socket, dest: Address) -> None:
        link = self.links.get(direction)
        if link is None:
            if self.rng.random() < self.loss:
                self.counts["dropped"] += 1
                return
            self.send(out, data, dest)
            return
        leaves = link.admit(time.monotonic(), len(data), self.rng)
        if leaves is not None:
            heapq.heappush(self._due, (leaves, next(self._seq), out, dest, data))

    def send(self, out: socket.socket, data: bytes, dest: Address) -> None:
        try:
            out.sendto(data, dest)
            self.counts["forwarded"] += 1
        except OSError:
            self.counts["send_error"] += 1

    def send_due(self) -> float | None:
        """Send what is due; seconds until the next departure (None: nothing waits)."""
        due = self._due
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, out, dest, data = heapq.heappop(due)
            if out.fileno() >= 0:  # not a back socket closed by a move
                self.send(out, data, dest)
        return due[0][0] - now if due else None

    def read(self, sock: socket.socket, client: Address | None, buf: bytearray) -> None:
        while True:
            try:
                size, source = sock.recvfrom_into(buf)
            except BlockingIOError:
                return
            except OSError:
                if sock.fileno() < 0:
                    return  # a back socket closed by a move in this same pass
                continue  # an ICMP error, reported once
            data = bytes(buf[:size])
            if client is None:  # from a client, to the target
                back = self.back(source)
                if back is not None:
                    self.forward("up", data, back, self.target)
            elif self.backs.get(client) is sock:
                self.forward("down", data, self.front, client)

    def final(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.counts)
        for direction, link in self.links.items():
            out[direction] = {
                "forwarded": link.forwarded,
                "forwarded_bytes": link.forwarded_bytes,
                "dropped": link.dropped,
                "lost": link.lost,
                "peak_queue": link.peak_queue,
            }
        if self.links:  # the relay's own "dropped": what the links did not forward
            out["dropped"] = sum(link.dropped + link.lost for link in self.links.values())
        out["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return out

    def run(self) -> None:
        stdin = sys.stdin.fileno()
        self.sel.register(stdin, selectors.EVENT_READ, "stdin")
        emit({"event": "ready", "ha": list(self.front.getsockname())})
        buf = bytearray(65536)
        wait = None
        while True:
            for key, _ in self.sel.select(wait):
                if key.data == "stdin":
                    if not os.read(stdin, 4096):
                        emit({"event": "final", **self.final()})
                        return
                    continue
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                self.read(sock, key.data, buf)
            wait = self.send_due()


def emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("loss", type=float)
    parser.add_argument("seed", type=int, nargs="?", default=1)
    parser.add_argument("--rate", type=float, default=0.0, help="bytes per second (0: none)")
    parser.add_argument("--delay", type=float, default=0.0, help="one-way seconds")
    parser.add_argument("--queue", type=int, default=64, help="datagrams")
    parser.add_argument("--move-after", type=int, default=0, help="datagrams (0: never)")
    args = parser.parse_args(argv[1:])
    host, _, port = args.target.rpartition(":")
    Relay((host, int(port)), args.loss, args.seed, args).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
