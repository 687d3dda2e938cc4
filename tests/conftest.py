"""Make the helpers next to this file (raetpeer_client, raet_shim) importable from tests in
sub-directories (pytest's rootdir-relative import only adds each test file's own folder)."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

# The ``raet_peer`` fixture (a real raet 0.6.8 peer), for every test that asks for it.
pytest_plugins = ["raetpeer_client"]
