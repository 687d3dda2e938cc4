"""``--version`` and ``--versions-report``: what Salt's commands print, for raetsalt.

``version_line(prog)`` is ``raetsalt-call 0.1.0``; ``versions_report()`` lists raetsalt,
Python, the libraries raetsalt runs on (and Salt, an optional extra) and the system, in
Salt's layout: a heading per section, names right-aligned, a lone space between
sections.  Library versions come from the installed distributions' metadata, so nothing
is imported for them.
"""

from __future__ import annotations

import importlib.metadata
import locale
import platform
import sys

from raetsalt import __version__

__all__ = ["version_line", "versions_report"]

_NOT_INSTALLED = "Not Installed"
# distribution name -> the name the report shows
_DEPENDENCIES = {
    "PyNaCl": "PyNaCl",
    "msgpack": "msgpack",
    "ioflo": "ioflo",
    "PyYAML": "PyYAML",
    "salt": "salt",
    "raet": "raet",
    "libnacl": "libnacl",
}


def version_line(prog: str) -> str:
    return f"{prog} {__version__}"


def _distribution(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return _NOT_INSTALLED


def _system() -> dict[str, str]:
    from raetsalt.execution.grains import os_grains, parse_os_release

    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            release = parse_os_release(handle.read(65536))
    except OSError:
        release = {}
    grains = os_grains(release, kernel=platform.system())
    dist = " ".join(part for part in (release.get("ID", ""), grains["osrelease"],
                                      grains["oscodename"]) if part)
    version = " ".join(part for part in (grains["osfullname"], grains["osrelease"],
                                         grains["oscodename"]) if part)
    return {
        "dist": dist,
        "locale": locale.getpreferredencoding(False).lower(),
        "machine": platform.machine(),
        "release": platform.release(),
        "system": platform.system(),
        "version": version,
    }


def versions_report() -> str:
    sections = {
        "Raetsalt Version": {"raetsalt": __version__},
        "Python Version": {"Python": sys.version.replace("\n", " ")},
        "Dependency Versions": {shown: _distribution(name)
                                for name, shown in _DEPENDENCIES.items()},
        "System Versions": _system(),
    }
    width = max(len(_NOT_INSTALLED), *(len(k) for s in sections.values() for k in s)) + 1
    lines: list[str] = []
    for heading, entries in sections.items():
        lines.append(f"{heading}:")
        for name in sorted(entries, key=str.lower):
            lines.append(f"{name:>{width}}: {entries[name] or _NOT_INSTALLED}")
        lines.append(" ")
    return "\n".join(lines)
