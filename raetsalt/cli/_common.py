"""Options and helpers shared by the raetsalt commands.

* ``add_version_flags(parser)``: ``--version`` and ``-V/--versions-report``, on every
  command (one line in each);
* ``add_common(parser)``: what ``raetsalt``, ``raetsalt-run`` and ``raetsalt-call`` share:
  ``-c``, ``-l/--log-level``, the version flags and Salt's output options (``--out``,
  ``--out-indent``, ``--out-file``, ``--out-file-append``, ``--no-color``,
  ``--force-color``);
* ``start_client``: the node's config (or one line and exit 78, ``EX_CONFIG``), console
  logging at ``-l`` and the ``Printer``;
* ``Printer``: prints returns as Salt's CLI does (``raetsalt.output``): the outputter a
  return asks for unless ``--out`` names one, colours on a terminal (or with
  ``--force-color``), nothing at all for an empty text, ``--out-file`` (emptied first
  unless ``--out-file-append``, then appended to) instead of stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from raetsalt import protocol as p
from raetsalt import syspaths
from raetsalt.config import LOG_LEVELS, load_node_config
from raetsalt.drivers.cmdsock import StreamClient
from raetsalt.drivers.laneclient import CommandClient
from raetsalt.errors import ConfigError, DaemonUnavailable
from raetsalt.log import setup_console_logger
from raetsalt.output import ALIASES, OUTPUTTERS, render

from ._flags import add_version_flags

EX_OK = 0
EX_GENERIC = 1
EX_CLIENT = 2
"""Salt's exit code when the client cannot do its job (no daemon, nothing matched)."""
EX_CONFIG = 78
"""sysexits' EX_CONFIG: the configuration (a file, or ``--id``) is unusable."""


EX_USAGE = 64
"""Salt's exit code for a command line its parser refuses (sysexits' EX_USAGE)."""


class Parser(argparse.ArgumentParser):
    """argparse with Salt's exit code for usage errors (64, not argparse's 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def add_common(parser: argparse.ArgumentParser) -> None:
    add_version_flags(parser)
    parser.add_argument("-c", "--config-dir", default=syspaths.CONFIG_DIR,
                        help="directory of the config files (default: %(default)s)")
    parser.add_argument("-l", "--log-level", choices=LOG_LEVELS, default=None,
                        help="console log level (default: the config's log_level)")
    out = parser.add_argument_group("Output Options")
    out.add_argument("--out", "--output", dest="out", default=None, metavar="OUTPUT",
                     help=f"outputter: {', '.join(OUTPUTTERS)} (default: nested, or what the "
                          "return asks for)")
    out.add_argument("--out-indent", "--output-indent", dest="out_indent", type=int,
                     default=None, help="indent for json, yaml and pprint (negative: one "
                                        "line; nested ignores it, as Salt does)")
    out.add_argument("--out-file", "--output-file", dest="out_file", default=None,
                     help="write the output to this file instead of stdout")
    out.add_argument("--out-file-append", "--output-file-append", dest="out_file_append",
                     action="store_true", help="append to --out-file instead of emptying it")
    out.add_argument("--state-output", "--state_output", dest="state_output", default=None,
                     help="override the configured state_output value for minion output: "
                          "full, terse, mixed, changes (each also with _id)")
    out.add_argument("--state-verbose", "--state_verbose", dest="state_verbose",
                     default=None, help="override the configured state_verbose value for "
                                        "minion output (True or False)")
    colour = out.add_mutually_exclusive_group()
    colour.add_argument("--no-color", "--no-colour", dest="color", action="store_false",
                        default=None, help="never colour the output")
    colour.add_argument("--force-color", "--force-colour", dest="color", action="store_true",
                        help="colour the output even when stdout is not a terminal")


def start_client(prog: str, args: argparse.Namespace, node: str
                 ) -> tuple[dict[str, Any], Printer]:
    """The node's config (exits 78 with one line naming the problem), console logging
    at ``-l`` (else the config's ``log_level``) and the printer of this command line."""
    try:
        opts = load_node_config(os.path.abspath(args.config_dir), node)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(EX_CONFIG) from None
    setup_console_logger(args.log_level or opts.get("log_level") or "warning")
    return opts, Printer(args, prog, opts)


class Printer:
    """Prints data with Salt's outputters as the command line asked (see the module
    docstring).  An unknown ``--out`` falls back to nested with one warning, as in Salt."""

    def __init__(self, args: argparse.Namespace, prog: str,
                 opts: Mapping[str, Any] | None = None) -> None:
        from raetsalt.highstate import HighstateOptions

        salt_keys = (opts or {}).get("__salt")
        self.highstate = HighstateOptions.from_config(
            salt_keys if isinstance(salt_keys, Mapping) else {},
            getattr(args, "state_output", None), getattr(args, "state_verbose", None))
        """The highstate outputter's settings: the config's (Salt's keys), then the
        command line's."""
        self.out: str | None = args.out
        if self.out is not None and ALIASES.get(self.out, self.out) not in OUTPUTTERS:
            print(f"[ERROR   ] Invalid outputter {self.out} specified, fall back to nested",
                  file=sys.stderr)
            self.out = "nested"
        self.indent: int | None = args.out_indent
        self.path: str | None = args.out_file
        color = args.color
        self.color: bool = color if color is not None else sys.stdout.isatty()
        if self.path is not None and not args.out_file_append and os.path.isfile(self.path):
            try:
                with open(self.path, "w", encoding="utf-8"):
                    pass  # emptied, not removed: its permissions stay
            except OSError as exc:
                print(f"{prog}: error: {self.path}: {exc.strerror or exc}", file=sys.stderr)
                raise SystemExit(EX_CLIENT) from None

    def show(self, data: Any, out: str | None = None, retcode: int = 0) -> None:
        """Print ``data`` with ``--out``, else ``out`` (what the return asked for), else
        nested."""
        fmt = self.out or out or "nested"
        if ALIASES.get(fmt, fmt) not in OUTPUTTERS:
            fmt = "nested"  # a return naming an outputter we do not have (Salt falls back)
        text = render(data, fmt, color=self.color, indent=self.indent, retcode=retcode,
                      highstate=self.highstate)
        self.write(text)

    def write(self, text: str) -> None:
        """One text and a newline, to stdout or ``--out-file``; nothing for no text.  A
        reader that went away (``| head``) silences the rest, as Salt does; a file that
        cannot be written is an error (exit 1)."""
        if not text:
            return
        if self.path is None:
            try:
                print(text, flush=True)
            except BrokenPipeError:
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the rest of the run
            return
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as exc:
            print(f"error: cannot write {self.path}: {exc.strerror or exc}", file=sys.stderr)
            raise SystemExit(EX_GENERIC) from None


def wait_for(client: CommandClient | StreamClient, req: str, share: str, timeout: float,
             stash: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The answer ``share`` to ``req``; other messages that come first go to ``stash``
    (when given) rather than away."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        bodies = client.receive(remaining)
        for index, body in enumerate(bodies):
            if body.get("req") == req and p.share_of(body) == share:
                if stash is not None:
                    stash.extend(bodies[:index] + bodies[index + 1:])
                return body
        if stash is not None:
            stash.extend(bodies)
    raise DaemonUnavailable(f"no answer from the raetsalt-{client.node} daemon "
                            f"within {timeout:g} s")


def wire_safe(value: Any) -> Any:
    """Integers the wire cannot carry (beyond 64 bits) go as their decimal text, as the
    user typed them; sets (YAML ``!!set`` after a ``#``) go as sorted lists."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    if isinstance(value, list | tuple):
        return type(value)(wire_safe(v) for v in value)
    if isinstance(value, set | frozenset):
        return sorted((wire_safe(v) for v in value), key=repr)
    if isinstance(value, dict):
        return {k: wire_safe(v) for k, v in value.items()}
    return value
