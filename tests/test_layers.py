"""The sans-IO guarantee: protocol modules never import sockets, clocks, asyncio or ioflo;
the job services also touch no files or processes; no import circle anywhere."""

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
    "services",
    "timefmt.py",
    "store/pgconfig.py",
    "store/rows.py",
    "store/schema.py",
    "store/sharedkeys.py",
]
FORBIDDEN = {"socket", "select", "selectors", "time", "asyncio", "ioflo", "threading"}


SERVICES_FORBIDDEN = FORBIDDEN | {
    "os", "subprocess", "signal", "tempfile", "shutil", "pathlib", "io", "multiprocessing",
    "fcntl", "pwd", "grp", "mmap", "msgpack", "yaml", "json",
}
"""``services/`` decides; the daemon's adapters store, fork and talk (``daemon/``, ``cli/``)."""
CLOCK_CALLS = {"now", "utcnow", "today", "monotonic", "perf_counter", "time_ns"}
"""Method names that read a clock (``datetime.now()``, ``time.monotonic()``...); a call on
``self`` (``self.utcnow()``) is the clock the daemon gave the service."""


def _modules(entries: list[str] = PURE) -> list[Path]:
    found: list[Path] = []
    for entry in entries:
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


def _imported_roots(module: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(), str(module))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("module", _modules(["services", "timefmt.py"]),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_services_touch_no_files_processes_or_clocks(module: Path) -> None:
    tree = ast.parse(module.read_text(), str(module))
    assert not _imported_roots(module) & SERVICES_FORBIDDEN, module.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            assert not (isinstance(func, ast.Name) and func.id == "open"), \
                f"{module.name}:{node.lineno} opens a file"
            injected = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id == "self"  # the clock the daemon handed in
            assert injected or not (isinstance(func, ast.Attribute) and func.attr in CLOCK_CALLS), \
                f"{module.name}:{node.lineno} reads a clock ({func.attr})"


def test_the_guard_covers_the_engine() -> None:
    names = {p.name for p in _modules()}
    assert {"road.py", "join.py", "allow.py", "message.py", "packet.py"} <= names
    assert {"master.py", "minion.py", "runners.py", "peer.py", "ports.py"} <= names




ENGINE = PACKAGE / "engine"


def _engine_name(module: Path) -> str:
    """``road``, ``native.channel``, ``native`` (the package's ``__init__``)..."""
    parts = list(module.relative_to(ENGINE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _engine_imports() -> dict[str, set[str]]:
    """module -> engine modules it imports (TYPE_CHECKING imports too), by their names
    under ``raetsalt.engine`` (``native.channel``); ``from raetsalt.engine.native import
    trains`` counts as ``native.trains``."""
    modules = sorted(
        p for p in ENGINE.rglob("*.py") if p.name != "__init__.py" or p.parent != ENGINE
    )
    names = {_engine_name(p) for p in modules}
    graph: dict[str, set[str]] = {}
    for module in modules:
        name = _engine_name(module)
        found: set[str] = set()
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if not target.startswith("raetsalt.engine."):
                    continue
                inner = target.removeprefix("raetsalt.engine.")
                while inner and inner not in names:
                    inner = inner.rpartition(".")[0]
                if inner:
                    found.add(inner)
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
    native = {name for name in graph if name.startswith("native.")}
    assert {"native.channel", "native.frames", "native.recovery", "native.receive"} <= native
    transactions = {"join", "allow", "alive", "message", "transaction", "joindesk"} | native
    assert all("road" not in graph[name] for name in transactions)


def test_the_native_wing_stands_on_its_frames() -> None:
    """Inside ``engine/native/`` imports run one way: ``channel`` on top, ``frames`` at the
    bottom (it imports no other native module), and only ``channel`` is imported by the
    engine outside it, besides the layouts (``frames``), the kernel's ``Train`` and the
    presence helpers (``alive``)."""
    graph = _engine_imports()
    assert not {t for t in graph["native.frames"] if t.startswith("native")}
    below_channel = {"native.receive", "native.recovery", "native.scheduler", "native.flow",
                     "native.congestion", "native.trains", "native.rekey", "native.migration",
                     "native.alive", "native.frames"}
    assert all("native.channel" not in graph[name] for name in below_channel)
    outside = {
        target
        for name, targets in graph.items() if not name.startswith("native")
        for target in targets if target.startswith("native")
    }
    assert outside <= {"native.channel", "native.frames", "native.alive"}


def test_the_engine_does_no_keep_io() -> None:
    """The engine sees keep records and the pure policy, never a keep."""
    for module in sorted((PACKAGE / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("raetsalt.keep"):
                assert node.module in ("raetsalt.keep.records", "raetsalt.keep.policy"), module
                assert "Keep" not in {alias.name for alias in node.names}, module



def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports() -> dict[str, set[str]]:
    """Every module of ``raetsalt`` -> the package modules it imports, at any depth
    (inside functions and under ``TYPE_CHECKING`` too): ``from a.b import c`` counts as
    ``a.b.c`` when that is a module, else ``a.b``."""
    paths = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "raetsalt" and (hit := known(target)) is not None:
                    found.add(hit)
        graph[name] = found - {name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                return [*path[path.index(target):], target]
            if target not in state and (circle := visit(target)) is not None:
                return circle
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (circle := visit(name)) is not None:
            return circle
    return None


def test_no_import_circle_in_the_package() -> None:
    graph = package_imports()
    assert len(graph) > 100 and "raetsalt.services.master" in graph
    assert "raetsalt.services.runners" in graph["raetsalt.services.master"]
    circle = find_circle(graph)
    assert circle is None, " -> ".join(circle or [])


def test_the_circle_finder_finds_circles() -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def _room(module: str) -> str:
    """The folder or top-level module of ``raetsalt`` that ``module`` stands in."""
    return ".".join(module.split(".")[:2])


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports between rooms (``_room``) that run back up: from a room to one that
    imports it back, directly or through others.  With none, the rooms stand in floors,
    each importing only rooms below it."""
    rooms: dict[str, set[str]] = {}
    where: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, targets in graph.items():
        for target in targets:
            a, b = _room(module), _room(target)
            if a != b and "." in a and "." in b:  # the package's face is no room
                rooms.setdefault(a, set()).add(b)
                where.setdefault((a, b), []).append((module, target))

    def reaches(start: str, goal: str) -> bool:
        seen, todo = {start}, [start]
        while todo:
            for nxt in rooms.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    return sorted(pair for (a, b), pairs in where.items() if reaches(b, a) for pair in pairs)


def test_imports_run_one_way_between_folders() -> None:
    """protocol.py is the vocabulary acl, execution, services and the CLIs share; the
    lane client and the job children are drivers; the daemons' process entry is a CLI:
    no folder imports one above it."""
    upward = upward_imports(package_imports())
    assert upward == [], "\n".join(f"{a} -> {b}" for a, b in upward)


def test_the_upward_import_finder_finds_them() -> None:
    graph = {"raetsalt.a.x": {"raetsalt.b.y"}, "raetsalt.b.y": {"raetsalt.c"},
             "raetsalt.c": {"raetsalt.a.z"}, "raetsalt.a.z": set(), "raetsalt.d": {"raetsalt.c"}}
    assert upward_imports(graph) == [("raetsalt.a.x", "raetsalt.b.y"),
                                     ("raetsalt.b.y", "raetsalt.c"),
                                     ("raetsalt.c", "raetsalt.a.z")]
    graph["raetsalt.c"] = set()
    assert upward_imports(graph) == []


def test_paths_is_a_leaf() -> None:
    """Every layer finds its files through ``raetsalt.paths``: it imports only errors."""
    assert package_imports()["raetsalt.paths"] <= {"raetsalt.errors"}
def test_libsodium_is_reached_through_crypto_only() -> None:
    """PyNaCl is imported by ``crypto/`` alone (and by ``errors.py``, whose
    ``CryptoError`` is also PyNaCl's, so callers catch either); its private cffi module
    only by the adapter of the compiled kernel, ``crypto/kernel.py``."""
    users: dict[str, set[str]] = {}
    for module in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] == "nacl":
                    users.setdefault(name, set()).add(str(module.relative_to(PACKAGE)))
    outside = {
        path for paths in users.values() for path in paths
        if not path.startswith("crypto/") and path != "errors.py"
    }
    assert not outside, f"nacl imported outside crypto/: {sorted(outside)}"
    assert users.get("nacl._sodium") == {"crypto/kernel.py"}
