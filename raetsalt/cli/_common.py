"""Options and helpers shared by ``raetsalt``, ``raetsalt-run`` and ``raetsalt-call``."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from raetsalt import syspaths
from raetsalt.config import load_node_config
from raetsalt.errors import ConfigError
from raetsalt.output import OUTPUTTERS, render

EX_OK = 0
EX_GENERIC = 1
EX_CLIENT = 2
"""Salt's exit code when the client cannot do its job (no daemon, nothing matched)."""


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-c", "--config-dir", default=syspaths.CONFIG_DIR,
                        help="directory of the config files (default: %(default)s)")
    parser.add_argument("--out", "--output", dest="out", choices=OUTPUTTERS, default=None,
                        help="outputter (default: nested)")
    parser.add_argument("--out-indent", "--output-indent", dest="out_indent", type=int,
                        default=None, help="indent for json/yaml/nested (negative: one line)")
    parser.add_argument("--no-color", action="store_true", help="accepted; output is plain")


def load_opts(prog: str, confdir: str, node: str) -> dict[str, Any]:
    """The node's config; exits 2 with one line naming the problem."""
    try:
        return load_node_config(os.path.abspath(confdir), node)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(EX_CLIENT) from None


def show(data: Any, out: str | None, args: argparse.Namespace, retcode: int = 0) -> None:
    """Print ``data`` with ``out`` (the CLI's --out wins)."""
    text = render(data, args.out or out or "nested", indent=args.out_indent, retcode=retcode)
    print(text, flush=True)


def wire_safe(value: Any) -> Any:
    """Integers the wire cannot carry (beyond 64 bits, e.g. a jid typed on the command
    line, which YAML reads as a number) go as their decimal text, as the user typed them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return str(value)
    if isinstance(value, list | tuple):
        return type(value)(wire_safe(v) for v in value)
    if isinstance(value, dict):
        return {k: wire_safe(v) for k, v in value.items()}
    return value
