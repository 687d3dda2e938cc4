"""Make the helpers next to this file (raetpeer_client, raet_shim) importable from tests in
sub-directories (pytest's rootdir-relative import only adds each test file's own folder)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# The ``raet_peer`` fixture (a real raet 0.6.8 peer) and ``postgres`` (a real PostgreSQL
# server, tests/pg.py), for every test that asks for them.
pytest_plugins = ["raetpeer_client", "pg"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Name the oracle in the run's summary: Salt's behaviour is what the oracle tests
    compare with, and it changes with Salt's and PyYAML's versions."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    terminalreporter.write_line(f"oracle: Salt {version('salt')}, PyYAML {version('PyYAML')}")
