"""``--version`` and ``-V/--versions-report``, as on every Salt command.

Apart from ``raetsalt.cli._common`` so that a command that must start fast
(``raetsalt-key -L``) gets them without importing the clients' machinery; the report
itself is imported only when asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from raetsalt import __version__

EX_OK = 0


class PrintAndExit(argparse.Action):
    """Print ``text`` (or what it returns, when callable) and exit 0."""

    def __init__(self, option_strings: Sequence[str], dest: str, text: Any = None,
                 help: str | None = None) -> None:  # noqa: A002 - argparse's name
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                         nargs=0, help=help)
        self.text = text

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(self.text() if callable(self.text) else self.text, flush=True)
        parser.exit(EX_OK)


def _versions_report() -> str:
    from raetsalt.cli._versions import versions_report

    return versions_report()


def add_version_flags(parser: argparse.ArgumentParser) -> None:
    """``--version`` (``<prog> <version>``) and ``-V/--versions-report`` (raetsalt, Python,
    the libraries and the system), as on every Salt command."""
    parser.add_argument("--version", action=PrintAndExit, text=f"{parser.prog} {__version__}",
                        help="show program's version number and exit")
    parser.add_argument("-V", "--versions-report", action=PrintAndExit, text=_versions_report,
                        help="show the versions of raetsalt's dependencies and exit")
