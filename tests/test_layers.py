"""The sans-IO guarantee: protocol modules never import sockets, clocks, asyncio or ioflo."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "raetsalt"
PURE = [
    "wire",
    "crypto",
    "engine",
    "keep/records.py",
    "lane",
    "targeting.py",
    "acl.py",
    "acl_config.py",
    "log.py",
    "routing.py",
    "bus.py",
    "highstate.py",
    "saltbridge/paths.py",
    "saltbridge/modes.py",
    "saltbridge/service.py",
    "output.py",
    "saltyaml.py",
    "execution/args.py",
]
FORBIDDEN = {"socket", "select", "selectors", "time", "asyncio", "ioflo", "threading"}


def _modules() -> list[Path]:
    found: list[Path] = []
    for entry in PURE:
        path = PACKAGE / entry
        found.extend(
            sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        )
    return found


@pytest.mark.parametrize("module", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pure_module_imports_no_io(module: Path) -> None:
    tree = ast.parse(module.read_text(), str(module))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN, f"{module.name} imports {sorted(imported & FORBIDDEN)}"


def test_the_guard_covers_the_engine() -> None:
    names = {p.name for p in _modules()}
    assert {"road.py", "join.py", "allow.py", "message.py", "packet.py"} <= names


def test_engine_sees_the_keep_only_through_its_protocol() -> None:
    for module in sorted((PACKAGE / "engine").rglob("*.py")):
        assert "raetsalt.keep.store" not in module.read_text(), module.name
