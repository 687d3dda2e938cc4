"""``raetsalt-call``: run an execution function on this minion.

    raetsalt-call [-c CONFDIR] [--local] [--out OUT] [--retcode-passthrough] [--metadata]
                  FUN [ARG ...]

Without ``--local`` the request goes to the local ``raetsalt-minion`` over its lane; the
daemon runs the job like a published one (its own process, the daemon's grains) and
sends the return to the master too (stored there under a fresh jid), as Salt's
salt-call does.  It needs the minion to be connected to its master.  With ``--local`` the
function runs here, in this process, with the minion's config and grains, and no master
(``event.fire_master`` refuses, as in Salt's masterless mode); a function of Salt's
loader runs masterless with the minion's own ``file_roots`` and ``pillar_roots``
(``raetsalt.saltbridge.local``).

Output: ``{"local": <return>}`` (``--metadata``: the whole return record), with Salt's
output options (``raetsalt.cli._common``).  ``-d [FUN]`` prints the documentation of the
functions (starting with ``FUN``) and ``-g`` the grains, both here, without the daemon.
``--id`` replaces the config's id (checked like it).  Exit codes (as
salt-call's): 0 on success, also when the function returned False; 1 for a non-zero retcode or
an exception (with ``--retcode-passthrough``: the retcode itself); 255 for an unknown
function (``'x.y' is not available.`` on stderr); 2 when the minion daemon is not running
or not connected to its master ("Minion failed to authenticate with the master, has the
minion key been accepted?"); 78 for a bad config or ``--id``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from raetsalt import protocol as p
from raetsalt.config_schema import id_problem
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import DaemonUnavailable
from raetsalt.execution.args import parse_input

from ._common import (
    EX_CLIENT,
    EX_CONFIG,
    EX_GENERIC,
    EX_OK,
    Parser,
    add_common,
    start_client,
    wire_safe,
)

PROG = "raetsalt-call"
EX_MISSING_FUN = 255


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog=PROG, description="Run a function on this minion.",
                    usage="%(prog)s [options] <function> [arguments]")
    add_common(parser)
    parser.add_argument("-d", "--doc", "--documentation", dest="doc", action="store_true",
                        help="print the documentation of the functions (starting with FUN)")
    parser.add_argument("-g", "--grains", dest="grains_run", action="store_true",
                        help="print this minion's grains")
    parser.add_argument("--local", action="store_true",
                        help="run in this process, without the minion daemon or a master")
    parser.add_argument("--retcode-passthrough", action="store_true",
                        help="exit with the function's retcode")
    parser.add_argument("--metadata", action="store_true", help="print the whole return")
    parser.add_argument("-t", "--timeout", type=float, default=None,
                        help="seconds to wait for the minion daemon (default: no limit)")
    parser.add_argument("--id", dest="minion_id", default=None, help="override the minion id")
    parser.add_argument("fun", nargs="?", default=None)
    parser.add_argument("arg", nargs="*")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_intermixed_args(list(argv) if argv is not None else None)
    opts, printer = start_client(PROG, args, "minion")
    if args.minion_id is not None:
        problem = id_problem(args.minion_id)
        if problem:
            print(f"{PROG}: --id {args.minion_id!r} is not a valid id ({problem})",
                  file=sys.stderr)
            return EX_CONFIG
        opts["id"] = args.minion_id
    if args.doc:
        _print_docs(opts, args.fun)
        return EX_OK
    if args.grains_run:
        from raetsalt.daemon.grainsfile import load_grains

        printer.show({"local": load_grains(opts)})
        return EX_OK
    if args.fun is None:
        parser.error("a function is needed")
    positional, kwargs = wire_safe(parse_input(args.arg))
    arg = p.pack_args(positional, kwargs)
    if args.local:
        record, missing = _run_local(opts, args.fun, arg)
    else:
        try:
            record, missing = _run_remote(opts, args.fun, arg, args.timeout)
        except _Refused as exc:
            print(exc.message, file=sys.stderr)
            return exc.code
        except DaemonUnavailable as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return EX_CLIENT
    if missing:
        print(record.get("return") if isinstance(record.get("return"), str)
              else f"'{args.fun}' is not available.", file=sys.stderr)
        return EX_MISSING_FUN
    retcode = record.get("retcode", 0)
    retcode = retcode if isinstance(retcode, int) else EX_GENERIC
    if args.metadata:
        printer.show({"local": record}, None, retcode)
    else:
        printer.show({"local": record.get("return")}, record.get("out"), retcode)
    if retcode:
        return retcode if args.retcode_passthrough else EX_GENERIC
    return EX_OK


def _print_docs(opts: dict[str, Any], prefix: str | None) -> None:
    """Salt's ``salt-call -d``: each function's name and docstring, as written."""
    from raetsalt.execution.loader import Loader

    functions = Loader(opts.get("module_dirs") or ()).functions
    for name in sorted(functions):
        doc = functions[name].__doc__
        if doc and name.startswith(prefix or ""):
            print(f"{name}:\n{doc}\n", flush=True)


class _Refused(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message, self.code = message, code


def _run_remote(opts: dict[str, Any], fun: str, arg: list[Any], timeout: float | None
                ) -> tuple[dict[str, Any], bool]:
    with CommandClient("minion", opts["sock_dir"], str(opts["id"])) as client:
        req = client.request(p.SHARE_CALL, fun=fun, arg=arg)
        deadline = None if timeout is None or timeout <= 0 else time.monotonic() + timeout
        while True:
            # Without a time-out, look every second whether the daemon is still there.
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                raise DaemonUnavailable(f"no answer from the minion within {timeout:g} s")
            for body in client.receive(wait):
                if body.get("req") != req or p.share_of(body) != p.SHARE_CALL_RET:
                    continue
                if "error" in body:
                    code = body.get("code")
                    raise _Refused(str(body["error"]), code if isinstance(code, int) else 1)
                record = body.get("ret")
                if not isinstance(record, dict):
                    raise DaemonUnavailable("the minion sent a malformed answer")
                return record, body.get("missing_fun") is True
            if not client.daemon_alive():
                raise DaemonUnavailable("the raetsalt-minion daemon went away")


def _run_local(opts: dict[str, Any], fun: str, arg: list[Any]) -> tuple[dict[str, Any], bool]:
    from raetsalt.daemon.grainsfile import load_grains, save_static_grains
    from raetsalt.event import SaltEvent
    from raetsalt.execution.loader import Context, Loader
    from raetsalt.saltbridge.local import salt_call_local
    from raetsalt.services.jids import new_jid
    from raetsalt.services.minion import JobSpec, execute

    jid = new_jid(datetime.now(UTC))
    salt_outcome = salt_call_local(opts, fun, arg, jid)  # Salt's loader, masterless
    if salt_outcome is not None:
        return ({"jid": jid, "id": opts["id"], "fun": fun, "fun_args": arg,
                 **salt_outcome["ret"]}, bool(salt_outcome["missing_fun"]))
    loader = Loader(opts.get("module_dirs") or ())

    def fire(tag: str, data: Any) -> bool:
        try:
            bus = SaltEvent("minion", sock_dir=opts["sock_dir"], opts={"id": opts["id"]})
        except Exception:  # noqa: BLE001 - no bus: the event goes nowhere
            return False
        try:
            return bus.fire_event(data if isinstance(data, dict) else {"data": data}, tag)
        finally:
            bus.destroy()

    ctx = Context(opts=opts, grains=load_grains(opts), jid=jid, loader=loader,
                  fire_event=fire, fire_master=lambda tag, data: False)
    spec = JobSpec(jid, fun, arg, "salt-call", "glob", kind="call")
    outcome = execute(loader, spec, ctx, os.getpid())
    if outcome.grains_set:
        try:
            save_static_grains(opts, outcome.grains_set)
        except OSError as exc:
            print(f"{PROG}: grains not saved: {exc}", file=sys.stderr)
    record = {"jid": jid, "id": opts["id"], "fun": fun, "fun_args": arg, **outcome.ret}
    return record, outcome.missing_fun


if __name__ == "__main__":
    sys.exit(main())
