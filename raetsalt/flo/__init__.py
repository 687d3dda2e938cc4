"""ioflo glue of the daemons: the selector-driven scheduler (``skedder``) and the thin
behaviours the flows in ``flows/`` call (``behaviors``).

This is the only package that imports ioflo (``raetsalt/__init__.py`` imports
``collections.abc`` first, which ioflo 2.0.3 needs on Python 3.10+).
"""

from __future__ import annotations

import sys
from pathlib import Path

FLOW_DIRS = (
    Path(__file__).resolve().parent.parent.parent / "flows",  # a source checkout
    Path(sys.prefix) / "share" / "raetsalt" / "flows",  # installed (setup.cfg data_files)
)
"""Where ``master.flo`` and ``minion.flo`` are looked for, in order."""


def flow_path(name: str) -> Path:
    """Path of ``<name>.flo`` in the first of ``FLOW_DIRS`` that has it."""
    for directory in FLOW_DIRS:
        candidate = directory / f"{name}.flo"
        if candidate.is_file():
            return candidate
    return FLOW_DIRS[0] / f"{name}.flo"
