"""``raetsalt-run``: run a runner on the master (``manage.*``, ``jobs.*``).

    raetsalt-run [-c CONFDIR] [--out OUT] [-t TIMEOUT] FUN [ARG ...]

Talks to the local ``raetsalt-master`` over its lane.  Prints the runner's return with
``--out`` (default nested; a return of the form ``{"outputter": O, "data": D}``, as
``jobs.lookup_jid`` gives for failed jobs, prints ``D`` with ``O``).  Exit codes: 0; 1
when the runner failed or does not exist (the message goes to stderr); 2 when the master
cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from raetsalt.execution.args import parse_input
from raetsalt.services import protocol as p
from raetsalt.services.client import DaemonUnavailable

from ._auth import AuthProblem, MasterClient, add_auth_options, credentials, open_master
from ._common import EX_CLIENT, EX_GENERIC, EX_OK, add_common, load_opts, show, wire_safe

PROG = "raetsalt-run"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Run a runner on the master.",
                                     usage="%(prog)s [options] FUN [ARG ...]")
    add_common(parser)
    parser.add_argument("-t", "--timeout", type=float, default=None,
                        help="seconds to wait for the master (default: its timeout + 10)")
    add_auth_options(parser)
    parser.add_argument("fun")
    parser.add_argument("arg", nargs="*")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_intermixed_args(list(argv) if argv is not None else None)
    opts = load_opts(PROG, args.config_dir, "master")
    timeout = args.timeout if args.timeout and args.timeout > 0 else float(opts["timeout"]) + 10
    positional, kwargs = wire_safe(parse_input(args.arg))
    try:
        with open_master(opts) as client:
            auth = credentials(args, client)
            req = client.request(p.SHARE_RUNNER, fun=args.fun,
                                 arg=p.pack_args(positional, kwargs), **auth)
            reply = _wait(client, req, timeout)
    except (DaemonUnavailable, AuthProblem) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    if "error" in reply:
        print(reply["error"], file=sys.stderr)
        return EX_GENERIC
    value: Any = reply.get("return")
    out = None
    if isinstance(value, dict) and set(value) == {"outputter", "data"}:
        out, value = value["outputter"], value["data"]
    show(value, out, args)
    return EX_OK


def _wait(client: MasterClient, req: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        for body in client.receive(remaining):
            if body.get("req") == req and p.share_of(body) == p.SHARE_RUN_RET:
                return body
    raise DaemonUnavailable(f"no answer from the master within {timeout:g} s")


if __name__ == "__main__":
    sys.exit(main())
