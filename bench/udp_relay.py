"""A UDP relay that drops a given fraction of datagrams in each direction (bench case E).

    python bench/udp_relay.py HOST:PORT LOSS [SEED]

Binds a *front* socket (the address clients send to, printed in the ``ready`` line) and a
*back* socket that talks to the target HOST:PORT.  The first datagram on the front fixes
the client's address; datagrams are forwarded front -> back -> target and target -> back
-> front -> client, each independently dropped with probability LOSS (0..1) from a seeded
generator, so runs are repeatable.  Stops on stdin EOF and prints a ``final`` line with the
counts.  Both sockets get 4 MiB buffers, so the relay itself loses nothing extra.
"""

from __future__ import annotations

import json
import os
import random
import resource
import selectors
import socket
import sys


def main(argv: list[str]) -> int:
    host, _, port = argv[1].rpartition(":")
    target = (host, int(port))
    loss = float(argv[2])
    rng = random.Random(int(argv[3]) if len(argv) > 3 else 1)
    front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for sock in (front, back):
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, 4 * 1024 * 1024)
        sock.bind(("127.0.0.1", 0))
        sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(front, selectors.EVENT_READ, "front")
    sel.register(back, selectors.EVENT_READ, "back")
    stdin = sys.stdin.fileno()
    sel.register(stdin, selectors.EVENT_READ, "stdin")
    sys.stdout.write(json.dumps({"event": "ready", "ha": list(front.getsockname())}) + "\n")
    sys.stdout.flush()
    client = None
    counts = {"forwarded": 0, "dropped": 0, "send_error": 0}
    buf = bytearray(65536)
    while True:
        for key, _ in sel.select():
            if key.data == "stdin":
                if not os.read(stdin, 4096):
                    counts["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                    sys.stdout.write(json.dumps({"event": "final", **counts}) + "\n")
                    sys.stdout.flush()
                    return 0
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            while True:
                try:
                    size, source = sock.recvfrom_into(buf)
                except BlockingIOError:
                    break
                except OSError:
                    continue
                if key.data == "front":
                    client = source
                    out, dest = back, target
                elif client is None:
                    continue
                else:
                    out, dest = front, client
                if rng.random() < loss:
                    counts["dropped"] += 1
                    continue
                try:
                    out.sendto(buf[:size], dest)
                    counts["forwarded"] += 1
                except OSError:
                    counts["send_error"] += 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
