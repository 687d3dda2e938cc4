"""The one monotonic clock of the drivers.

Sans-IO code takes ``now: float`` as an argument.  Drivers read it here (and only here,
apart from CLIs), so a test can hand a driver any other ``Clock`` instead, such as
``raetsalt.testing.clock.ManualClock``.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that returns monotonic seconds when called."""

    def __call__(self) -> float: ...


def monotonic() -> float:
    """Seconds from an arbitrary origin; never goes backwards (wall-clock steps do not
    affect it), which is what every timer of the engine assumes."""
    return time.monotonic()
