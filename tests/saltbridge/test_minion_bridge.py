"""The minion daemon's side of the zygote protocol, with the test playing the zygote."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from raetsalt.daemon.executor import ForkExecutor
from raetsalt.daemon.saltminion import HELLO_WAIT, MinionBridge
from raetsalt.saltbridge import control
from raetsalt.services.minion import JobSpec, MinionJobs, ToMaster


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[MinionBridge, socket.socket,
                                                             MinionJobs, Clock]]:
    ends: list[socket.socket] = []

    def fake_start(self: MinionBridge) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours.setblocking(False)
        self._sock = ours
        ends.append(theirs)

    monkeypatch.setattr(MinionBridge, "_start", fake_start)
    clock = Clock()
    executor = ForkExecutor(lambda job: {})
    bridge = MinionBridge({"id": "web1"}, executor, "auto", clock=clock)
    jobs = MinionJobs("web1", {"os": "native"}, estate="web1")
    yield bridge, ends[0], jobs, clock
    bridge.close()
    executor.close()
    for end in ends:
        end.close()


def _spec(jid: str) -> JobSpec:
    return JobSpec(jid, "state.apply", [], "web1")


def _hellos(actions: list[Any]) -> list[dict[str, Any]]:
    return [a.body for a in actions if isinstance(a, ToMaster)]


def test_hello_waits_for_salts_grains_and_queued_jobs_go_when_ready(parts: Any) -> None:
    bridge, zygote, jobs, _clock = parts
    assert bridge.holds_hello()
    bridge.hello_due = True
    assert bridge.submit(_spec("j1"), jobs.grains, {"role": "web"}) is None
    assert bridge.poll(jobs) == []  # nothing from the zygote yet: no hello
    control.send(zygote, {"op": "ready"}, {"grains": {"os": "Debian", "id": "web1"},
                                           "version": "3008.3"})
    [hello] = _hellos(bridge.poll(jobs))
    assert hello["grains"] == {"os": "Debian", "id": "web1"} and hello["start"] is True
    header, body, fds = control.receive(zygote)  # the queued job, with its pipe
    assert header["op"] == "job" and header["jid"] == "j1"
    assert body["pillar"] == {"role": "web"}
    assert body["grains"] == {"os": "native"}  # the grains when the job came
    assert len(fds) == 1
    os.close(fds[0])
    assert not bridge.holds_hello()


def test_started_failed_and_a_dead_zygote(parts: Any) -> None:
    bridge, zygote, jobs, clock = parts
    control.send(zygote, {"op": "ready"}, {"grains": {}, "version": "3008.3"})
    bridge.poll(jobs)
    for jid in ("a", "b", "c"):
        [spawn] = jobs.on_publish({"jid": jid, "fun": "state.apply", "arg": [], "tgt": "web1"},
                                 0.0, 0.0)
        assert bridge.submit(spawn.spec, {}, {}) is None
        for fd in control.receive(zygote)[2]:
            os.close(fd)
    control.send(zygote, {"op": "started", "jid": "a", "pid": 4242})
    control.send(zygote, {"op": "failed", "jid": "b", "reason": "fork: no memory"})
    actions = bridge.poll(jobs)
    assert jobs.running["a"].pid == 4242 and bridge.executor.running()["a"] == 4242
    [failed] = [a.body for a in actions if isinstance(a, ToMaster)]
    assert failed["jid"] == "b" and "fork: no memory" in failed["return"]
    zygote.close()  # the zygote dies; job c was handed over but never started
    actions = bridge.poll(jobs)
    [lost] = [a.body for a in actions if isinstance(a, ToMaster)]
    assert lost["jid"] == "c" and "exited" in lost["return"] and lost["retcode"] == 1
    assert not bridge.ready and bridge.timeout() == pytest.approx(1.0)
    clock.now += 1.0
    bridge.poll(jobs)  # restarted (the fixture's fake start)
    assert bridge.timeout() is None


def test_unavailable_salt_turns_auto_mode_native(parts: Any) -> None:
    bridge, zygote, jobs, _clock = parts
    bridge.hello_due = True
    control.send(zygote, {"op": "unavailable", "reason": "ImportError: no salt"})
    [hello] = _hellos(bridge.poll(jobs))
    assert hello["grains"] == {"os": "native"}
    assert not bridge.active and not bridge.wants("state.apply", {})


def test_hello_does_not_wait_forever(parts: Any) -> None:
    bridge, _zygote, jobs, clock = parts
    bridge.hello_due = True
    assert bridge.timeout() == pytest.approx(HELLO_WAIT)
    clock.now += HELLO_WAIT
    [hello] = _hellos(bridge.poll(jobs))
    assert hello["grains"] == {"os": "native"} and not bridge.holds_hello()
