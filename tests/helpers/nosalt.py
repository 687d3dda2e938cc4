"""Daemons started where Salt cannot be imported: a ``salt`` package that raises
ImportError, first on the child's PYTHONPATH (the parent's environment is restored)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


def one_line_without_salt(scratch: Path, start: Callable[[], Any], fragment: str) -> str:
    """Start a daemon without Salt (``start()``), and check that it says ``fragment`` in
    one line naming the salt extra, serves anyway, logs no traceback and stops cleanly;
    the line."""
    daemon = started_without_salt(scratch, start)
    line = str(daemon.expect(fragment, timeout=30))
    assert "pip install 'raetsalt[salt]'" in line, line
    daemon.expect("serving on", timeout=30)
    assert not any("Traceback" in entry for entry in daemon.drain())
    assert daemon.terminate() == 0
    return line
