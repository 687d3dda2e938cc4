"""An alarm, not a rule: a module of the package growing far beyond the largest today.

Modules are sized by what belongs together (one concern each), not by a line count; a
module reaching ``ALARM`` lines has most likely taken in a second concern, and is worth
a look.  The alarm sits well above the largest module, so it never bends the code.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "raetsalt"
ALARM = 2500


def test_no_module_grows_far_beyond_the_largest() -> None:
    sizes = {
        str(path.relative_to(PACKAGE.parent)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the package
    too_long = {name: lines for name, lines in sizes.items() if lines > ALARM}
    assert not too_long, f"modules over {ALARM} lines (two concerns in one?): {too_long}"
