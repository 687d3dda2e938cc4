"""Fixtures for the bus tests (helpers live in helpers.py)."""

from .helpers import procs, short_dir  # noqa: F401
