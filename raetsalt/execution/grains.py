"""Core grains: facts about the minion's host with Salt's names and shapes, plus the
static grains of its config.

The grains a Salt user targets on are here with the values Salt 3008 gives on the same
machine (``tests/execution/test_grains_oracle.py`` compares with Salt's own core grains):
``fqdn`` (the resolver's canonical name, not ``localhost``), ``os``, ``os_family``,
``osfullname``, ``osrelease``, ``osrelease_info``, ``osmajorrelease``, ``osfinger``,
``oscodename``, ``osarch``, ``lsb_distrib_*``, ``virtual`` (and ``virtual_subtype``),
``ipv4``, ``ipv6``, ``ip_interfaces``, ``ip4_interfaces``, ``ip6_interfaces``,
``hwaddr_interfaces``, ``fqdn_ip4``, ``fqdn_ip6``, ``ip4_gw``/``ip6_gw``/``ip_gw``,
``dns``, ``num_cpus``, ``cpu_model``, ``cpu_flags``, ``mem_total``/``swap_total`` (MiB),
``cpuarch``, ``kernel``, ``kernelrelease``, ``kernelversion``, ``machine_id``, ``uuid``,
``server_id``, ``disks``/``ssds``, ``kernelparams``, ``efi``, the process grains
(``pid``, ``uid``, ``username``, ...) and the Python ones.  Linux only; the OS grains
come from ``/etc/os-release`` (Salt still reads older files on some distributions: see
the README's divergence table).

Reading the host costs at most two short commands (``systemd-detect-virt``, ``dpkg
--print-architecture``), each bounded by a time-out; everything else is files under
``/etc``, ``/proc`` and ``/sys`` and one rtnetlink request.
"""

from __future__ import annotations

import grp
import hashlib
import ipaddress
import os
import platform
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from raetsalt import __version__
from raetsalt.execution.netlink import InterfaceAddress, interface_addresses

__all__ = ["core_grains", "fqdn", "minion_grains", "os_grains", "parse_os_release"]

_COMMAND_TIMEOUT = 3.0
_MAX_FILE = 1 << 20  # no grain file is anywhere near this; a bigger one is not read whole


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(_MAX_FILE)
    except OSError:
        return ""


def _run(*argv: str) -> str:
    """stdout of a short command, or "" when it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


# --------------------------------------------------------------------------- names


def fqdn() -> str:
    """The host's fully qualified name as Salt finds it: the resolver's canonical name
    for the host name, else ``socket.getfqdn()``."""
    name = socket.getfqdn()
    try:
        infos = socket.getaddrinfo(socket.gethostname(), 0, socket.AF_UNSPEC,
                                   socket.SOCK_STREAM, socket.SOL_TCP, socket.AI_CANONNAME)
    except (OSError, UnicodeError):
        infos = []
    for info in infos:
        if info[3]:
            name = info[3]
    return name or "localhost.localdomain"


def _name_grains(minion_id: str) -> dict[str, Any]:
    full = fqdn()
    host, _, domain = full.partition(".")
    return {
        "id": minion_id,
        "fqdn": full,
        "host": host,
        "domain": domain,
        "localhost": socket.gethostname(),
        "nodename": platform.node(),
        # Salt's: a stable number from the id, for MySQL server ids and the like.
        "server_id": int(hashlib.sha256(minion_id.encode()).hexdigest(), 16) % (2**31),
    }


# --------------------------------------------------------------------------- OS


def parse_os_release(text: str) -> dict[str, str]:
    """``/etc/os-release`` as a mapping (shell-style quotes removed)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or not key or key.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        found[key] = value.replace('\\"', '"').replace("\\\\", "\\")
    return found


# The "os" grain: NAME without "Linux"/"GNU/Linux", then these names Salt has always used
# (keyed by that name without spaces, lower case, at most ten characters).
_OS_SHORT_NAMES = {
    "redhatente": "RedHat",
    "oracleserv": "OEL",
    "linuxmint": "Mint",
    "sles": "SUSE",
    "amazonami": "Amazon",
    "almalinux": "AlmaLinux",
    "rocky": "Rocky",
    "debian": "Debian",
    "arch": "Arch",
    "archarm": "Arch ARM",
    "scientific": "ScientificLinux",
    "cloudlinux": "CloudLinux",
    "manjaro": "Manjaro",
    "raspbian": "Raspbian",
    "void": "Void",
}
_OS_BY_ID_AND_NAME = {("pop", "Pop!_OS"): "Pop"}
_LINUX_WORD = re.compile(r"\W(?:gnu/)?linux", re.IGNORECASE)

# The "os_family" grain by "os", then by the os-release IDs.
_FAMILY_BY_OS = {
    **dict.fromkeys(("Ubuntu", "Mint", "Pop", "Raspbian", "Devuan", "Kali", "Deepin",
                     "elementary OS", "KDE neon", "Trisquel"), "Debian"),
    **dict.fromkeys(("Fedora", "CentOS", "CentOS Stream", "Rocky", "AlmaLinux", "Amazon",
                     "OEL", "RedHat", "ScientificLinux", "CloudLinux", "openEuler"), "RedHat"),
    **dict.fromkeys(("SUSE", "SLES", "SLED", "openSUSE", "openSUSE Leap",
                     "openSUSE Tumbleweed"), "Suse"),
    **dict.fromkeys(("Manjaro", "EndeavourOS", "Arch ARM"), "Arch"),
}
_FAMILY_BY_ID = {"debian": "Debian", "ubuntu": "Debian", "fedora": "RedHat",
                 "rhel": "RedHat", "centos": "RedHat", "suse": "Suse", "opensuse": "Suse",
                 "arch": "Arch"}
# osfinger uses "os" for these (else "osfullname"), and the whole release for the last ones.
_FINGER_BY_OS = ("Debian", "Raspbian", "AlmaLinux", "FreeBSD", "OpenBSD", "NetBSD", "Mac")
_FINGER_FULL_RELEASE = ("Ubuntu", "Pop", "NixOS")


def _os_name(fullname: str, os_id: str) -> str:
    if (os_id, fullname) in _OS_BY_ID_AND_NAME:
        return _OS_BY_ID_AND_NAME[(os_id, fullname)]
    name = _LINUX_WORD.sub("", fullname).strip()
    return _OS_SHORT_NAMES.get(name.replace(" ", "").lower()[:10], name)


def os_grains(release: Mapping[str, str], *, kernel: str = "Linux") -> dict[str, Any]:
    """The OS grains from os-release data (pure)."""
    fullname = release.get("NAME", kernel).strip() or kernel
    os_id = release.get("ID", kernel.lower())
    name = _os_name(fullname, os_id)
    ids = [os_id, *release.get("ID_LIKE", "").split()]
    family = _FAMILY_BY_OS.get(name) or next(
        (_FAMILY_BY_ID[i] for i in ids if i in _FAMILY_BY_ID), name)
    osrelease = release.get("VERSION_ID", "")
    codename = release.get("VERSION_CODENAME", "")
    if not codename:
        found = re.search(r"\((.+)\)", release.get("VERSION", ""))
        codename = found.group(1) if found else ""
    info: list[int | str] = [int(p) if p.isdigit() else p for p in osrelease.split(".")]
    grains: dict[str, Any] = {
        "os": name,
        "os_family": family,
        "osfullname": fullname,
        "osrelease": osrelease,
        "oscodename": codename,
        "osrelease_info": info,
        "lsb_distrib_id": fullname,
        "lsb_distrib_release": osrelease,
        "lsb_distrib_codename": codename,
    }
    if isinstance(info[0], int):
        grains["osmajorrelease"] = info[0]
    finger_name = name if name in _FINGER_BY_OS else fullname
    finger_release = osrelease if name in _FINGER_FULL_RELEASE else info[0]
    grains["osfinger"] = f"{finger_name}-{finger_release}"
    return grains


def _osarch(family: str, cpuarch: str) -> str:
    if family == "Debian":
        return _run("dpkg", "--print-architecture") or cpuarch
    return cpuarch


# --------------------------------------------------------------------------- hardware


def _meminfo_mib(text: str, field: str) -> int:
    for line in text.splitlines():
        if line.startswith(field + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) // 1024
    return 0


def _cpu_grains(cpuinfo: str) -> dict[str, Any]:
    model = ""
    flags: list[str] = []
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = value.split()
    return {"num_cpus": os.cpu_count() or 1, "cpu_model": model, "cpu_flags": flags}


def _first_line(path: str) -> str:
    text = _read(path).strip()
    return text.splitlines()[0].strip() if text else ""


def _ids_grains() -> dict[str, Any]:
    grains: dict[str, Any] = {}
    machine_id = _first_line("/etc/machine-id") or _first_line("/var/lib/dbus/machine-id")
    if machine_id:
        grains["machine_id"] = machine_id
    product_uuid = _first_line("/sys/class/dmi/id/product_uuid")
    if product_uuid:
        grains["uuid"] = product_uuid.lower()
    return grains


def _kernelparams(cmdline: str) -> list[list[str | None]]:
    """``/proc/cmdline`` as [name, value] pairs (value None for a bare word)."""
    try:
        words = shlex.split(cmdline)
    except ValueError:
        return []
    params: list[list[str | None]] = []
    for word in words:
        parts = word.split("=")
        params.append([parts[0], parts[1].strip('"') if len(parts) == 2 else None])
    return params


def _disk_grains() -> dict[str, Any]:
    """Block devices that are not virtual, split by what they say of rotation."""
    disks: list[str] = []
    ssds: list[str] = []
    try:
        entries = sorted(os.listdir("/sys/block"))
    except OSError:
        entries = []
    for name in entries:
        try:
            if os.readlink(f"/sys/block/{name}").startswith("../devices/virtual/"):
                continue
        except OSError:
            continue
        flag = _read(f"/sys/block/{name}/queue/rotational")[:1]
        if flag == "0":
            ssds.append(name)
        elif flag == "1":
            disks.append(name)
    return {"disks": disks, "ssds": ssds}


def _efi_grains() -> dict[str, Any]:
    efi = os.path.exists("/sys/firmware/efi/systab")
    secure = False
    if efi:
        try:
            names = os.listdir("/sys/firmware/efi/efivars")
        except OSError:
            names = []
        for name in names:
            if name.startswith("SecureBoot-"):
                try:
                    with open(f"/sys/firmware/efi/efivars/{name}", "rb") as handle:
                        secure = handle.read(8)[-1:] == b"\x01"
                except OSError:
                    pass
    return {"efi": efi, "efi-secure-boot": secure}


# systemd-detect-virt's answers, as Salt names them: virtual, and virtual_subtype.
_DETECT_VIRT: dict[str, tuple[str, str]] = {
    **{name: (name, "") for name in ("qemu", "kvm", "oracle", "xen", "bochs", "chroot",
                                      "uml", "systemd-nspawn")},
    "vmware": ("VMware", ""),
    "microsoft": ("VirtualPC", ""),
    "lxc": ("container", "LXC"),
    "podman": ("container", "Podman"),
    "docker": ("container", "Docker"),
    "amazon": ("Nitro", "Amazon EC2"),
}
# /sys/class/dmi/id/product_name words, when nothing else answered.
_DMI_PRODUCTS = (("VirtualBox", "VirtualBox"), ("VMware", "VMware"), ("KVM", "kvm"),
                 ("Google", "gce"), ("BHYVE", "bhyve"), ("Virtual Machine", "VirtualPC"))


def _virtual_grains() -> dict[str, Any]:
    answer = _run("systemd-detect-virt")
    if answer in _DETECT_VIRT:
        virtual, subtype = _DETECT_VIRT[answer]
        return {"virtual": virtual, **({"virtual_subtype": subtype} if subtype else {})}
    cgroup = _read("/proc/1/cgroup")
    if ":/lxc/" in cgroup or "container=lxc" in _read("/proc/1/environ").replace("\0", "\n"):
        return {"virtual": "container", "virtual_subtype": "LXC"}
    if (any(mark in cgroup for mark in (":/system.slice/docker", ":/docker/", ":/docker-ce/"))
            or os.path.exists("/.dockerenv")):
        return {"virtual": "container", "virtual_subtype": "Docker"}
    if os.path.exists("/run/.containerenv"):
        return {"virtual": "container", "virtual_subtype": "Podman"}
    if _read("/sys/hypervisor/type").strip() == "xen" or os.path.isdir("/proc/xen"):
        return {"virtual": "xen"}
    if "QEMU Virtual CPU" in _read("/proc/cpuinfo"):
        return {"virtual": "kvm"}
    product = _read("/sys/class/dmi/id/product_name")
    for word, virtual in _DMI_PRODUCTS:
        if word in product:
            return {"virtual": virtual}
    return {"virtual": "physical"}


# --------------------------------------------------------------------------- network


def network_grains(
    addresses: Iterable[InterfaceAddress],
    interfaces: Iterable[tuple[int, str]],
    hwaddrs: Mapping[str, str],
) -> dict[str, Any]:
    """The address grains (pure): interfaces in index order, each with its addresses in
    the kernel's order, IPv4 secondaries last, as Salt lists them."""
    names = dict(sorted(interfaces))
    v4: dict[str, list[str]] = {name: [] for name in names.values()}
    v4_secondary: dict[str, list[str]] = {name: [] for name in names.values()}
    v6: dict[str, list[str]] = {name: [] for name in names.values()}
    for item in addresses:
        name = names.get(item.index)
        if name is None:
            continue
        if item.family == socket.AF_INET:
            (v4_secondary if item.secondary else v4)[name].append(item.address)
        else:
            v6[name].append(item.address)
    ip4 = {name: v4[name] + v4_secondary[name] for name in names.values()}
    all4 = {a for addrs in ip4.values() for a in addrs}
    all6 = {a for addrs in v6.values() for a in addrs}
    return {
        "ip4_interfaces": ip4,
        "ip6_interfaces": v6,
        "ip_interfaces": {name: v4[name] + v6[name] + v4_secondary[name]
                          for name in names.values()},
        "hwaddr_interfaces": {name: hwaddrs[name] for name in names.values() if name in hwaddrs},
        "ipv4": [str(a) for a in sorted(map(ipaddress.IPv4Address, all4))],
        "ipv6": [str(a) for a in sorted(map(ipaddress.IPv6Address, all6))],
    }


def _hwaddrs(names: Iterable[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for name in names:
        if "/" in name or name in (".", ".."):
            continue
        value = _read(f"/sys/class/net/{name}/address").strip()
        if value:
            found[name] = value
    return found


def _fqdn_ips(name: str, grains: Mapping[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for family, version in ((socket.AF_INET, "4"), (socket.AF_INET6, "6")):
        found[f"fqdn_ip{version}"] = []
        if not grains[f"ipv{version}"]:
            continue
        try:
            infos = socket.getaddrinfo(name, None, family)
        except (OSError, UnicodeError):
            continue
        found[f"fqdn_ip{version}"] = sorted({str(info[4][0]) for info in infos})
    return found


def parse_routes(route4: str, route6: str) -> dict[str, Any]:
    """``ip4_gw``/``ip6_gw`` (the first default route's gateway, True for a default route
    without one, False for none) and ``ip_gw``, from /proc/net/route and ipv6_route."""
    gw4: str | bool = False
    for line in route4.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 4 and cols[1] == "00000000" and cols[7:8] == ["00000000"]:
            gateway = int(cols[2], 16) if re.fullmatch(r"[0-9A-Fa-f]{8}", cols[2]) else 0
            gw4 = str(ipaddress.IPv4Address(gateway.to_bytes(4, "little"))) if gateway else True
            break
    gw6: str | bool = False
    for line in route6.splitlines():
        cols = line.split()
        if len(cols) >= 10 and cols[0] == "0" * 32 and cols[1] == "00":
            hop = cols[4]
            if re.fullmatch(r"[0-9a-fA-F]{32}", hop) and int(hop, 16):
                gw6 = str(ipaddress.IPv6Address(bytes.fromhex(hop)))
            else:
                gw6 = True
            break
    return {"ip_gw": bool(gw4 or gw6), "ip4_gw": gw4, "ip6_gw": gw6}


def parse_resolv(text: str) -> dict[str, Any]:
    """The ``dns`` grain from resolv.conf text."""
    nameservers: list[str] = []
    sortlist: list[str] = []
    search: list[str] = []
    options: list[str] = []
    domain = ""
    for line in text.splitlines():
        words = line.split("#", 1)[0].split(";", 1)[0].split()
        if not words:
            continue
        keyword, values = words[0], words[1:]
        if keyword == "nameserver" and values:
            try:
                nameservers.append(str(ipaddress.ip_address(values[0])))
            except ValueError:
                continue
        elif keyword == "domain" and values:
            domain = values[0]
        elif keyword == "search":
            search = values
        elif keyword == "sortlist":
            sortlist.extend(values)
        elif keyword == "options":
            options.extend(values)
    return {
        "nameservers": nameservers,
        "ip4_nameservers": [n for n in nameservers if ipaddress.ip_address(n).version == 4],
        "ip6_nameservers": [n for n in nameservers if ipaddress.ip_address(n).version == 6],
        "sortlist": sortlist,
        "domain": domain,
        "search": search,
        "options": options,
    }


# --------------------------------------------------------------------------- process


def _process_grains() -> dict[str, Any]:
    uid, gid = os.getuid(), os.getgid()
    try:
        username = pwd.getpwuid(uid).pw_name
    except KeyError:
        username = str(uid)
    try:
        groupname = grp.getgrgid(gid).gr_name
    except KeyError:
        groupname = str(gid)
    path = os.environ.get("PATH", "")
    return {
        "pid": os.getpid(),
        "uid": uid,
        "gid": gid,
        "username": username,
        "groupname": groupname,
        "shell": os.environ.get("SHELL", "/bin/sh"),
        "path": path,
        "systempath": path.split(os.pathsep) if path else [],
        "cwd": os.getcwd(),
        "pythonexecutable": sys.executable,
        "pythonpath": list(sys.path),
        "pythonversion": [*sys.version_info[:3], sys.version_info.releaselevel,
                          sys.version_info.serial],
        "saltversion": __version__,
    }


# --------------------------------------------------------------------------- all


def core_grains(minion_id: str, *, master: str | None = None) -> dict[str, Any]:
    """The grains every minion reports; ``id`` is the minion's configured id and
    ``master`` the master it was configured with."""
    kernel = platform.system()
    cpuarch = platform.machine()
    grains: dict[str, Any] = _name_grains(minion_id)
    grains.update(
        kernel=kernel,
        kernelrelease=platform.release(),
        kernelversion=platform.version(),
        cpuarch=cpuarch,
    )
    grains.update(os_grains(parse_os_release(_read("/etc/os-release")
                                             or _read("/usr/lib/os-release")), kernel=kernel))
    grains["osarch"] = _osarch(grains["os_family"], cpuarch)
    grains.update(_cpu_grains(_read("/proc/cpuinfo")))
    meminfo = _read("/proc/meminfo")
    grains["mem_total"] = _meminfo_mib(meminfo, "MemTotal")
    grains["swap_total"] = _meminfo_mib(meminfo, "SwapTotal")
    grains.update(_ids_grains())
    grains.update(_virtual_grains())
    grains.update(_disk_grains())
    grains.update(_efi_grains())
    grains["kernelparams"] = _kernelparams(_read("/proc/cmdline"))
    grains["ps"] = "ps -efHww"
    try:
        interfaces = socket.if_nameindex()
    except OSError:
        interfaces = []
    grains.update(network_grains(interface_addresses(), interfaces,
                                 _hwaddrs(name for _, name in interfaces)))
    grains.update(_fqdn_ips(grains["fqdn"], grains))
    grains.update(parse_routes(_read("/proc/net/route"), _read("/proc/net/ipv6_route")))
    grains["dns"] = parse_resolv(_read("/etc/resolv.conf"))
    grains.update(_process_grains())
    if master is not None:
        grains["master"] = master
    return grains


def minion_grains(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Core grains overlaid with the static ``grains`` of the minion config."""
    grains = core_grains(str(opts.get("id", "")), master=opts.get("master"))
    grains.update(opts.get("grains") or {})
    return grains
