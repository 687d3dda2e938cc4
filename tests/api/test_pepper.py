"""pepper (salt-pepper, unmodified, as a subprocess) against raetsalt-api on a real
master with two minions."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from remote.cluster import json_docs, wait_event

from api.helpers import ANN, Site, started_site
from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with started_site(2) as up:
        yield up


def test_ping_every_minion(site: Site) -> None:
    done = site.pepper("*", "test.ping", "--out=json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion1": True, "minion2": True}


def test_arguments_reach_the_minion(site: Site) -> None:
    done = site.pepper("minion2", "test.echo", "hello api", "--out=json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion2": "hello api"}


def test_runner_manage_up(site: Site) -> None:
    done = site.pepper("--client", "runner", "manage.up", "--out=json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"runner": ["minion1", "minion2"]}


def test_local_async_then_the_job_lookup(site: Site) -> None:
    bus = MasterEvent(load_node_config(site.master_conf, "master")["sock_dir"])
    try:
        bus.subscribe("salt/job/")
        done = site.pepper("--client", "local_async", "*", "test.echo", "later",
                           "--out=json")
        assert done.returncode == 0, done.stderr
        job = json_docs(done.stdout)
        assert sorted(job["minions"]) == ["minion1", "minion2"]
        jid = job["jid"]
        assert len(jid) == 20 and jid.isdigit()
        returned: set[str] = set()
        while returned != {"minion1", "minion2"}:
            event = wait_event(bus, f"salt/job/{jid}/ret/", timeout=30)
            returned.add(event["tag"].rsplit("/", 1)[1])
    finally:
        bus.destroy()
    # pepper's own poller too: local_async, then runner jobs.lookup_jid until every
    # minion answered (it fails the command when they do not within --timeout)
    polled = site.pepper("--fail-if-incomplete", "--timeout", "60", "*", "test.echo",
                         "polled", "--out=json")
    assert polled.returncode == 0, polled.stderr
    assert json_docs(polled.stdout) == {"minion1": "polled", "minion2": "polled"}
    looked = site.pepper("--client", "runner", "jobs.lookup_jid", f"jid={jid}", "--out=json")
    assert looked.returncode == 0, looked.stderr
    assert json_docs(looked.stdout) == {"runner": {"minion1": "later", "minion2": "later"}}


def test_wheel_key_list_all(site: Site) -> None:
    done = site.pepper("--client", "wheel", "key.list_all", "--out=json")
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"local": [], "minions": ["minion1", "minion2"],
                                      "minions_pre": [], "minions_rejected": [],
                                      "minions_denied": []}


def test_restricted_user_runs_what_is_allowed(site: Site) -> None:
    done = site.pepper("*", "test.ping", "--out=json", user=ANN)
    assert done.returncode == 0, done.stderr
    assert json_docs(done.stdout) == {"minion1": True, "minion2": True}


@pytest.mark.parametrize("args", [
    ("*", "cmd.run", "id"),
    ("--client", "runner", "jobs.list_jobs"),
    ("--client", "wheel", "key.list_all"),
])
def test_restricted_user_is_denied(site: Site, args: tuple[str, ...]) -> None:
    done = site.pepper(*args, user=ANN)
    assert done.returncode != 0
    assert "Authentication denied" in done.stderr or "401" in done.stderr, done.stderr
    assert "Traceback" not in done.stdout


def test_wrong_password_is_refused(site: Site) -> None:
    done = site.pepper("*", "test.ping", user=("fred", "wrong"))
    assert done.returncode != 0
    assert "401" in done.stderr or "Authentication" in done.stderr, done.stderr
