"""Daemons started where Salt cannot be imported: a ``salt`` package that raises
ImportError, first on the child's PYTHONPATH (the parent's environment is restored)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def started_without_salt(scratch: Path, start: Callable[[], T]) -> T:
    """``start()`` (which spawns a daemon) with an unimportable ``salt`` package made
    under ``scratch`` first on PYTHONPATH; the test's own environment is left as it was."""
    fake = scratch / "nosalt" / "salt"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ImportError('salt is not installed here')\n")
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(scratch / "nosalt"), *sys.path])
    try:
        return start()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
