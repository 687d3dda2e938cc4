from __future__ import annotations

from pathlib import Path

import pytest

from raetsalt.keep import FileKeep, MemoryKeep
from raetsalt.keep.store import _BaseKeep


@pytest.fixture(params=["file", "memory"])
def keep(request: pytest.FixtureRequest, tmp_path: Path) -> _BaseKeep:
    """Every behavioural test runs against both implementations."""
    if request.param == "file":
        return FileKeep(tmp_path / "keep", durable=False)
    return MemoryKeep()


@pytest.fixture
def fkeep(tmp_path: Path) -> FileKeep:
    return FileKeep(tmp_path / "keep")
