from __future__ import annotations

import pytest

from raetsalt.errors import LocalError
from raetsalt.testing import ManualClock


def test_starts_where_told_and_advances() -> None:
    clock = ManualClock(5.0)
    assert clock.now == 5.0
    assert clock() == 5.0
    assert clock.advance(1.5) == 6.5
    assert clock.now == 6.5
    clock.advance(0)
    assert clock() == 6.5


def test_default_start_is_zero() -> None:
    assert ManualClock().now == 0.0


def test_refuses_to_go_backwards() -> None:
    clock = ManualClock(1.0)
    with pytest.raises(LocalError):
        clock.advance(-0.1)
    assert clock.now == 1.0
