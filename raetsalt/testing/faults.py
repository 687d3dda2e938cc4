"""Faults to inject in tests: a keep on a full disk."""

from __future__ import annotations

from typing import Any

from raetsalt.errors import KeepError
from raetsalt.keep.store import MemoryKeep


class FullDiskKeep(MemoryKeep):
    """A ``MemoryKeep`` whose writes fail as on a full disk while ``full`` is true."""

    def __init__(self, *, full: bool = False) -> None:
        super().__init__()
        self.full = full

    def _write(self, kind: str, key: str, doc: Any) -> None:
        if self.full:
            raise KeepError(f"memory:{kind}/{key}: cannot write: No space left on device")
        super()._write(kind, key, doc)
