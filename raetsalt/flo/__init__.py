"""ioflo glue of the daemons: the selector-driven scheduler (``skedder``) and the thin
behaviours the flows in ``flows/`` call (``behaviors``).

This is the only package that imports ioflo (``raetsalt/__init__.py`` imports
``collections.abc`` first, which ioflo 2.0.3 needs on Python 3.10+).
"""

from __future__ import annotations

from pathlib import Path

FLOWS_DIR = Path(__file__).resolve().parent.parent.parent / "flows"
"""Where ``master.flo`` and ``minion.flo`` live (the repository's ``flows/``)."""


def flow_path(name: str) -> Path:
    """Path of ``flows/<name>.flo``."""
    return FLOWS_DIR / f"{name}.flo"
