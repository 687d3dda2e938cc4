"""How a daemon starts a Python child process (the job cache writer, the minion's Salt
zygote, the master's Salt workers): from this very ``raetsalt``, never from the working
directory.  ``python -m`` and ``python -c`` put the working directory first on the
child's ``sys.path``, so a ``raetsalt/``, ``msgpack.py`` or ``yaml.py`` that someone
planted where the daemon was started (``/tmp``) would run as the daemon's user.  ``-P``
(Python 3.11) leaves it out; the package's own directory goes first instead.  The
daemons also ``chdir("/")`` at start (``raetsalt.cli.daemon``).
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
"""The directory holding this ``raetsalt``."""

_RUN = ("import sys; sys.path.insert(0, sys.argv[1]); import importlib; "
        "sys.exit(importlib.import_module(sys.argv[2]).main(sys.argv[3:]))")


def python_child(module: str, *args: str) -> list[str]:
    """The command line running ``module.main([*args])`` in a child (its exit code is
    what ``main`` returns)."""
    return [sys.executable, "-P", "-c", _RUN, PACKAGE_ROOT, module, *args]
