"""raetsalt-master: the master daemon (options and exit codes: ``raetsalt.cli.daemon``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from raetsalt.cli.daemon import main as run_daemon


def main(argv: Sequence[str] | None = None) -> int:
    return run_daemon("master", argv)


if __name__ == "__main__":
    sys.exit(main())
