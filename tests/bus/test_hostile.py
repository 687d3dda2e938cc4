"""A real bus host against hostile input: hostile pages, a listener that stops reading,
and a process of another user.
"""

from __future__ import annotations

import os
import socket

import pytest

from raetsalt.event import MasterEvent, SaltEvent
from raetsalt.lane.page import PackKind, encode_body, paginate
from raetsalt.paths import lane_name_for

from .helpers import Proc, start_bus


def raw_yard(sock_dir: str, lane: str, yard: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(sock_dir, f"{lane}.{yard}.uxd"))
    return sock


def page(sn: str, body: dict, dn: str = "manor") -> bytes:
    [data] = paginate(encode_body(body), pack_kind=PackKind.MSGPACK, source=sn, destination=dn,
                      session_id="abc", book_id=1)
    return data


def roundtrip(sock_dir: str, tag: str) -> dict | None:
    with MasterEvent(sock_dir) as listener, SaltEvent("master", sock_dir) as emitter:
        assert emitter.fire_event({"ok": tag}, tag)
        return listener.get_event(wait=5, tag=tag)


def test_garbage_and_spoofed_pages_do_not_hurt_the_bus(procs: list[Proc], short_dir: str) -> None:
    sock_dir = os.path.join(short_dir, "s")
    manor = start_bus(procs, "master", sock_dir)
    with MasterEvent(sock_dir) as victim:
        mallory = raw_yard(sock_dir, "master", "evmallory")
        unbound = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        fire = {"route": {"src": [None, "x", None], "dst": [None, "manor", "event_fire"]},
                "tag": "spoof", "data": {"evil": 1}}
        hostile = [
            b"", b"\x00" * 100, b"ri RAET\n" + os.urandom(200), b"ri RAET\nvn 0\n\n",
            page("evmallory", {"route": 5}),
            page("evmallory", {"route": {"src": 1, "dst": 2}}),
            page("evmallory", {}, dn="somebodyelse"),
            page("evmallory", fire)[:-3] + b"\xc1\xc1\xc1",
            page("manor", fire),  # claims the manor's own name
            page(victim._lane.yard_name, fire),  # claims the victim's name
        ]
        for data in hostile:
            mallory.sendto(data, manor)
            unbound.sendto(page("evmallory", fire), manor)
        mallory.close()
        unbound.close()
        # The bus still serves, and none of the forged events came through.
        assert (roundtrip(sock_dir, "after") or {}).get("ok") == "after"
        got = victim.get_event(wait=5, tag="", full=True)
        assert got is not None and got["tag"] == "after"


def test_listener_that_stops_reading_does_not_block_emitter(
    procs: list[Proc], short_dir: str
) -> None:
    sock_dir = os.path.join(short_dir, "s")
    manor = start_bus(procs, "master", sock_dir)
    lane = lane_name_for("master", None)
    stalled = raw_yard(sock_dir, lane, "evstall")
    stalled.sendto(page("evstall", {"route": {"src": [None, "evstall", None],
                                              "dst": [None, "manor", "event_req"]}}), manor)
    assert b"event_ack" in stalled.recv(70000)
    with MasterEvent(sock_dir) as healthy, SaltEvent("master", sock_dir) as emitter:
        # Far more than the stalled listener's socket holds: every event is taken, and
        # the healthy listener still gets the last one.
        for n in range(20000):
            assert emitter.fire_event({"n": n, "pad": "x" * 50}, "flood")
        assert emitter.fire_event({"last": True}, "done")
        assert healthy.get_event(wait=10, tag="done") is not None
    stalled.close()
    assert roundtrip(sock_dir, "still-serving") is not None


def test_a_client_that_stops_reading_does_not_starve_the_others(
    procs: list[Proc], short_dir: str
) -> None:
    """A real subscriber (``MasterEvent``, as a script or the REST API holds one) that
    subscribes and then never reads.  Linux lets a sender queue datagrams without limit
    to a socket connected to it, so when clients connected to the manor one such client
    held the manor's datagrams until its whole send buffer was spent, and then nobody
    got anything: the master stalled for every client.  Its queue is its own now."""
    sock_dir = os.path.join(short_dir, "s")
    start_bus(procs, "master", sock_dir)
    with MasterEvent(sock_dir) as stalled, MasterEvent(sock_dir) as healthy, \
            SaltEvent("master", sock_dir) as emitter:
        assert stalled.connect_pub(5) and healthy.connect_pub(5)
        # 4,000 events of 4 KiB: 16 MiB, beyond any send buffer Linux grants the manor.
        pad = "x" * 4096
        for n in range(4000):
            assert emitter.fire_event({"n": n, "pad": pad}, "flood")
            if n % 100 == 99:  # the healthy one keeps up; the stalled one never reads
                while healthy.get_event(no_block=True, tag="flood") is not None:
                    pass
        assert emitter.fire_event({"last": True}, "done")
        assert healthy.get_event(wait=10, tag="done") is not None
        assert roundtrip(sock_dir, "still-serving") is not None


def test_a_hostile_client_connected_to_the_manor_does_not_starve_the_others(
    procs: list[Proc], short_dir: str
) -> None:
    """The same stalled subscriber, but its socket connected to the manor's path by its
    own hand (a local user who may use the bus does not have to run our client).  Linux
    would queue without limit what the manor's socket sends to it; the manor sends from
    a socket of its own that nobody else may connect to, so this client is bounded by
    its queue limit (here: the kernel refuses it everything, as it is connected to
    another socket, and the manor forgets it)."""
    sock_dir = os.path.join(short_dir, "s")
    manor = start_bus(procs, "master", sock_dir)
    lane = lane_name_for("master", None)
    stalled = raw_yard(sock_dir, lane, "evhoard")
    stalled.connect(manor)
    stalled.send(page("evhoard", {"route": {"src": [None, "evhoard", None],
                                            "dst": [None, "manor", "event_req"]}}))
    with SaltEvent("master", sock_dir) as emitter:
        pad = "x" * 4096
        for n in range(4000):  # 16 MiB: beyond any send buffer Linux grants the manor
            assert emitter.fire_event({"n": n, "pad": pad}, "flood")
    # Everybody else is still served: a new listener subscribes and gets an event.
    assert roundtrip(sock_dir, "still-serving") is not None
    # and the kernel kept the hoarder to its queue limit (it allows one more than it)
    with open("/proc/sys/net/unix/max_dgram_qlen", encoding="ascii") as handle:
        limit = int(handle.read())
    stalled.setblocking(False)
    waiting = 0
    while waiting <= limit + 1:
        try:
            stalled.recv(70000)
        except BlockingIOError:
            break
        waiting += 1
    assert waiting <= limit + 1
    stalled.close()


def test_a_client_takes_datagrams_only_from_its_manor(procs: list[Proc], short_dir: str
                                                      ) -> None:
    """A client's socket is not connected to the manor (see above), so the kernel no longer
    refuses other senders for it: the client drops what does not come from the manor."""
    sock_dir = os.path.join(short_dir, "s")
    start_bus(procs, "master", sock_dir)
    with MasterEvent(sock_dir) as victim:
        assert victim.connect_pub(5)
        assert victim._sock is not None and victim._lane is not None
        yard = victim._lane.yard_name
        forged = page("manor", {"route": {"src": [None, "manor", None],
                                          "dst": [None, yard, "event"]},
                                "events": [["forged", {"evil": 1}]]}, dn=yard)
        mallory = raw_yard(sock_dir, lane_name_for("master", None), "evmallory")
        unbound = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        for sender in (mallory, unbound):
            sender.sendto(forged, victim._sock.path)
            sender.close()
        assert (roundtrip(sock_dir, "after") or {}).get("ok") == "after"
        got = victim.get_event(wait=5, tag="", full=True)
        assert got is not None and got["tag"] == "after"
        assert victim._sock.stats["foreign_source"] == 2


def test_other_user_cannot_reach_the_bus(procs: list[Proc], short_dir: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to a second uid")
    sock_dir = os.path.join(short_dir, "s")
    manor = start_bus(procs, "master", sock_dir)
    assert oct(os.stat(sock_dir).st_mode & 0o777) == "0o700"
    assert oct(os.stat(manor).st_mode & 0o777) == "0o600"
    pid = os.fork()
    if pid == 0:  # child: become nobody and try every way in
        code = 1
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.sendto(page("evx", {}), manor)
            except PermissionError:
                event = SaltEvent("master", sock_dir)
                if not event.fire_event({"a": 1}, "intruder") and not event.connect_pub(0.5):
                    code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert roundtrip(sock_dir, "owner-ok") is not None
