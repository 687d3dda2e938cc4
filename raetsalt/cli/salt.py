"""``raetsalt``: publish a job to minions from the master host and print their returns.

    raetsalt [options] TARGET FUN [ARG ...]

Talks to the local ``raetsalt-master`` over its lane (``raetsalt.protocol``),
never over the network.  Targeting flags as Salt's: ``-E -L -G -P/--grain-pcre -I -J -S
-N -C`` (``--delimiter`` for grain and pillar targets).  ``-t`` is how long a
minion is waited for (default: the master's ``timeout``) and the job's deadline: a
minion that gets the job later does not run it.  As with Salt, a minion still running
the job is waited for as long as it runs: Salt asks it (``saltutil.find_job``), a
raetsalt minion says so on its own every few seconds (``raetsalt.services.progress``);
a minion is reported ``-t`` seconds after it last spoke.  The command returns as soon
as every expected minion has returned, and names each one that did not::

    minion3:
        Minion did not return. [No response]     (or [Not connected]: it was not connected
                                                  when the job was published; it never
                                                  gets the job)

Arguments are typed as Salt types them (``raetsalt.execution.args``; ``--no-parse``
keeps named ones as text).  ``FUN`` may be several functions separated by commas, each
with its own arguments, separated by ``--args-separator`` (default ``,``).

Output: each minion's return as it arrives (``-s/--static``: everything at once, one
document), with ``--out`` or the outputter the return asks for (nested); Salt's output
options (``raetsalt.cli._common``).  ``--async`` prints ``Executed command with job ID:
<jid>``; ``-v`` announces the jid first; ``--preview-target`` prints the matched minions
and runs nothing; ``--summary`` adds Salt's summary block (when no ``--out`` is given);
``-p/--progress`` shows progress on stderr; ``--hide-timeout`` leaves out the minions that
did not return; ``-d FUN`` prints the documentation of a function or module (``sys.doc``);
``-b N`` or ``-b N%`` runs in batches (``raetsalt.cli._batch``); ``--subset N`` on N
random minions of the target that have the function (``raetsalt.cli._subset``).

Exit codes (Salt's): 0 when every minion returned with retcode 0; 1 (``ERROR: Minions
returned with non-zero exit code``) when one failed or did not return; 2 when nothing
was matched (``No minions matched the target. No command was sent, no jid was
assigned.``), the target is invalid, or the master is unreachable; 42 without a target
or function (Salt's ``Cannot execute command without defining a target.``); 78 for a bad
config.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from raetsalt import protocol as p
from raetsalt.errors import DaemonUnavailable, TargetError
from raetsalt.execution.args import parse_input

from ._auth import AuthProblem, MasterClient, add_auth_options, credentials, open_master
from ._common import (
    EX_CLIENT,
    EX_GENERIC,
    EX_OK,
    Parser,
    Printer,
    add_common,
    start_client,
    wire_safe,
)
from ._publish import Command, Refused, no_return, publish, retcode_of
from ._returners import add_returner_options, returner_fields

PROG = "raetsalt"
EX_USAGE = 42
"""Salt's exit code for a command line it cannot execute (no target, no function)."""
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
    parser = Parser(
        prog=PROG, description="Run an execution function on the targeted minions.",
        usage="%(prog)s [options] '<target>' <function> [arguments]")
    add_common(parser)
    which = parser.add_mutually_exclusive_group()
    for short, long, tgt_type in _TARGET_FLAGS:
        which.add_argument(short, long, dest="tgt_type", action="store_const", const=tgt_type)
    for short, long in _UNSUPPORTED:
        which.add_argument(short, long, dest="unsupported", action="store_const", const=short,
                           help=argparse.SUPPRESS)
    parser.add_argument("--delimiter", default=":", help="grain key delimiter (default ':')")
    parser.add_argument("-t", "--timeout", type=float, default=None,
                        help="seconds to wait for returns, and the job's deadline "
                             "(default: the master's timeout)")
    parser.add_argument("--async", dest="run_async", action="store_true",
                        help="publish and print the job id without waiting")
    parser.add_argument("-s", "--static", action="store_true", help="print all returns at once")
    parser.add_argument("-v", "--verbose", action="store_true", help="announce the jid")
    parser.add_argument("--show-jid", action="store_true", help="print the jid")
    parser.add_argument("-p", "--progress", action="store_true", help="progress on stderr")
    parser.add_argument("--hide-timeout", action="store_true",
                        help="leave out the minions that did not return")
    parser.add_argument("--summary", action="store_true", help="print a summary at the end")
    parser.add_argument("--preview-target", action="store_true",
                        help="print the minions the target matches; run nothing")
    parser.add_argument("-d", "--doc", "--documentation", dest="doc", action="store_true",
                        help="print the documentation of a function or module (all when "
                             "none is given)")
    parser.add_argument("-b", "--batch", "--batch-size", dest="batch", default=None,
                        metavar="BATCH", help="run on N minions (or N%% of them) at a time")
    parser.add_argument("--batch-wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long after a minion returns before reusing its slot")
    parser.add_argument("--subset", type=int, default=0, metavar="N",
                        help="run on N random minions of the target that have the "
                             "function")
    parser.add_argument("--failhard", action="store_true",
                        help='stop batch execution upon first "bad" return')
    parser.add_argument("--no-parse", default="", metavar="argname1,argname2,...",
                        help="named arguments (argname=value) whose values stay text")
    parser.add_argument("--args-separator", default=",",
                        help="separates the arguments of the functions of a comma command")
    add_auth_options(parser)
    add_returner_options(parser)
    parser.add_argument("words", nargs="*", metavar="target function arguments",
                        help=argparse.SUPPRESS)
    return parser


class _Usage(Exception):
    """A command line Salt refuses with exit code 42; the text is Salt's, as printed."""


class _BadOption(Exception):
    """A usage error (Salt's parser error: usage, message, exit 64)."""


def command_from(words: list[str], args: argparse.Namespace) -> Command:
    """Salt's reading of ``TARGET FUN [ARG ...]`` (and of ``-d``, comma commands)."""
    words = list(words)
    if args.doc:
        if not words:
            words = ["*"]
        if len(words) < 2 or words[1] != "sys.doc":
            words.insert(1, "sys.doc")
        if len(words) > 3:
            raise _BadOption("You can only get documentation for one method at one time.")
    if args.preview_target and len(words) == 1:
        words.append("test.ping")  # never published: only the target matters
    if not words:
        raise _Usage("\nCannot execute command without defining a target.\n\n")
    if len(words) < 2:
        raise _Usage("\nIncomplete options passed.\n\n")
    tgt: Any = words[0]
    if args.tgt_type == "list":
        tgt = tgt.replace(" ", "").split(",") if "," in tgt else tgt.split()
    fun, rest = words[1], words[2:]
    no_parse = tuple(n for n in args.no_parse.split(",") if n)
    if "," not in fun:
        return Command(tgt, fun, _packed(rest, no_parse))
    groups = _split_args(rest, args.args_separator, fun.count(",") + 1)
    return Command(tgt, fun, [_packed(group, no_parse) for group in groups])


def _packed(words: list[str], no_parse: tuple[str, ...]) -> list[Any]:
    positional, kwargs = wire_safe(parse_input(words, no_parse))
    return p.pack_args(positional, kwargs)


def _split_args(words: list[str], separator: str, count: int) -> list[list[str]]:
    """The arguments of each function of a comma command, as Salt splits them: on
    standalone separators when there are exactly ``count - 1``, else on separators
    inside the words too."""
    groups: list[list[str]] = [[]]
    if words.count(separator) == count - 1:
        for word in words:
            if word == separator:
                groups.append([])
            else:
                groups[-1].append(word)
        return groups
    for word in words:
        parts = word.split(separator)
        for index, part in enumerate(parts):
            if part:
                groups[-1].append(part)
            if index != len(parts) - 1:
                groups.append([])
    if len(groups) < count:
        raise _Usage("Cannot execute compound command without defining all arguments.\n")
    if len(groups) > count:
        raise _Usage("Cannot execute compound command with more arguments than commands.\n")
    return groups


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # Options may follow the function's arguments, as with Salt's parser.
    args = parser.parse_intermixed_args(list(argv) if argv is not None else None)
    if args.unsupported:
        print(f"{PROG}: targeting flag {args.unsupported} (range) is not supported",
              file=sys.stderr)
        return EX_CLIENT
    if len(args.words) < 2 and not args.doc and not args.preview_target:
        parser.print_help()  # as Salt does before saying what is missing
    try:
        command = command_from(args.words, args)
    except _BadOption as exc:
        parser.error(str(exc))
    except _Usage as exc:
        print(exc, end="", file=sys.stderr, flush=True)
        return EX_USAGE
    try:
        returner_fields(args)
    except ValueError as exc:
        parser.error(str(exc))
    opts, printer = start_client(PROG, args, "master")
    timeout = args.timeout if args.timeout and args.timeout > 0 else float(opts["timeout"])
    try:
        client = open_master(opts)
    except DaemonUnavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    try:
        auth = credentials(args, client)
        if args.subset and args.subset > 0 and not args.preview_target:
            from ._subset import pick_subset

            chosen = pick_subset(client, args, command, timeout, auth, args.subset)
            command.tgt, args.tgt_type = chosen, "list"
            if not chosen:
                print("No minions matched the target. No command was sent, no jid was "
                      "assigned.", flush=True)
                print("ERROR: No return received", file=sys.stderr)
                return EX_CLIENT
        if args.batch is not None:
            from ._batch import run_batch

            return run_batch(client, args, command, timeout, auth, printer)
        return _run(client, args, command, timeout, auth, printer)
    except (AuthProblem, DaemonUnavailable, TargetError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EX_CLIENT
    except Refused as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return EX_CLIENT
    except KeyboardInterrupt:
        print("\nExiting gracefully on Ctrl-c", file=sys.stderr)
        return EX_GENERIC
    finally:
        client.close()


def _run(client: MasterClient, args: argparse.Namespace, command: Command, timeout: float,
         auth: dict[str, Any], printer: Printer) -> int:
    tgt_type = args.tgt_type or "glob"
    job = publish(client, command.tgt, tgt_type, command.fun, command.arg, args, timeout,
                  auth, preview=bool(args.preview_target))
    if args.preview_target:
        printer.show(job.minions)
        return EX_OK
    if not job.minions or not job.jid:
        print("No minions matched the target. No command was sent, no jid was assigned.",
              flush=True)
        print("ERROR: No return received", file=sys.stderr)
        return EX_CLIENT
    if args.run_async:
        print(f"Executed command with job ID: {job.jid}", flush=True)
        return EX_OK
    if args.verbose:
        message = f"Executing job with jid {job.jid}"
        print(message + "\n" + "-" * len(message) + "\n", flush=True)
    if args.show_jid:
        print(f"jid: {job.jid}", flush=True)
    docs = command.fun == "sys.doc"
    returned: dict[str, dict[str, Any]] = {}
    for minion, ret in job.returns(time.monotonic() + timeout, timeout):
        returned[minion] = ret
        if not (args.static or docs):
            printer.show({minion: ret.get("return")}, ret.get("out"), retcode_of(ret))
        if args.progress:
            print(f"\r{len(set(returned) & job.expected)}/{len(job.expected)} minions "
                  "returned", end="", file=sys.stderr, flush=True)
    if args.progress:
        print(file=sys.stderr)
    silent = sorted(job.expected - set(returned))
    if docs:
        return _print_docs(returned, printer, args)
    shown = dict(returned)
    if not args.hide_timeout:
        for minion in silent:
            shown[minion] = no_return(job.jid, minion not in job.not_connected)
            if not args.static:
                printer.show({minion: shown[minion]["return"]}, None, EX_GENERIC)
    if args.static:
        # Salt's --static prints with --out, or highstate for state functions, else nested.
        fallback = "highstate" if command.fun.split(".")[0] == "state" else None
        printer.show({m: r.get("return") for m, r in shown.items()}, fallback)
    if args.summary and args.out is None:
        _summary(returned, silent, args.verbose, job.not_connected)
    if silent or any(retcode_of(r) for r in returned.values()):
        print("ERROR: Minions returned with non-zero exit code", file=sys.stderr)
        return EX_GENERIC
    return EX_OK


def _print_docs(returned: dict[str, dict[str, Any]], printer: Printer,
                args: argparse.Namespace) -> int:
    """Salt's ``-d``: each function's documentation once, from whichever minion had it."""
    docs: dict[str, str] = {}
    for ret in returned.values():
        value = ret.get("return")
        if isinstance(value, dict):
            for fun, text in value.items():
                if fun not in docs and text:
                    docs[str(fun)] = str(text)
    if not returned:
        print("No minions found to gather docs from", file=sys.stderr)
        return EX_CLIENT
    for fun in sorted(docs):
        if args.out:
            printer.show({fun: docs[fun]}, "nested")
        else:
            print(f"{fun}:\n{docs[fun]}\n", flush=True)
    return EX_OK


def _summary(returned: dict[str, dict[str, Any]], silent: list[str], verbose: bool,
             not_connected: set[str]) -> None:
    failed = [m for m, r in returned.items() if retcode_of(r)]
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


if __name__ == "__main__":
    sys.exit(main())
