"""``raetsalt``: publish a job to minions from the master host and print their returns.

    raetsalt [options] TARGET FUN [ARG ...]

Talks to the local ``raetsalt-master`` over its lane (``raetsalt.services.protocol``),
never over the network.  Targeting flags as Salt's: ``-E -L -G -P/--grain-pcre -I -J -S
-N -C`` (``--delimiter`` for grain and pillar targets).  ``-t`` is the whole wait for
returns (default: the master's ``timeout``); the command returns as soon as every
expected minion has returned, and names each one that did not::

    minion3:
        Minion did not return. [No response]     (or [Not connected]: it was not answering
                                                  the master when the job was published)

Unlike Salt, the wait is not extended by probing minions that are still running the job
(``saltutil.find_job``); use ``raetsalt-run jobs.lookup_jid JID`` for late returns.

Output: each minion's return as it arrives (``--static``: everything at once, one
document), with ``--out`` or the outputter the return asks for (nested).  ``--async``
prints ``Executed command with job ID: <jid>``; ``-v`` announces the jid first;
``--preview-target`` prints the matched minions and runs nothing; ``--summary`` adds
Salt's summary block (when no ``--out`` is given); ``--progress`` shows progress on
stderr.

Exit codes (Salt's): 0 when every minion returned with retcode 0; 1 (``ERROR: Minions
returned with non-zero exit code``) when one failed or did not return; 2 when nothing
was matched (``No minions matched the target. No command was sent, no jid was
assigned.``), the target is invalid, or the master is unreachable.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from raetsalt.errors import TargetError
from raetsalt.execution.args import parse_input
from raetsalt.services import protocol as p
from raetsalt.services.client import DaemonUnavailable
from raetsalt.targeting import CLI_FLAGS

from ._auth import AuthProblem, MasterClient, add_auth_options, credentials, open_master
from ._common import EX_CLIENT, EX_GENERIC, EX_OK, add_common, load_opts, show, wire_safe

PROG = "raetsalt"
_TARGET_FLAGS = (
    ("-E", "--pcre", "pcre"),
    ("-L", "--list", "list"),
    ("-G", "--grain", "grain"),
    ("-P", "--grain-pcre", "grain_pcre"),
    ("-I", "--pillar", "pillar"),
    ("-J", "--pillar-pcre", "pillar_pcre"),
    ("-S", "--ipcidr", "ipcidr"),
    ("-N", "--nodegroup", "nodegroup"),
    ("-C", "--compound", "compound"),
)
_UNSUPPORTED = (("-R", "--range"),)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Run an execution function on the targeted minions.",
        usage="%(prog)s [options] TARGET FUN [ARG ...]")
    add_common(parser)
    which = parser.add_mutually_exclusive_group()
    for short, long, tgt_type in _TARGET_FLAGS:
        which.add_argument(short, long, dest="tgt_type", action="store_const", const=tgt_type)
    for short, long in _UNSUPPORTED:
        which.add_argument(short, long, dest="unsupported", action="store_const", const=short,
                           help=argparse.SUPPRESS)
    parser.add_argument("--delimiter", default=":", help="grain key delimiter (default ':')")
    parser.add_argument("-t", "--timeout", type=float, default=None,
                        help="seconds to wait for returns (default: the master's timeout)")
    parser.add_argument("--async", dest="run_async", action="store_true",
                        help="publish and print the job id without waiting")
    parser.add_argument("--static", action="store_true", help="print all returns at once")
    parser.add_argument("-v", "--verbose", action="store_true", help="announce the jid")
    parser.add_argument("--show-jid", action="store_true", help="print the jid")
    parser.add_argument("--progress", action="store_true", help="progress on stderr")
    parser.add_argument("--summary", action="store_true", help="print a summary at the end")
    parser.add_argument("--preview-target", action="store_true",
                        help="print the minions the target matches; run nothing")
    add_auth_options(parser)
    parser.add_argument("target")
    parser.add_argument("fun")
    parser.add_argument("arg", nargs="*")
    return parser


def _retcode(ret: dict[str, Any]) -> int:
    code = ret.get("retcode", 0)
    if isinstance(code, dict):
        return max([0, *(c for c in code.values() if isinstance(c, int))])
    return code if isinstance(code, int) else EX_GENERIC


def _no_return(jid: str, connected: bool) -> dict[str, Any]:
    if not connected:
        return {"return": "Minion did not return. [Not connected]", "retcode": EX_GENERIC}
    return {
        "return": "Minion did not return. [No response]\nThe minions may not have all "
        "finished running and any remaining minions will return upon completion. To look "
        "up the return data for this job later, run the following command:\n\n"
        f"raetsalt-run jobs.lookup_jid {jid}",
        "retcode": EX_GENERIC,
    }


def _summary(returned: dict[str, dict[str, Any]], silent: list[str], verbose: bool,
             not_connected: set[str]) -> None:
    failed = [m for m, r in returned.items() if _retcode(r)]
    lines = [
        "\n",
        "-------------------------------------------",
        "Summary",
        "-------------------------------------------",
        f"# of minions targeted: {len(returned) + len(silent)}",
        f"# of minions returned: {len(returned)}",
        f"# of minions that did not return: {len(silent)}",
        f"# of minions with errors: {len(failed)}",
    ]
    if verbose:
        gone = [m for m in silent if m in not_connected]
        quiet = [m for m in silent if m not in not_connected]
        if gone:
            lines.append("Minions not connected: " + " ".join(gone))
        if quiet:
            lines.append("Minions not responding: " + " ".join(quiet))
        if failed:
            lines.append("Minions with failures: " + " ".join(failed))
    lines.append("-------------------------------------------")
    print("\n".join(lines), flush=True)


def _wait_for(client: MasterClient, req: str, share: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DaemonUnavailable(f"no answer from the raetsalt-{client.node} daemon "
                                    f"within {timeout:g} s")
        for body in client.receive(remaining):
            if body.get("req") == req and p.share_of(body) == share:
                return body


def main(argv: Sequence[str] | None = None) -> int:
    # Options may follow the function's arguments, as with Salt's parser.
    args = _parser().parse_intermixed_args(list(argv) if argv is not None else None)
    if args.unsupported:
        flag = args.unsupported
        print(f"{PROG}: targeting flag {flag} (range) is not supported", file=sys.stderr)
        return EX_CLIENT
    tgt_type = args.tgt_type or "glob"
    assert tgt_type in CLI_FLAGS.values() or tgt_type == "glob"
    opts = load_opts(PROG, args.config_dir, "master")
    timeout = args.timeout if args.timeout and args.timeout > 0 else float(opts["timeout"])
    positional, kwargs = wire_safe(parse_input(args.arg))
    tgt: Any = args.target
    try:
        client = open_master(opts)
    except DaemonUnavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    try:
        auth = credentials(args, client)
        return _run(client, args, tgt, tgt_type, positional, kwargs, timeout, auth)
    except AuthProblem as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    except (DaemonUnavailable, TargetError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    except KeyboardInterrupt:
        print("\nExiting gracefully on Ctrl-c", file=sys.stderr)
        return EX_GENERIC
    finally:
        client.close()


def _run(client: MasterClient, args: argparse.Namespace, tgt: Any, tgt_type: str,
         positional: list[Any], kwargs: dict[str, Any], timeout: float,
         auth: dict[str, Any]) -> int:
    req = client.request(p.SHARE_PUBLISH, tgt=tgt, tgt_type=tgt_type, fun=args.fun,
                         arg=p.pack_args(positional, kwargs), delimiter=args.delimiter,
                         preview=bool(args.preview_target), timeout=timeout, **auth)
    # A PAM login may take seconds (its failure delay) before the master answers.
    ack = _wait_for(client, req, p.SHARE_PUB_ACK, 30.0 if "password" in auth else 10.0)
    if "error" in ack:
        print(f"ERROR: {ack['error']}", file=sys.stderr)
        return EX_CLIENT
    minions: list[str] = list(ack.get("minions") or [])
    if args.preview_target:
        show(minions, None, args)
        return EX_OK
    jid = str(ack.get("jid") or "")
    if not minions or not jid:
        print("No minions matched the target. No command was sent, no jid was assigned.",
              flush=True)
        print("ERROR: No return received", file=sys.stderr)
        return EX_CLIENT
    if args.run_async:
        print(f"Executed command with job ID: {jid}", flush=True)
        return EX_OK
    if args.verbose:
        message = f"Executing job with jid {jid}"
        print(message + "\n" + "-" * len(message) + "\n", flush=True)
    if args.show_jid:
        print(f"jid: {jid}", flush=True)
    not_connected = set(ack.get("not_connected") or []) | set(ack.get("missing") or [])
    expected = set(minions) | set(ack.get("missing") or [])
    returned: dict[str, dict[str, Any]] = {}
    static: dict[str, Any] = {}
    static_out: str | None = None
    deadline = time.monotonic() + timeout

    def emit(minion: str, ret: dict[str, Any]) -> None:
        nonlocal static_out
        if args.static:
            static[minion] = ret.get("return")
            static_out = static_out or ret.get("out")
        else:
            show({minion: ret.get("return")}, ret.get("out"), args, _retcode(ret))

    while not expected <= set(returned):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        for body in client.receive(remaining):
            if body.get("req") != req or p.share_of(body) != p.SHARE_JOB_RET:
                continue
            minion, ret = body.get("id"), body.get("ret")
            if not isinstance(minion, str) or not isinstance(ret, dict) or minion in returned:
                continue
            returned[minion] = ret
            emit(minion, ret)
            if args.progress:
                print(f"\r{len(set(returned) & expected)}/{len(expected)} minions returned",
                      end="", file=sys.stderr, flush=True)
    if args.progress:
        print(file=sys.stderr)
    silent = sorted(expected - set(returned))
    for minion in silent:
        emit(minion, _no_return(jid, minion not in not_connected))
    if args.static:
        show(static, static_out, args)
    if args.summary and args.out is None:
        _summary(returned, silent, args.verbose, not_connected)
    if silent or any(_retcode(r) for r in returned.values()):
        print("ERROR: Minions returned with non-zero exit code", file=sys.stderr)
        return EX_GENERIC
    return EX_OK


if __name__ == "__main__":
    sys.exit(main())
