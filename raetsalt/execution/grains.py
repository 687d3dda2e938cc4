"""Core grains: facts about the minion's host, plus static grains from its config."""

from __future__ import annotations

import ipaddress
import os
import platform
import socket
import sys
from typing import Any

from raetsalt import __version__


def _addresses() -> tuple[list[str], list[str]]:
    v4: set[str] = {"127.0.0.1"}
    v6: set[str] = {"::1"}
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None)
    except OSError:
        infos = []
    for family, _, _, _, sockaddr in infos:
        host = str(sockaddr[0]).split("%")[0]
        (v4 if family == socket.AF_INET else v6).add(host)
    try:  # the address used to reach the outside (no packet is sent for UDP connect)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))
            v4.add(probe.getsockname()[0])
    except OSError:
        pass
    key = lambda a: ipaddress.ip_address(a)  # noqa: E731
    return sorted(v4, key=key), sorted(v6, key=key)


def _os_release() -> dict[str, str]:
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            pairs = (line.rstrip("\n").split("=", 1) for line in handle if "=" in line)
            return {k: v.strip('"') for k, v in pairs}
    except OSError:
        return {}


def _mem_total_mib() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError):
        pass
    return 0


_FAMILIES = {
    "debian": "Debian",
    "ubuntu": "Debian",
    "rhel": "RedHat",
    "fedora": "RedHat",
    "centos": "RedHat",
    "rocky": "RedHat",
    "almalinux": "RedHat",
    "suse": "Suse",
    "opensuse": "Suse",
    "arch": "Arch",
    "alpine": "Alpine",
    "gentoo": "Gentoo",
}


def core_grains(minion_id: str) -> dict[str, Any]:
    """The grains every minion reports; ``id`` is the minion's configured id."""
    release = _os_release()
    os_id = release.get("ID", platform.system().lower())
    os_name = release.get("NAME", platform.system()).split()[0] if release else platform.system()
    like = [os_id, *release.get("ID_LIKE", "").split()]
    family = next((_FAMILIES[x] for x in like if x in _FAMILIES), os_name)
    v4, v6 = _addresses()
    host = socket.gethostname()
    return {
        "id": minion_id,
        "host": host.split(".")[0],
        "fqdn": socket.getfqdn(),
        "os": os_name,
        "os_family": family,
        "osrelease": release.get("VERSION_ID", platform.release()),
        "kernel": platform.system(),
        "kernelrelease": platform.release(),
        "cpuarch": platform.machine(),
        "num_cpus": os.cpu_count() or 1,
        "mem_total": _mem_total_mib(),
        "ipv4": v4,
        "ipv6": v6,
        "pythonversion": list(sys.version_info)[:3]
        + [sys.version_info.releaselevel, sys.version_info.serial],
        "saltversion": __version__,
    }


def minion_grains(opts: dict[str, Any]) -> dict[str, Any]:
    """Core grains overlaid with the static ``grains`` of the minion config."""
    grains = core_grains(str(opts.get("id", "")))
    grains.update(opts.get("grains") or {})
    return grains
