"""``raetsalt-road``: talk RAET from a shell (to raetsalt or raet 0.6.8 estates).

    raetsalt-road listen --ha HOST:PORT --keep DIR [--name N] [--auto-accept] [--echo]
    raetsalt-road send   --to HOST:PORT [--ha HOST:PORT] [--keep DIR] [--name N]
                         [--wait] [--timeout S] JSON
    raetsalt-road ping   --to HOST:PORT [--ha HOST:PORT] [--keep DIR] [--name N]
                         [--count N] [--interval S] [--timeout S]

``listen`` runs a *main* estate (it accepts vacuous joins, like a Salt master) and prints
each received message on stdout as one JSON line ``{"from": NAME, "body": {...}}``;
``--echo`` sends every message back to its sender.  Keys of joining estates are held
*pending* in the keep until an operator accepts (or rejects, or deletes) them there and
sends ``listen`` a SIGHUP, which makes it apply the decisions recorded in its keep (it
never polls the files); ``--auto-accept`` accepts a
role's key the first time it is seen (auto mode ``once``: a later, different key for the
same role is still rejected, so it is not "accept anything").  A ``listening on`` line on
stderr gives the bound address (useful with port 0).

``send`` joins the estate at ``--to``, allows (handshake), sends one JSON object and waits
until it is acknowledged; ``--wait`` then waits for one message back and prints it like
``listen`` does.  ``ping`` joins and allows, then sends ``--count`` alive probes and prints
each round trip time.  Both accept the other side's key on first sight and cache it in
the keep (like a Salt minion caching the master's public key); without ``--keep`` they
use a fresh temporary keep (a new identity each run) that is deleted afterwards.

Exit status:
  0   success
  1   local failure (address in use, unreadable keep ...)
  2   bad arguments, or our key is pending on the other side ("accept it there")
  3   unreachable: no answer, or not delivered, within ``--timeout`` (default 10 s)
  77  refused or rejected by the other side, or its key differs from the cached one
      (like Salt's exit status for a rejected minion key)
  130 interrupted
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
from types import FrameType
from typing import Any

from raetsalt.cli._flags import add_version_flags
from raetsalt.drivers.clock import monotonic
from raetsalt.drivers.udp import Address, RoadStack, format_ha, parse_ha, resolve
from raetsalt.engine.events import (
    Allowed,
    Event,
    Joined,
    JoinPending,
    JoinRejected,
    MessageDelivered,
    MessageReceived,
    TransactionFailed,
)
from raetsalt.errors import RaetSaltError
from raetsalt.keep.records import AutoMode
from raetsalt.keep.store import FileKeep
from raetsalt.wire.enums import TransactionKind

PROG = "raetsalt-road"
EXIT_OK = 0
EXIT_LOCAL = 1
EXIT_PENDING = 2
EXIT_UNREACHABLE = 3
EXIT_REJECTED = 77
EXIT_INTERRUPTED = 130


class _Exit(Exception):
    """Leave ``main`` with ``code`` after printing ``message`` on stderr."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stop(BaseException):
    """Raised by the SIGTERM handler to leave a blocking select cleanly."""


def _note(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _default_name(suffix: str = "") -> str:
    host = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:64] or "host"
    return f"road-{host}{suffix}"


def _estate_name(keep: str, given: str | None, suffix: str = "") -> str | None:
    """The name to create the estate with: ``given``, else a default for a new keep only
    (an existing keep already names its estate)."""
    if given or FileKeep(keep).load_local() is not None:
        return given
    return _default_name(suffix)


def _ha_arg(text: str) -> Address:
    try:
        return parse_ha(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("the message must be a JSON object")
    return value


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__[__doc__.index("Exit status:"):],
    )
    add_version_flags(parser)
    sub = parser.add_subparsers(dest="command", required=True)

    listen = sub.add_parser("listen", help="run a main estate and print received messages")
    listen.add_argument("--ha", type=_ha_arg, required=True, help="HOST:PORT to bind")
    listen.add_argument("--keep", required=True, help="keep directory (created if missing)")
    listen.add_argument("--name", default=None, help="estate name for a new keep")
    listen.add_argument("--auto-accept", action="store_true",
                        help="accept a role's key when first seen (auto mode 'once')")
    listen.add_argument("--echo", action="store_true", help="send each message back")

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--to", type=_ha_arg, required=True, help="HOST:PORT of the estate")
    client.add_argument("--ha", type=_ha_arg, default=None,
                        help="HOST:PORT to bind (default: any address, a free port)")
    client.add_argument("--keep", default=None,
                        help="keep directory (default: a temporary one, deleted afterwards)")
    client.add_argument("--name", default=None, help="estate name for a new keep")
    client.add_argument("--timeout", type=_positive, default=10.0,
                        help="seconds to wait for each step (default 10)")

    send = sub.add_parser("send", parents=[client], help="send one JSON message")
    send.add_argument("--wait", action="store_true", help="wait for one reply and print it")
    send.add_argument("message", type=_json_object, metavar="JSON", help="a JSON object")

    ping = sub.add_parser("ping", parents=[client], help="measure alive round trips")
    ping.add_argument("--count", type=int, default=1, help="probes to send (default 1)")
    ping.add_argument("--interval", type=_positive, default=0.2,
                      help="seconds between probes (default 0.2)")
    return parser


def _print_message(event: MessageReceived) -> None:
    line = json.dumps({"from": event.remote, "body": event.body}, separators=(",", ":"))
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# -- listen ------------------------------------------------------------------------------

_HANGUP_CHECK = 0.5
"""Seconds between checks for a SIGHUP (the wait for datagrams is interrupted that often)."""


def _listen(args: argparse.Namespace) -> int:
    auto = AutoMode.ONCE if args.auto_accept else AutoMode.NEVER
    stack = RoadStack(args.keep, args.ha, name=_estate_name(args.keep, args.name), main=True,
                      auto=auto)
    with stack:
        _note(f"listening on {format_ha(stack.address)} as {stack.road.name} "
              f"(keep {args.keep}, auto-accept {auto.value})")

        def report(event: Event) -> None:
            if isinstance(event, JoinPending) and event.here:
                _note(f"key of role {event.role!r} ({event.remote}) is pending in "
                      f"{args.keep}: accept it to let the join finish")
            elif isinstance(event, JoinRejected) and event.here:
                _note(f"rejected the key of role {event.role!r} ({event.remote})")
            elif isinstance(event, Joined):
                _note(f"joined {event.remote}")
            elif isinstance(event, Allowed):
                _note(f"allowed {event.remote}")

        reread = False

        def on_hangup(signum: int, frame: object) -> None:
            nonlocal reread
            reread = True

        signal.signal(signal.SIGHUP, on_hangup)
        while True:
            for message in stack.messages(_HANGUP_CHECK, on_event=report):
                _print_message(message)
                if args.echo:
                    try:
                        stack.send(message.remote, message.body)
                    except RaetSaltError as exc:
                        _note(f"cannot echo to {message.remote}: {exc}")
            if reread:
                reread = False
                _note(f"re-read the keep: {stack.keep_decisions()} decision(s) applied")


# -- send / ping -------------------------------------------------------------------------


def _connect(stack: RoadStack, to: Address, timeout: float) -> int:
    """Join and allow the estate at ``to``; return its uid or raise ``_Exit``."""
    uid = stack.connect(to)
    where = format_ha(to)
    deadline = monotonic() + timeout
    while not stack.road.remote(uid).allowed:
        remaining = deadline - monotonic()
        if remaining <= 0:
            raise _Exit(EXIT_UNREACHABLE, f"no session with {where} within {timeout:g} s "
                        "(nothing listening, or packets lost)")
        for event in stack.service(remaining):
            _check_join(event, where, stack)
    return uid


def _check_join(event: Event, where: str, stack: RoadStack) -> None:
    if isinstance(event, JoinPending):
        if event.here:
            raise _Exit(EXIT_PENDING, f"key of {event.remote} is pending in our keep: "
                        "accept it there")
        raise _Exit(EXIT_PENDING, f"key pending on {where}: accept it there")
    if isinstance(event, JoinRejected):
        if event.here:
            raise _Exit(EXIT_REJECTED, f"the key of {event.remote} at {where} differs from "
                        "the one in our keep (rejected)")
        raise _Exit(EXIT_REJECTED, f"our key was rejected by {where}")
    if isinstance(event, TransactionFailed) and event.kind == "join" and event.reason in (
        "refused", "rejected", "name_taken"
    ):
        raise _Exit(EXIT_REJECTED, f"join refused by {where} ({event.reason})")


def _client_stack(args: argparse.Namespace, keep: str) -> RoadStack:
    family, to = resolve(args.to)
    args.to = to
    ha = args.ha or (("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0))
    # A temporary keep is a new identity each run: give it a fresh name too, or the other
    # side would see a known role presenting new keys and reject it.
    suffix = "" if args.keep else "-" + secrets.token_hex(4)
    return RoadStack(keep, ha, name=_estate_name(keep, args.name, suffix), main=False,
                     auto=AutoMode.ONCE)


def _send(args: argparse.Namespace, keep: str) -> int:
    with _client_stack(args, keep) as stack:
        uid = _connect(stack, args.to, args.timeout)
        name = stack.road.remote(uid).name
        mid = stack.send(uid, args.message)
        delivered = False
        reply: MessageReceived | None = None
        deadline = monotonic() + args.timeout
        while not delivered or (args.wait and reply is None):
            remaining = deadline - monotonic()
            if remaining <= 0:
                what = "no reply" if delivered else "message not acknowledged"
                raise _Exit(EXIT_UNREACHABLE, f"{what} from {name} within {args.timeout:g} s")
            for event in stack.service(remaining):
                if isinstance(event, MessageDelivered) and event.mid == mid:
                    delivered = True
                elif isinstance(event, TransactionFailed) and event.mid == mid:
                    raise _Exit(EXIT_UNREACHABLE, f"message not delivered to {name}: "
                                f"{event.reason}")
                elif isinstance(event, MessageReceived) and reply is None:
                    reply = event
        if reply is not None:
            _print_message(reply)
    return EXIT_OK


def _ping(args: argparse.Namespace, keep: str) -> int:
    with _client_stack(args, keep) as stack:
        t0 = monotonic()
        uid = _connect(stack, args.to, args.timeout)
        remote = stack.road.remote(uid)
        _note(f"session with {remote.name} at {format_ha(args.to)} in "
              f"{(monotonic() - t0) * 1e3:.1f} ms")
        rtts: list[float] = []
        for seq in range(1, args.count + 1):
            if seq > 1:
                _idle(stack, args.interval)
            rtt = _probe(stack, uid, args.timeout)
            if rtt is None:
                print(f"no answer from {remote.name}: seq={seq}", flush=True)
            else:
                rtts.append(rtt)
                print(f"alive from {remote.name} ({format_ha(args.to)}): seq={seq} "
                      f"time={rtt * 1e3:.3f} ms", flush=True)
        if rtts:
            print(f"{args.count} probes, {len(rtts)} answered, min/avg/max = "
                  f"{min(rtts) * 1e3:.3f}/{sum(rtts) / len(rtts) * 1e3:.3f}/"
                  f"{max(rtts) * 1e3:.3f} ms", flush=True)
    if not rtts:
        raise _Exit(EXIT_UNREACHABLE, f"no alive answered by {format_ha(args.to)}")
    return EXIT_OK


def _idle(stack: RoadStack, seconds: float) -> None:
    """Keep the stack serviced (acks, presence) for ``seconds``."""
    deadline = monotonic() + seconds
    while (remaining := deadline - monotonic()) > 0:
        stack.service(remaining)


def _probe(stack: RoadStack, uid: int, timeout: float) -> float | None:
    """One alive round trip in seconds, or None when it timed out or the session broke."""
    remote = stack.road.remote(uid)
    deadline = monotonic() + timeout
    # The road probes by itself after silence; let such a probe finish first, so the
    # round trip measured is our own request's.
    while remote.in_progress(TransactionKind.ALIVE) is not None:
        if (remaining := deadline - monotonic()) <= 0:
            return None
        stack.service(remaining)
    start = monotonic()
    stack.alive(uid)
    failed = False
    while remote.in_progress(TransactionKind.ALIVE) is not None:
        if (remaining := deadline - monotonic()) <= 0:
            return None
        for event in stack.service(remaining):
            if isinstance(event, TransactionFailed) and event.kind == "alive":
                failed = True
    end = monotonic()
    return None if failed or not remote.allowed else end - start


# -- entry point -------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)  # exits 2 on bad arguments
    logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(message)s")
    signal.signal(signal.SIGTERM, _on_sigterm)
    temp_keep: str | None = None
    try:
        if args.command == "listen":
            return _listen(args)
        keep = args.keep
        if keep is None:
            keep = temp_keep = tempfile.mkdtemp(prefix="raetsalt-road-")
        return _send(args, keep) if args.command == "send" else _ping(args, keep)
    except _Exit as exc:
        _note(str(exc))
        return exc.code
    except RaetSaltError as exc:
        _note(str(exc))
        return EXIT_LOCAL
    except (_Stop, KeyboardInterrupt):
        return EXIT_OK if args.command == "listen" else EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_LOCAL
    finally:
        if temp_keep is not None:
            shutil.rmtree(temp_keep, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
