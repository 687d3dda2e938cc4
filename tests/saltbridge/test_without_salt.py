"""raetsalt never imports Salt at module import time, and works as before without it."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "raetsalt"
# Where Salt may be imported, and only inside functions: the zygote's runtime, the
# channel it installs under Salt, the pillar worker's compiler, the minion's scheduler.
SALT_USERS = {"saltbridge/saltjob.py", "saltbridge/channel.py", "saltbridge/pillar.py",
              "saltbridge/mastersalt.py", "saltbridge/mine_bus.py", "saltbridge/client.py",
              "saltbridge/orchestrate.py", "saltbridge/scheduler.py"}

BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "salt" or name.startswith("salt."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None
sys.meta_path.insert(0, Block())
"""
IMPORT_ALL = """
import importlib, pkgutil, sys
import raetsalt
for info in pkgutil.walk_packages(raetsalt.__path__, "raetsalt."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
loaded = sorted(m for m in sys.modules if m == "salt" or m.startswith("salt."))
assert not loaded, loaded[:5]
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_importing_raetsalt_never_imports_salt() -> None:
    done = _run(IMPORT_ALL)
    assert done.returncode == 0, done.stderr


def test_without_salt_the_minion_is_native() -> None:
    done = _run(BLOCK + IMPORT_ALL + """
from raetsalt.saltbridge.modes import salt_importable
from raetsalt.daemon.saltminion import minion_bridge
from raetsalt.errors import LocalError
from raetsalt.daemon.executor import ForkExecutor
assert not salt_importable()
executor = ForkExecutor(lambda job: {})
assert minion_bridge({"execution_mode": "auto"}, executor) is None
assert minion_bridge({"execution_mode": "native"}, executor) is None
try:
    minion_bridge({"execution_mode": "salt"}, executor)
except LocalError as exc:
    assert "not importable" in str(exc)
else:
    raise AssertionError("salt mode started without salt")
from raetsalt.execution.loader import Context, Loader
from raetsalt.services.minion import JobSpec, execute
loader = Loader()
spec = JobSpec("1", "test.ping", [])
assert execute(loader, spec, Context(opts={}, grains={}), 1).ret["return"] is True
missing = execute(loader, JobSpec("2", "state.apply", []), Context(opts={}, grains={}), 1)
assert missing.missing_fun and missing.ret["return"] == "'state.apply' is not available."
assert {"mine.send", "mine.get", "mine.update", "mine.delete", "mine.flush"} <= set(
    loader.functions)
from raetsalt.saltbridge.pillar import NativePillar, make_compiler
assert isinstance(make_compiler({}, {}), NativePillar)
""")
    assert done.returncode == 0, done.stderr


def test_without_salt_orchestrate_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "master").write_text(f"root_dir: {tmp_path}\n")
    done = _run(BLOCK + f"""
from raetsalt.cli import run
raise SystemExit(run.main(["-c", {str(tmp_path)!r}, "state.orch", "deploy"]))
""")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("raetsalt-run: state.orch needs the 'salt' package (pip install "
                           "'raetsalt[salt]'): Salt's state compiler renders the "
                           "orchestration\n")


def test_salt_is_imported_only_inside_functions_of_the_bridge() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text(), rel)
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if not any(n == "salt" or n.startswith("salt.") for n in names):
                continue
            assert rel in SALT_USERS, f"{rel} imports salt"
            assert id(node) not in top_level, f"{rel} imports salt at module level"
