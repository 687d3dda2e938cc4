"""An accepted minion that sends what a test tells it (hostile bodies, floods), built
from the same parts as ``raetsalt-minion`` (``open_node``, ``MinionLink``) but without
its job service, so nothing it sends is filtered.

    python rogue_minion.py CONFDIR send BODIES      # BODIES: a Python literal list
    python rogue_minion.py CONFDIR flood SIZE       # returns of SIZE bytes, for ever
    python rogue_minion.py CONFDIR rekey SECONDS    # key offers as fast as answered

Prints ``connected`` once the session with the master is up and ``sent N`` after each
burst.  ``send`` stops once the master answered a clock request sent after the bodies
(``delivered N``: on the same stream, so it served them first); ``flood`` sends about
``PACE`` returns a second and stops on SIGTERM; ``rekey`` offers the next session key
as soon as the master uses the last one (its channel's rotation interval set to 0, the
previous key dropped at once) for
SECONDS of its own clock, then prints ``rotations N in S s`` (the rotations the master
answered) and stops.  The bodies get their ``route`` here.
"""

from __future__ import annotations

import ast
import logging
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from raetsalt import protocol as p
from raetsalt.config import minion_config
from raetsalt.daemon.service import MinionLink, ensure_dirs, open_node
from raetsalt.engine.events import MessageDelivered, MessageReceived, TransactionFailed
from raetsalt.engine.native.channel import Channel

PACE = 400.0
"""Returns a second the flood aims at (24 MB/s of 60 KB returns)."""
BURST = 20
QUEUED = 2000


def main() -> int:
    confdir, mode, what = sys.argv[1], sys.argv[2], sys.argv[3]
    logging.basicConfig(level=logging.ERROR)
    opts = minion_config(Path(confdir) / "minion")
    ensure_dirs(opts)
    node = open_node(opts, "minion")
    link = MinionLink(node, opts)
    link.connect()
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    bodies: list[dict[str, Any]] = ast.literal_eval(what) if mode == "send" else []
    size = int(what) if mode == "flood" else 0
    rekey_until = rotations_at = 0.0
    first = 0
    sent = delivered = in_flight = 0
    next_burst = 0.0
    answered = False
    said_connected = False
    while not stop:
        timeout = node.timeout()
        select.select([node.stack.sock], [], [],
                      0.05 if timeout is None else min(timeout, 0.05))
        events = node.service_ready()
        link.handle(events)
        for event in events:
            if (isinstance(event, MessageReceived) and isinstance(event.body, dict)
                    and p.share_of(event.body) == p.SHARE_CLOCK):
                answered = True
            if isinstance(event, MessageDelivered):  # one event may confirm several
                in_flight -= event.count
                delivered += event.count
            elif isinstance(event, TransactionFailed) and event.kind == "message":
                in_flight -= 1
        if not link.connected or node.master is None:
            continue
        if not said_connected:
            said_connected = True
            print("connected", flush=True)
        if mode == "rekey":
            channel = node.stack.road.remote(node.master).channel
            assert isinstance(channel, Channel), "no native session"
            now = time.monotonic()
            if not rekey_until:
                rekey_until = now + float(what)
                rotations_at = now
                first = channel.keys.rotations
            keys = channel.keys
            keys.interval = 0.0  # the next offer as soon as this key is in use
            if keys.previous is not None and keys.retire_at is not None:
                keys.retire_at = 0.0  # the master uses the new key: drop the old one now
            channel._arm()  # wake at the new deadlines (the channel's own call)
            if now >= rekey_until:
                print(f"rotations {channel.keys.rotations - first} in {now - rotations_at:.3f} s",
                      flush=True)
                break
        if mode == "send" and sent < len(bodies):
            for body in bodies:
                share = body.pop("__share")
                node.stack.send(node.master, p.road_message(opts["id"], None, share, **body))
                sent += 1
                in_flight += 1
            # The master answers this after it served what came before (same stream).
            node.stack.send(node.master, p.road_message(opts["id"], None, p.SHARE_CLOCK_REQ))
            print(f"sent {sent}", flush=True)
        elif mode == "send" and answered:
            print(f"delivered {sent}", flush=True)
            break
        elif mode == "flood":
            # A burst per pass (about PACE a second), however few deliveries the road
            # reported (one event may confirm several messages, or none be reported for
            # some); at most QUEUED ahead of what was confirmed.
            now = time.monotonic()
            if now >= next_burst and sent - delivered < QUEUED:
                next_burst = now + BURST / PACE
                for _ in range(BURST):
                    body = p.road_message(opts["id"], None, p.SHARE_RETURN, jid=p.CALL_JID,
                                          fun="test.echo", fun_args=[],
                                          **{"return": "x" * size, "retcode": 0})
                    node.stack.send(node.master, body)
                    sent += 1
                print(f"sent {sent} delivered {delivered}", flush=True)
        # Send what this pass queued; a read here would hand events (the clock answer)
        # to nobody.
        node.flush()
    node.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
