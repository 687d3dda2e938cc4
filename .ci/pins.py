"""Compare an environment's installed versions with constraints.txt.

``python .ci/pins.py freeze`` writes constraints.txt from the running interpreter's
environment (used by ``make pins``); ``python .ci/pins.py drift`` prints every package
whose installed version differs from its pin (used by ``make test-latest``).
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

PINS = Path(__file__).resolve().parent.parent / "constraints.txt"
HEADER = """\
# Pinned versions of every test, lint, type, bench and oracle tool (and what they pull in).
# make venv / make test install with these; users' runtime dependencies stay ranges in setup.cfg.
# Refresh deliberately with 'make pins' (a new venv resolved from scratch), then run make test.
"""


def installed() -> dict[str, str]:
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name and name.lower() not in ("raetsalt", "pip", "setuptools", "wheel"):
            found[name] = dist.version
    return found


def pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip()] = version.strip()
    return pins


def main(argv: list[str]) -> int:
    if argv == ["freeze"]:
        lines = [f"{name}=={version}" for name, version in
                 sorted(installed().items(), key=lambda item: item[0].lower())]
        PINS.write_text(HEADER + "\n".join(lines) + "\n")
        print(f"wrote {len(lines)} pins to {PINS}")
        return 0
    if argv == ["drift"]:
        pins = {name.lower(): (name, version) for name, version in pinned().items()}
        drift = 0
        for name, version in sorted(installed().items(), key=lambda item: item[0].lower()):
            old = pins.get(name.lower())
            if old is None:
                print(f"drift: {name} {version} (not pinned)")
                drift += 1
            elif old[1] != version:
                print(f"drift: {name} {old[1]} -> {version}")
                drift += 1
        print(f"{drift} package(s) differ from constraints.txt")
        return 0
    print("usage: pins.py freeze|drift", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
