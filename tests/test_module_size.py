"""No module of the package grows over 1,000 lines: split it instead."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "raetsalt"
LIMIT = 1000


def test_no_module_over_the_limit() -> None:
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the package
    too_long = {name: lines for name, lines in sizes.items() if lines > LIMIT}
    assert not too_long, f"modules over {LIMIT} lines: {too_long}"
