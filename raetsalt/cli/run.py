"""``raetsalt-run``: run a runner on the master (``manage.*``, ``jobs.*``, ``acl.explain``).

    raetsalt-run [options] FUN [ARG ...]

Talks to the local ``raetsalt-master`` over its lane.  Prints the runner's return with
``--out`` (default nested; a return of the form ``{"outputter": O, "data": D}``, as
``jobs.lookup_jid`` gives for failed jobs, prints ``D`` with ``O``) and Salt's other output
options (``raetsalt.cli._common``).  ``-d [FUN]`` prints the documentation of the runners
(those starting with ``FUN``) without asking the master.  Exit codes: 0; 1 when the
runner failed or does not exist (the message goes to stderr); 2 when the master cannot
be reached; 78 for a bad config.  ``state.orchestrate``/``state.orch`` run Salt's
orchestrate in this process (``raetsalt.cli._orchestrate``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from raetsalt import protocol as p
from raetsalt.errors import DaemonUnavailable
from raetsalt.execution.args import parse_input

from . import _orchestrate
from ._auth import AuthProblem, add_auth_options, credentials, open_master
from ._common import (
    EX_CLIENT,
    EX_GENERIC,
    EX_OK,
    Parser,
    add_common,
    start_client,
    wait_for,
    wire_safe,
)

PROG = "raetsalt-run"
ORCHESTRATE = frozenset({"state.orchestrate", "state.orch"})
"""Run by this process with Salt's state compiler (``raetsalt.cli._orchestrate``)."""


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Run a runner on the master.",
                    usage="%(prog)s [options] <function> [arguments]")
    add_common(parser)
    parser.add_argument("-t", "--timeout", type=float, default=None,
                        help="seconds to wait for the master (default: its timeout + 10)")
    parser.add_argument("-d", "--doc", "--documentation", dest="doc", action="store_true",
                        help="print the documentation of the runners (starting with FUN)")
    add_auth_options(parser)
    parser.add_argument("fun", nargs="?", default=None)
    parser.add_argument("arg", nargs="*")
    return parser


def print_docs(prefix: str | None) -> None:
    """Salt's ``salt-run -d``: each runner's name, then its docstring."""
    from raetsalt.services.runners import RUNNERS

    for fun in sorted(RUNNERS):
        if prefix and fun != prefix and not fun.startswith(prefix.rstrip(".") + "."):
            continue
        print(f"{fun}:\n{RUNNERS[fun].__doc__}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(list(argv) if argv is not None else None)
    if args.doc:
        print_docs(args.fun)
        return EX_OK
    if args.fun is None:
        parser.error("a runner function is needed")
    opts, printer = start_client(PROG, args, "master")
    timeout = args.timeout if args.timeout and args.timeout > 0 else float(opts["timeout"]) + 10
    positional, kwargs = wire_safe(parse_input(args.arg))
    if args.fun in ORCHESTRATE:
        return _orchestrate.main(PROG, args.fun, opts, args, positional, kwargs, printer)
    try:
        with open_master(opts) as client:
            auth = credentials(args, client)
            req = client.request(p.SHARE_RUNNER, fun=args.fun,
                                 arg=p.pack_args(positional, kwargs), **auth)
            reply = wait_for(client, req, p.SHARE_RUN_RET, timeout)
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
    printer.show(value, out)
    return EX_OK


if __name__ == "__main__":
    sys.exit(main())
