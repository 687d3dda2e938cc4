"""The master's minion data cache (an adapter: files): the grains each minion last
reported, so targeting by grains works right after a master restart.  The job service
sees it as a ``raetsalt.services.ports.GrainsStore``."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack

from raetsalt.daemon.storable import encode_json
from raetsalt.errors import KeepError


class MinionDataCache:
    """Grains each minion last reported, one JSON file per minion under ``root``
    (Salt's ``minion_data_cache``), so targeting by grains works right after a master
    restart, before the minions report again."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def load_all(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for path in self.root.glob("*.json"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("grains"), dict):
                out[path.stem] = data["grains"]
        return out

    def path_of(self, minion: str) -> Path:
        """The file of ``minion``'s grains (``KeepError`` for an id that cannot name one)."""
        if not minion or "/" in minion or minion.startswith(".") or "\0" in minion:
            raise KeepError(f"not a minion id for the data cache: {minion!r}")
        return self.root / f"{minion}.json"

    def save(self, minion: str, grains: Mapping[str, Any]) -> None:
        path = self.path_of(minion)
        text = encode_json({"grains": grains}, minion)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def remove(self, minion: str) -> None:
        (self.root / f"{minion}.json").unlink(missing_ok=True)




class MineCache:
    """Each minion's mine (Salt's ``mine`` bank of the minion data cache): one msgpack
    file per minion under ``<root>/mine``, written whole (temp file, then rename), so a
    master restart keeps what the minions sent (``raetsalt.services.mine.MineStore``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root) / "mine"
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def load_all(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for path in self.root.glob("*.p"):
            try:
                data = msgpack.unpackb(path.read_bytes(), strict_map_key=False)
            except (OSError, ValueError, msgpack.ExtraData):
                continue
            if isinstance(data, dict):
                out[path.stem] = data
        return out

    def save(self, minion: str, data: Mapping[str, Any]) -> None:
        path = self._path(minion)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(msgpack.packb(dict(data)))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def remove(self, minion: str) -> None:
        self._path(minion).unlink(missing_ok=True)

    def _path(self, minion: str) -> Path:
        if not minion or "/" in minion or minion.startswith(".") or "\0" in minion:
            raise KeepError(f"not a minion id for the data cache: {minion!r}")
        return self.root / f"{minion}.p"
