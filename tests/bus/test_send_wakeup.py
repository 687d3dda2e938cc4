"""A manor's socket learns from the kernel when a full yard has room again: it sends the
waiting pages then, not when its back-off timer happens to fire."""

from __future__ import annotations

import os
import select
import socket

from raetsalt.drivers.uxd import MAX_SEND_WAITERS, UxdSocket
from raetsalt.lane.engine import Lane

LANE = "ln"


def _qlen() -> int:
    with open("/proc/sys/net/unix/max_dgram_qlen") as f:
        return int(f.read())


def client(short_dir: str, name: str) -> socket.socket:
    """A yard that never reads unless told to (unconnected, as the lane's clients are)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(short_dir, f"{LANE}.{name}.uxd"))
    sock.setblocking(False)
    return sock


def manor(short_dir: str) -> tuple[Lane, UxdSocket]:
    # A long timer: anything sent before it is due was released by the kernel's word.
    lane = Lane(lane_name=LANE, yard_name="manor", retry_delay=60.0, max_retry_delay=60.0)
    return lane, UxdSocket(os.path.join(short_dir, f"{LANE}.manor.uxd"))


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def drain(sock: socket.socket) -> int:
    got = 0
    while True:
        try:
            sock.recv(70000)
        except BlockingIOError:
            return got
        got += 1


def test_a_full_yard_gets_its_pages_as_soon_as_it_reads(short_dir: str) -> None:
    yard = client(short_dir, "slow")
    lane, uxd = manor(short_dir)
    try:
        lane.add_yard("slow", yard.getsockname())
        count = _qlen() + 25
        for n in range(count):
            assert lane.send({"n": n}, "slow")
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        assert lane.stats["tx_blocked"] == 1
        wait_fd = uxd.wait_fileno()
        assert wait_fd is not None
        assert not readable(wait_fd)  # the yard's queue is still full
        assert uxd.release_writable(lane, 0.0) == 0
        got = drain(yard)
        assert 0 < got < count
        assert readable(wait_fd)  # the kernel says the yard has room
        assert uxd.release_writable(lane, 0.001) == 1
        assert lane.stats["tx_unblocked"] == 1
        # Long before the 60 s back-off, the rest goes, in order.
        while got < count:
            uxd.send_all(lane.datagrams_to_send(0.001), lane, 0.001)
            got += drain(yard)
            uxd.release_writable(lane, 0.001)
        assert got == count
        assert not readable(wait_fd)
    finally:
        uxd.close()
        yard.close()


def test_a_yard_that_never_reads_costs_one_probe_and_the_probes_are_bounded(
    short_dir: str,
) -> None:
    lane, uxd = manor(short_dir)
    yards = [client(short_dir, f"y{i}") for i in range(MAX_SEND_WAITERS + 3)]
    try:
        for i, yard in enumerate(yards):
            lane.add_yard(f"y{i}", yard.getsockname())
            for n in range(_qlen() + 2):
                lane.send({"n": n}, f"y{i}")
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        assert lane.stats["tx_blocked"] == len(yards)
        assert uxd.stats["send_waiters_full"] == 3
        # Retries while nobody reads open no second probe per yard.
        open_fds = len(os.listdir("/proc/self/fd"))
        lane.handle_timer(120.0)
        uxd.send_all(lane.datagrams_to_send(120.0), lane, 120.0)
        assert lane.stats["tx_blocked"] == 2 * len(yards)
        assert uxd.stats["send_waiters_full"] == 6
        assert len(os.listdir("/proc/self/fd")) == open_fds
        assert uxd.release_writable(lane, 120.0) == 0
    finally:
        uxd.close()
        for yard in yards:
            yard.close()


def test_a_full_yard_that_goes_away_is_reaped(short_dir: str) -> None:
    yard = client(short_dir, "gone")
    lane, uxd = manor(short_dir)
    try:
        path = yard.getsockname()
        lane.add_yard("gone", path)
        for n in range(_qlen() + 5):
            lane.send({"n": n}, "gone")
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        yard.close()
        os.unlink(path)
        # Its probe wakes (the receiver is gone); the retry finds nobody and reaps it.
        assert uxd.release_writable(lane, 0.0) == 1
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        assert lane.stats["yard_reaped"] == 1 and not lane.has_yard("gone")
        assert uxd.release_writable(lane, 0.0) == 0
    finally:
        uxd.close()


def fill(sock: socket.socket, path: str) -> None:
    while True:
        try:
            sock.sendto(b"f", path)
        except BlockingIOError:
            return


def test_a_client_waiting_for_room_follows_a_manor_started_again(short_dir: str) -> None:
    import threading

    from helpers.waiting import wait_for

    path = os.path.join(short_dir, f"{LANE}.manor.uxd")
    old = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    old.bind(path)
    me = UxdSocket(os.path.join(short_dir, f"{LANE}.me.uxd"), connect_to=path)
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)
    new = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        fill(me.sock, path)
        old.close()  # the manor stops; another one starts at the same path, as full
        os.unlink(path)
        new.bind(path)
        new.setblocking(False)
        fill(filler, path)
        sent: list[bool] = []
        waiter = threading.Thread(target=lambda: sent.append(me.send_waiting(b"late", 60)))
        waiter.start()
        # Its sending socket was still connected to the old one (refused): it connects again
        # and then waits on the new one.
        assert wait_for(lambda: me.stats["reconnects"] >= 1, 30)
        assert not sent
        got = []
        while not sent:
            try:
                got.append(new.recv(100))
            except BlockingIOError:
                waiter.join(0.05)  # until the waiter has sent
        waiter.join(30)
        assert sent == [True]
        got.extend(iter_drain(new))
        assert got[-1] == b"late"
    finally:
        me.close()
        filler.close()
        new.close()


def iter_drain(sock: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(sock.recv(100))
        except BlockingIOError:
            return out


def test_a_manor_sends_from_a_socket_only_its_user_may_reach(short_dir: str) -> None:
    """The outbound socket: mode 0600 whatever the group, refusing datagrams, removed
    with the manor; a client takes its pages as the manor's."""
    from raetsalt.paths import sending_path

    path = os.path.join(short_dir, f"{LANE}.manor.uxd")
    uxd = UxdSocket(path, group=os.getgid(), replace_stale=True, manor=True)
    out = sending_path(path)
    try:
        assert out == os.path.join(short_dir, f"{LANE}.manor.tx.uxd") == uxd.out_path
        assert os.stat(path).st_mode & 0o777 == 0o660
        assert os.stat(out).st_mode & 0o777 == 0o600
        other = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            other.sendto(b"x", out)
        except OSError:
            pass
        else:
            raise AssertionError("the outbound socket took a datagram")
        finally:
            other.close()
        lane = Lane(lane_name=LANE, yard_name="manor")
        me = UxdSocket(os.path.join(short_dir, f"{LANE}.cl1.uxd"), connect_to=path)
        try:
            lane.add_yard("cl1", me.path)
            assert lane.send({"hello": 1}, "cl1")
            uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
            client_lane = Lane(lane_name=LANE, yard_name="cl1", accept=False)
            client_lane.add_yard("manor", path)
            assert me.receive_into(client_lane, 0.0) == 1
            assert me.stats["foreign_source"] == 0
            event = client_lane.next_event()
            assert event is not None and getattr(event, "body", None) == {"hello": 1}
        finally:
            me.close()
    finally:
        uxd.close()
    assert not os.path.exists(out) and not os.path.exists(path)


def test_a_client_sends_from_a_connected_socket_the_manor_takes_as_its_yard(
    short_dir: str,
) -> None:
    """A client writes to its manor from ``<lane>.<yard>.tx.uxd``, connected to the manor
    (no path to look up per send) and shut for reading; the manor hands its pages up as
    the yard's, so the lane knows the yard by the path it answers to."""
    from raetsalt.lane.engine import YardMessage
    from raetsalt.paths import sending_path

    path = os.path.join(short_dir, f"{LANE}.manor.uxd")
    uxd = UxdSocket(path, replace_stale=True, manor=True)
    me = UxdSocket(os.path.join(short_dir, f"{LANE}.cl2.uxd"), connect_to=path)
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    tx = sending_path(me.path)
    try:
        assert tx == os.path.join(short_dir, f"{LANE}.cl2.tx.uxd") == me.out_path
        assert os.stat(tx).st_mode & 0o777 == 0o600
        try:
            raw.sendto(b"x", tx)
        except OSError:
            pass
        else:
            raise AssertionError("the client's sending socket took a datagram")
        client_lane = Lane(lane_name=LANE, yard_name="cl2", accept=False)
        client_lane.add_yard("manor", path)
        (page,) = client_lane.pack({"hi": 2}, "manor")
        assert me.send_waiting(page, 5)
        # What the kernel reports as the source is the sending socket's path ...
        peek, source = uxd.sock.recvfrom(70000, socket.MSG_PEEK)
        assert source == tx and peek == page
        # ... and the manor's socket hands the page up as the yard's.
        lane = Lane(lane_name=LANE, yard_name="manor")
        assert uxd.receive_into(lane, 0.0) == 1
        event = lane.next_event()
        assert isinstance(event, YardMessage)
        assert (event.source, event.source_path, event.body) == ("cl2", me.path, {"hi": 2})
        # So its answer goes to the yard's own socket.
        assert lane.send({"back": 3}, "cl2")
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        assert me.receive_into(client_lane, 0.0) == 1
        answer = client_lane.next_event()
        assert isinstance(answer, YardMessage) and answer.body == {"back": 3}
    finally:
        raw.close()
        me.close()
        uxd.close()
    assert not os.path.exists(tx) and not os.path.exists(me.path)


def test_a_sending_socket_without_its_yard_socket_gets_no_answer(short_dir: str) -> None:
    """A datagram from a ``….tx.uxd`` socket is taken as its yard's, in the same
    directory: a sender with no yard socket beside it is answered nowhere."""
    from raetsalt.lane.engine import YardMessage

    path = os.path.join(short_dir, f"{LANE}.manor.uxd")
    uxd = UxdSocket(path, replace_stale=True, manor=True)
    lone = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    lone.bind(os.path.join(short_dir, f"{LANE}.cl3.tx.uxd"))
    try:
        client_lane = Lane(lane_name=LANE, yard_name="cl3", accept=False)
        client_lane.add_yard("manor", path)
        (page,) = client_lane.pack({"hi": 3}, "manor")
        lone.sendto(page, path)
        lane = Lane(lane_name=LANE, yard_name="manor")
        assert uxd.receive_into(lane, 0.0) == 1
        event = lane.next_event()
        assert isinstance(event, YardMessage)
        assert event.source_path == os.path.join(short_dir, f"{LANE}.cl3.uxd")
        assert lane.send({"back": 3}, "cl3")
        uxd.send_all(lane.datagrams_to_send(0.0), lane, 0.0)
        assert lane.stats["yard_reaped"] == 1 and "cl3" not in lane.yard_names()
    finally:
        lone.close()
        uxd.close()
