"""The pure parts of the core grains: OS grains from os-release files of common
distributions (compared with Salt's own derivation when Salt is installed), interface
addresses, routes, resolv.conf, and the rtnetlink parser under hostile input."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raetsalt.execution.grains import (
    core_grains,
    minion_grains,
    network_grains,
    os_grains,
    parse_os_release,
    parse_resolv,
    parse_routes,
)
from raetsalt.execution.netlink import InterfaceAddress, parse_dump

OS_RELEASES = {
    "debian12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'
                'VERSION_ID="12"\nVERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\n',
    "ubuntu2204": 'PRETTY_NAME="Ubuntu 22.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                  'VERSION="22.04.3 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\n'
                  'ID_LIKE=debian\n',
    "rocky9": 'NAME="Rocky Linux"\nVERSION="9.3 (Blue Onyx)"\nID="rocky"\n'
              'ID_LIKE="rhel centos fedora"\nVERSION_ID="9.3"\nPRETTY_NAME="Rocky Linux 9.3"\n',
    "alma9": 'NAME="AlmaLinux"\nVERSION="9.4 (Seafoam Ocelot)"\nID="almalinux"\n'
             'ID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\nPRETTY_NAME="AlmaLinux 9.4"\n',
    "mint21": 'NAME="Linux Mint"\nVERSION="21.2 (Victoria)"\nID=linuxmint\n'
              'ID_LIKE="ubuntu debian"\nPRETTY_NAME="Linux Mint 21.2"\nVERSION_ID="21.2"\n'
              'VERSION_CODENAME=victoria\n',
    "pop": 'NAME="Pop!_OS"\nVERSION="22.04 LTS"\nID=pop\nID_LIKE="ubuntu debian"\n'
           'PRETTY_NAME="Pop!_OS 22.04 LTS"\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\n',
}
# Salt derives these from os-release alone (its other distributions go through older files).
SALT_READS_OS_RELEASE = ("debian12", "ubuntu2204", "rocky9", "alma9", "mint21", "pop")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("debian12", {"os": "Debian", "os_family": "Debian", "osfinger": "Debian-12",
                      "osmajorrelease": 12, "oscodename": "bookworm", "osrelease_info": [12]}),
        ("ubuntu2204", {"os": "Ubuntu", "os_family": "Debian", "osfinger": "Ubuntu-22.04",
                        "osrelease_info": [22, 4], "oscodename": "jammy"}),
        ("rocky9", {"os": "Rocky", "os_family": "RedHat", "osfinger": "Rocky Linux-9",
                    "oscodename": "Blue Onyx", "osrelease": "9.3"}),
        ("alma9", {"os": "AlmaLinux", "os_family": "RedHat", "osfinger": "AlmaLinux-9"}),
        ("mint21", {"os": "Mint", "os_family": "Debian", "osfinger": "Linux Mint-21"}),
        ("pop", {"os": "Pop", "os_family": "Debian", "osfinger": "Pop!_OS-22.04"}),
    ],
)
def test_os_grains(name: str, expected: dict[str, Any]) -> None:
    grains = os_grains(parse_os_release(OS_RELEASES[name]))
    assert {k: grains[k] for k in expected} == expected


@pytest.mark.parametrize("name", SALT_READS_OS_RELEASE)
def test_os_grains_as_salt_derives_them(name: str) -> None:
    core = pytest.importorskip("salt.grains.core", reason="Salt (the oracle) is not installed")
    release = parse_os_release(OS_RELEASES[name])
    salts = core._os_release_to_grains(release)
    salts.update(core._osrelease_data(salts["os"], salts["osfullname"], salts["osrelease"]))
    salts["osrelease_info"] = list(salts["osrelease_info"])
    ours = os_grains(release)
    assert {k: ours.get(k) for k in salts} == salts


def test_os_release_without_version() -> None:
    grains = os_grains(parse_os_release('NAME="Arch Linux"\nID=arch\nBUILD_ID=rolling\n'))
    assert grains["os"] == "Arch" and grains["os_family"] == "Arch"
    assert "osmajorrelease" not in grains and grains["osrelease"] == ""
    assert os_grains({})["os"] == "Linux"  # no os-release at all


def test_interfaces_in_index_order_with_ipv4_secondaries_last() -> None:
    v4, v6 = socket.AF_INET, socket.AF_INET6
    addresses = [
        InterfaceAddress(2, v4, "10.0.0.9", True),
        InterfaceAddress(2, v4, "10.0.0.2", False),
        InterfaceAddress(1, v4, "127.0.0.1", False),
        InterfaceAddress(2, v6, "fe80::1", False),
        InterfaceAddress(9, v4, "10.9.9.9", False),  # an interface that went away
    ]
    grains = network_grains(addresses, [(3, "dummy0"), (2, "eth0"), (1, "lo")],
                            {"eth0": "02:00:00:00:00:01", "lo": "00:00:00:00:00:00"})
    assert list(grains["ip4_interfaces"]) == ["lo", "eth0", "dummy0"]
    assert grains["ip4_interfaces"]["eth0"] == ["10.0.0.2", "10.0.0.9"]
    assert grains["ip_interfaces"]["eth0"] == ["10.0.0.2", "fe80::1", "10.0.0.9"]
    assert grains["ip6_interfaces"] == {"lo": [], "eth0": ["fe80::1"], "dummy0": []}
    assert grains["ipv4"] == ["10.0.0.2", "10.0.0.9", "127.0.0.1"]
    assert grains["hwaddr_interfaces"] == {"lo": "00:00:00:00:00:00",
                                           "eth0": "02:00:00:00:00:01"}


def test_routes() -> None:
    route4 = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT\n"
              "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
              "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n")
    route6 = ("00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
              "fd000000000000000000000000000001 00000400 00000002 00000000 00000003 eth0\n")
    assert parse_routes(route4, route6) == {"ip_gw": True, "ip4_gw": "192.0.2.1",
                                            "ip6_gw": "fd00::1"}
    assert parse_routes("", "") == {"ip_gw": False, "ip4_gw": False, "ip6_gw": False}
    assert parse_routes("h\neth0 00000000 zz 3 0 0 0 00000000", "x")["ip4_gw"] is True


def test_resolv_conf() -> None:
    text = ("# comment\nnameserver 10.0.0.1\nnameserver ::1 # local\nnameserver bogus\n"
            "search a.example b.example\ndomain example\noptions ndots:2 rotate\n")
    assert parse_resolv(text) == {
        "nameservers": ["10.0.0.1", "::1"], "ip4_nameservers": ["10.0.0.1"],
        "ip6_nameservers": ["::1"], "sortlist": [], "domain": "example",
        "search": ["a.example", "b.example"], "options": ["ndots:2", "rotate"],
    }


def _newaddr(index: int, family: int, raw: bytes, *, local: bytes | None = None,
             flags: int = 0) -> bytes:
    attrs = b""
    for kind, value in ((1, raw), (2, local)):
        if value is not None:
            attr = struct.pack("=HH", 4 + len(value), kind) + value
            attrs += attr + b"\0" * (-len(attr) % 4)
    body = struct.pack("=BBBBI", family, 24, flags, 0, index) + attrs
    return struct.pack("=IHHII", 16 + len(body), 20, 2, 1, 0) + body


def test_netlink_dump_parse() -> None:
    data = (_newaddr(1, socket.AF_INET, bytes([10, 0, 0, 1]), local=bytes([10, 0, 0, 2]),
                     flags=1)
            + _newaddr(2, socket.AF_INET6, bytes(15) + b"\x01")
            + struct.pack("=IHHII", 20, 3, 2, 1, 0) + bytes(4))
    found, done = parse_dump(data)
    assert done
    assert found == [InterfaceAddress(1, socket.AF_INET, "10.0.0.2", True),
                     InterfaceAddress(2, socket.AF_INET6, "::1", False)]
    # a length that points past the data ends the parse without reading beyond it
    assert parse_dump(struct.pack("=IHHII", 9999, 20, 2, 1, 0) + bytes(8)) == ([], True)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_netlink_parse_never_raises(data: bytes) -> None:
    found, _ = parse_dump(data)
    assert all(isinstance(a.address, str) for a in found)


def test_core_grains_shapes() -> None:
    grains = minion_grains({"id": "m9", "master": "salt", "grains": {"roles": ["web"]}})
    assert grains["id"] == "m9" and grains["roles"] == ["web"] and grains["master"] == "salt"
    assert "127.0.0.1" in grains["ipv4"] and grains["kernel"] == "Linux"
    assert isinstance(grains["num_cpus"], int) and isinstance(grains["mem_total"], int)
    assert grains["fqdn"] != "" and "." not in grains["host"]
    assert core_grains("x")["server_id"] == core_grains("x")["server_id"] < 2**31
