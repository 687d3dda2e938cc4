"""Helpers shared by the test suites of every raetsalt area (never used in production code)."""

from __future__ import annotations

from raetsalt.testing.clock import ManualClock

__all__ = ["ManualClock"]
