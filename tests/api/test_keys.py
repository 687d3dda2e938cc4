"""``POST /keys`` (Salt's ``key.gen_accept``) end to end: the tar a user unpacks into a
fresh minion's ``pki_dir``, the master holding the key accepted (it does not
auto-accept), the minion answering ``test.ping`` at once; denied users and an id that
already has a key refused as Salt does."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import urllib.parse
from collections.abc import Iterator

import pytest
import yaml
from remote.cluster import wait_event

from api.helpers import ANN, FRED, Site, started_site
from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with started_site(0, auto_accept=False) as up:
        yield up


def gen_keys(site: Site, mid: str, user: tuple[str, str] = FRED, **more: str
             ) -> tuple[int, dict[str, str], bytes]:
    """The request of Salt's kickstart example: a form-encoded body, no token."""
    form = urllib.parse.urlencode({"mid": mid, "username": user[0], "password": user[1],
                                   "eauth": "file", **more}).encode()
    return site.request("POST", "/keys", raw=form, headers={
        "Content-Type": "application/x-www-form-urlencoded"})


def public_keys(tar_file: bytes) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(tar_file)) as tar:
        member = tar.extractfile("minion.pub")
        assert member is not None
        keys = yaml.safe_load(member.read())
    assert isinstance(keys, dict) and sorted(keys) == ["pubhex", "verhex"]
    return keys


def key_lists(site: Site) -> dict[str, list[str]]:
    status, _h, body = site.request("GET", "/keys",
                                    headers={"X-Auth-Token": site.login()})
    assert status == 200, body
    return json.loads(body)["return"]  # type: ignore[no-any-return]


def test_a_minion_started_from_the_tar_is_accepted_and_answers(site: Site) -> None:
    status, headers, body = gen_keys(site, "newbie")
    assert status == 200, body
    assert headers["Content-Type"] == "application/x-tar"
    assert headers["Content-Disposition"] == 'attachment; filename="saltkeys-newbie.tar"'
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["minion.pub", "road", "road/local",
                                   "road/local/estate.json"]
        assert members["road/local/estate.json"].mode == 0o600
        estate_file = tar.extractfile("road/local/estate.json")
        assert estate_file is not None
        estate = json.loads(estate_file.read())
    assert estate["name"] == estate["role"] == "newbie" and len(estate["sighex"]) == 64
    assert "newbie" in key_lists(site)["minions"]  # accepted before the minion exists

    confdir = site.world.minion_dir("newbie", "newbie")
    pki_dir = load_node_config(confdir, "minion")["pki_dir"]
    os.makedirs(pki_dir, mode=0o700, exist_ok=True)
    subprocess.run(["tar", "-C", pki_dir, "-xf", "-"], input=body, check=True)
    bus = MasterEvent(load_node_config(site.master_conf, "master")["sock_dir"])
    try:
        site.world.start("minion", confdir)
        wait_event(bus, "salt/minion/newbie/start", timeout=30)
    finally:
        bus.destroy()
    token = site.login()
    status, _h, answer = site.request("POST", "/", [{"client": "local", "tgt": "newbie",
                                                     "fun": "test.ping"}],
                                      headers={"X-Auth-Token": token})
    assert status == 200, answer
    assert json.loads(answer)["return"] == [{"newbie": True}]
    lists = key_lists(site)
    assert lists["minions"] == ["newbie"] and lists["minions_pre"] == []
    assert lists["minions_denied"] == [] and lists["minions_rejected"] == []


def test_users_without_the_wheel_right_are_refused(site: Site) -> None:
    status, _h, body = gen_keys(site, "sneaky", user=ANN)
    assert status == 401, body
    assert b"Traceback" not in body
    status, _h, body = gen_keys(site, "sneaky", user=(FRED[0], "wrong"))
    assert status == 401, body
    status, _h, body = site.request("POST", "/keys", raw=b"mid=sneaky", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 401, body
    assert "sneaky" not in str(key_lists(site))


def test_an_id_with_a_key_is_refused_unless_forced(site: Site) -> None:
    status, _h, first = gen_keys(site, "twice")
    assert status == 200
    status, _h, body = gen_keys(site, "twice")
    assert status == 409, body
    assert "already has a key" in json.loads(body)["return"]
    status, _h, second = gen_keys(site, "twice", force="True")
    assert status == 200, second
    old, new = (public_keys(tar) for tar in (first, second))
    assert old != new
    assert key_lists(site)["minions"].count("twice") == 1


def test_bad_ids_and_missing_ids(site: Site) -> None:
    for mid in ("../etc", "", "a b", "-dash"):
        status, _h, body = gen_keys(site, mid)
        assert status == 400, (mid, body)
        assert b"Traceback" not in body
    assert not any(".." in m for m in key_lists(site)["minions"])
