"""``raetsalt-run state.orchestrate SLS`` (and ``state.orch``): Salt's orchestrate runner
run by the CLI itself, as the calling user (``raetsalt.saltbridge.orchestrate`` says
why), printed with the highstate outputter.  Exit code: 0, or 1 when a step failed
(Salt's), 1 with one line when the ``salt`` package is missing or the call is bad, 2
when the master cannot be reached."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raetsalt.errors import DaemonUnavailable
from raetsalt.saltbridge.modes import salt_importable

from ._auth import AuthProblem, credentials, open_master
from ._common import EX_CLIENT, EX_GENERIC, Printer

ARGUMENTS = ("mods", "saltenv", "test", "exclude", "pillar", "pillarenv")


def main(prog: str, fun: str, opts: dict[str, Any], args: argparse.Namespace,
         positional: list[Any], kwargs: dict[str, Any], printer: Printer) -> int:
    if not salt_importable():
        from raetsalt.saltbridge.orchestrate import MISSING_SALT

        print(MISSING_SALT.format(prog=prog, fun=fun), file=sys.stderr)
        return EX_GENERIC
    from raetsalt.saltbridge import orchestrate

    call = dict(zip(ARGUMENTS, positional, strict=False))
    unknown = sorted(set(kwargs) - set(ARGUMENTS))
    if len(positional) > len(ARGUMENTS) or unknown or ("mods" in kwargs and positional):
        print(f"{prog}: {fun} takes {', '.join(ARGUMENTS)}"
              + (f"; not {', '.join(unknown)}" if unknown else ""), file=sys.stderr)
        return EX_GENERIC
    call.update(kwargs)
    if not call.get("mods"):
        print(f"{prog}: {fun} needs the SLS to run (mods)", file=sys.stderr)
        return EX_GENERIC
    try:
        with open_master(opts) as client:
            auth = credentials(args, client)
            ret = orchestrate.run(opts, client, auth, call.pop("mods"), timeout=args.timeout,
                                  **call)
    except (DaemonUnavailable, AuthProblem) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EX_CLIENT
    except Exception as exc:  # noqa: BLE001 - Salt's own errors: one line, no traceback
        print(f"{prog}: {fun}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EX_GENERIC
    retcode = int(ret.get("retcode") or 0)
    printer.show(ret["data"], ret.get("outputter"), retcode)
    return retcode
