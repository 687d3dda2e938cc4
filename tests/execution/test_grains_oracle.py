"""Core grains compared with Salt 3008's own core grains on this machine.

Every grain both report must have the same value (Salt's tuples are lists here, as after
the wire; ``fqdn_ip4/6`` come from a set in Salt, so they compare as sets), except the
ones that describe the running program rather than the host.  The grains a Salt user
targets on must all be there.  Skipped only when Salt cannot be imported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from raetsalt.execution.grains import core_grains

salt_config = pytest.importorskip("salt.config", reason="Salt (the oracle) is not installed")
salt_loader = pytest.importorskip("salt.loader")

# They describe the process or the program, not the host.
PROGRAM = {"pid", "cwd", "saltversion", "pythonexecutable", "pythonpath", "path",
           "systempath"}
TARGETED = {
    "id", "fqdn", "host", "domain", "os", "os_family", "osfullname", "osrelease",
    "osrelease_info", "osmajorrelease", "osfinger", "oscodename", "osarch", "virtual",
    "ipv4", "ipv6", "ip_interfaces", "ip4_interfaces", "ip6_interfaces", "fqdn_ip4",
    "fqdn_ip6", "num_cpus", "mem_total", "cpuarch", "kernel", "kernelrelease", "machine_id",
    "server_id", "master", "hwaddr_interfaces", "dns", "cpu_model", "cpu_flags",
}


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("saltroot")
    opts = dict(salt_config.DEFAULT_MINION_OPTS)
    opts.update(id="oracle-minion", master="salt", root_dir=str(root),
                cachedir=str(root / "cache"), file_client="local")
    cwd = os.getcwd()
    try:
        theirs = {k: _plain(v) for k, v in salt_loader.grains(opts).items()}
    finally:
        os.chdir(cwd)
    ours = core_grains("oracle-minion", master="salt")
    return theirs, ours


def test_targeted_grains_are_all_there(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, ours = both
    missing = TARGETED - set(ours)
    assert not missing
    if os.path.exists("/sys/class/dmi/id/product_uuid") and os.access(
            "/sys/class/dmi/id/product_uuid", os.R_OK):
        assert "uuid" in ours


def test_same_values_as_salt(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    theirs, ours = both
    shared = (set(theirs) & set(ours)) - PROGRAM
    assert {k for k in TARGETED if k in theirs} <= shared
    differ = {}
    for key in sorted(shared):
        mine, salts = ours[key], theirs[key]
        if key in ("fqdn_ip4", "fqdn_ip6"):
            mine, salts = sorted(mine), sorted(salts)
        if mine != salts:
            differ[key] = (salts, mine)
    assert not differ, differ


def test_we_report_what_salt_reports(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    theirs, ours = both
    # Grains Salt has that we leave out on purpose (README: deliberate differences).
    left_out = {"ca_truststore", "fibre_channel_host", "fqdns", "gpus", "num_gpus", "init",
                "locale_info", "package", "saltpath", "saltversioninfo", "systemd",
                "transactional", "zmqversion", "selinux", "iscsi_iqn", "biosversion",
                "biosreleasedate", "manufacturer", "productname", "serialnumber",
                "virtual_subtype", "uuid", "mdadm", "lvm", "nvme_nqn", "osmanufacturer"}
    missing = set(theirs) - set(ours) - left_out
    assert not missing, sorted(missing)
    if "virtual_subtype" in theirs:
        assert ours.get("virtual_subtype") == theirs["virtual_subtype"]
