"""raetsalt/config_salt_keys.py is what tests/data/make_salt_keys.py makes from the
installed Salt (skipped when Salt is not installed, or is another version than the one
the list was made from), and raetsalt never imports Salt to use it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from raetsalt import config_salt_keys

REPO = Path(__file__).resolve().parents[1]


def _generator() -> object:
    spec = importlib.util.spec_from_file_location("make_salt_keys",
                                                  REPO / "tests" / "data" / "make_salt_keys.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_list_matches_the_installed_salt() -> None:
    salt_version = pytest.importorskip("salt.version", reason="Salt is not installed")
    if salt_version.__version__ != config_salt_keys.SALT_VERSION:
        pytest.skip(f"the list is from Salt {config_salt_keys.SALT_VERSION}, "
                    f"Salt {salt_version.__version__} is installed")
    generator = _generator()
    version, keys = generator.known_keys()  # type: ignore[attr-defined]
    text = generator.module_text(version, keys)  # type: ignore[attr-defined]
    assert (REPO / "raetsalt" / "config_salt_keys.py").read_text(encoding="utf-8") == text, (
        "regenerate: .venv/bin/python tests/data/make_salt_keys.py > raetsalt/config_salt_keys.py"
    )


def test_the_keys_a_salt_master_config_uses_are_known() -> None:
    for key in ("file_roots", "pillar_roots", "worker_threads", "hash_type", "state_top",
                "ret_port", "publish_port", "fileserver_backend", "ext_pillar", "reactor",
                "master_sign_pubkey", "file_recv", "gather_job_timeout", "cli_summary",
                "enable_gpu_grains", "master_finger", "file_client", "startup_states",
                "mine_functions", "schedule"):
        assert key in config_salt_keys.SALT_KEYS, key


def test_loading_a_config_does_not_import_salt(tmp_path: Path) -> None:
    code = ("import sys; from raetsalt.config import master_config; "
            f"master_config({str(tmp_path / 'master')!r}); "
            "print(any(m == 'salt' or m.startswith('salt.') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"
