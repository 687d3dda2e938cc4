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
    "keep/policy.py",
    "drops.py",
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




def _engine_imports() -> dict[str, set[str]]:
    """module -> engine modules it imports (TYPE_CHECKING imports too)."""
    graph: dict[str, set[str]] = {}
    for module in sorted((PACKAGE / "engine").glob("*.py")):
        name = module.stem
        found: set[str] = set()
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.ImportFrom) and node.module:
                target = node.module
            elif isinstance(node, ast.Import):
                target = node.names[0].name
            else:
                continue
            if target.startswith("raetsalt.engine."):
                found.add(target.split(".")[2])
        graph[name] = found - {name}
    return graph


def test_the_engine_imports_run_one_way() -> None:
    """No circle in the engine's import graph, counting imports made only for typing."""
    graph = _engine_imports()
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> None:
        assert name not in visiting, " -> ".join([*visiting[visiting.index(name):], name])
        if name in done:
            return
        visiting.append(name)
        for target in graph.get(name, ()):
            visit(target)
        visiting.pop()
        done.add(name)

    for name in graph:
        visit(name)
    transactions = {"join", "allow", "alive", "message", "native", "transaction", "joindesk"}
    assert all("road" not in graph[name] for name in transactions)


def test_the_engine_does_no_keep_io() -> None:
    """The engine sees keep records and the pure policy, never a keep."""
    for module in sorted((PACKAGE / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("raetsalt.keep"):
                assert node.module in ("raetsalt.keep.records", "raetsalt.keep.policy"), module
                assert "Keep" not in {alias.name for alias in node.names}, module
