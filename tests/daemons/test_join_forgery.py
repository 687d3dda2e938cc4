"""Forged join replies against real daemons: while the master is down, an attacker who
holds its port (so its datagrams come from the master's address, as spoofed ones would)
answers the minion's join requests with unsigned ``reject`` or ``renew`` packets that
mirror them.  The minion must neither exit nor be stranded: when the master is back,
test.ping works.  The test waits on datagrams and log lines, never on a fixed sleep."""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Iterator

import pytest

from raetsalt.wire.enums import Flag, PacketKind, TransactionKind
from raetsalt.wire.header import Header
from raetsalt.wire.packet import pack_packet, parse_packet_untrusted

from .helpers import World, make_world, ping
from .relay import DOWN, UP, Relay

pytestmark = pytest.mark.integration


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _hold_port(port: int) -> socket.socket:
    """Bind the master's port (retrying while the old socket is still being closed)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    deadline = time.monotonic() + 10.0
    while True:
        try:
            sock.bind(("127.0.0.1", port))
            return sock
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _next_join_request(sock: socket.socket) -> tuple[Header, tuple[str, int]]:
    sock.settimeout(30.0)
    while True:
        data, source = sock.recvfrom(65536)
        try:
            header = parse_packet_untrusted(data).header
        except Exception:  # noqa: BLE001 - native datagrams and the like: not a join
            continue
        if (header.transaction_kind == TransactionKind.JOIN
                and header.packet_kind == PacketKind.REQUEST):
            return header, source


@pytest.mark.parametrize("kind", [PacketKind.REJECT, PacketKind.RENEW])
def test_forged_join_replies_during_an_outage_neither_end_nor_strand_a_minion(
    world: World, kind: PacketKind
) -> None:
    """Here the minion's own join usually reaches the master first when it is back (its
    attempt is live then), which mends a renew's harm by itself: the report's order is
    the next test's."""
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion = world.start("minion", world.minion_dir("m1", "minion1"))
    minion.expect("connected to the master themaster", timeout=10)
    assert ping(world)
    master.terminate()
    minion.expect("lost the master", timeout=10)
    with _hold_port(world.port) as attacker:
        for _ in range(3):
            request, source = _next_join_request(attacker)
            forged = Header(
                packet_kind=kind, transaction_kind=TransactionKind.JOIN,
                source_uid=request.destination_uid, destination_uid=request.source_uid,
                transaction_id=request.transaction_id, flags=Flag.CF,
            )
            attacker.sendto(pack_packet(forged, b""), source)
        _next_join_request(attacker)  # still joining after three forgeries
    assert minion.popen.poll() is None
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion.expect("connected to the master themaster", timeout=60)
    assert ping(world)
    assert not [line for line in minion.drain() if "rejected the key" in line]
    assert minion.popen.poll() is None


def _raet_header(data: bytes) -> Header | None:
    try:
        return parse_packet_untrusted(data).header
    except Exception:  # noqa: BLE001 - native datagrams
        return None


class RenewForger:
    """The path of the report's renew attack (a ``Relay`` judge).  ``outage``: the
    master is down and the attacker, at its address, answers the minion's join requests
    with unsigned ``renew`` packets mirroring them (three).  ``back``: the master has
    restarted; its call-back reaches the minion, which has no session, and meets
    "unjoined", so the master joins the minion.  In the report the minion was waiting
    between two join attempts then; here the attempt under way when the master came back
    is withheld (its tids, until the master's join completed) so that order holds on
    every run.  The minion's next attempt, and everything else, passes."""

    def __init__(self) -> None:
        self.phase = "up"
        self.relay: Relay | None = None
        self.forged = 0
        self.stale: set[int] = set()
        self.master_joined = False
        self.dead_allows = 0
        """Allows the minion sent with no id at the master (de 0: the master drops them)."""

    def judge(self, direction: str, data: bytes) -> bool:
        header = _raet_header(data)
        if (direction == UP and header is not None and header.destination_uid == 0
                and header.transaction_kind == TransactionKind.ALLOW):
            self.dead_allows += 1
        if header is not None and header.transaction_kind != TransactionKind.JOIN:
            header = None
        request = (direction == UP and header is not None
                   and header.packet_kind == PacketKind.REQUEST)
        if self.phase == "outage":
            if request and header is not None:
                self.stale.add(header.transaction_id)
                if self.forged < 3 and self.relay is not None:
                    self.relay.reply(direction, pack_packet(Header(
                        packet_kind=PacketKind.RENEW, transaction_kind=TransactionKind.JOIN,
                        source_uid=header.destination_uid,
                        destination_uid=header.source_uid,
                        transaction_id=header.transaction_id, flags=Flag.CF), b""))
                    self.forged += 1
            return False  # nobody at the master's port
        if self.phase == "back":
            if (direction == DOWN and header is not None
                    and header.packet_kind == PacketKind.ACK):
                self.master_joined = True  # the master's join of the minion is done
            if request and header is not None and (
                    not self.master_joined or header.transaction_id in self.stale):
                self.stale.add(header.transaction_id)
                return False
        return True


def test_a_forged_renew_then_the_master_joining_first_does_not_strand_a_minion(
    world: World,
) -> None:
    """The report's sequence: an unsigned renew during an outage; the master comes back
    and joins the minion before the minion's own join reaches it.  Before the fix the
    minion was left joined with no id at the master (fuid 0): its allows went out with
    de 0 and were dropped, silently, every few seconds, for ever."""
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    path = RenewForger()
    with Relay(world.port, path.judge) as relay:
        path.relay = relay
        confdir = world.minion_dir("m1", "minion1")
        config = confdir / "minion"
        config.write_text(config.read_text().replace(f":{world.port}\n", f":{relay.port}\n"))
        minion = world.start("minion", confdir)
        minion.expect("connected to the master themaster", timeout=10)
        assert ping(world)
        with relay.changed:
            path.phase = "outage"
        master.terminate()
        relay.wait(lambda: path.forged >= 3)
        with relay.changed:
            path.phase = "back"
        master = world.start("master", world.master_dir("auto_accept: true\n"))
        master.expect("serving on")
        relay.wait(lambda: path.master_joined)
        minion.expect("connected to the master themaster", timeout=60)
        assert ping(world)
        assert path.dead_allows == 0
        assert minion.popen.poll() is None


def test_another_master_at_the_address_for_a_while_does_not_strand_a_minion(
    world: World,
) -> None:
    """No forgery: a master with fresh keys (a reinstalled host, a rogue) answers at the
    master's address for 15 s, then the real one comes back."""
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion = world.start("minion", world.minion_dir("m1", "minion1"))
    minion.expect("connected to the master themaster", timeout=10)
    assert ping(world)
    master.terminate()
    minion.expect("lost the master", timeout=10)
    rogue_dir = world.root / "rogue"
    rogue_dir.mkdir()
    (rogue_dir / "master").write_text(
        (world.root / "ma" / "master").read_text().replace(str(world.root / "ma"),
                                                           str(rogue_dir))
    )
    rogue = world.start("master", rogue_dir)
    rogue.expect("serving on")
    minion.expect("refusing the master", timeout=30)  # its key is not the master's
    time.sleep(15.0)  # the other master's stay (the attack's pacing, not a sync)
    rogue.terminate()
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    minion.expect("connected to the master themaster", timeout=60)
    assert ping(world)


def test_blind_joins_do_not_make_a_restarted_master_an_amplifier(world: World) -> None:
    """A victim address that sends auto-accepted joins and their acks blind (it never
    reads an answer) must not be called back at the master's restarts beyond three
    times what it sent."""
    from raetsalt.testing.forge import join_request

    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    victim = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    victim.bind(("127.0.0.1", 0))
    target = ("127.0.0.1", world.port)
    sent = 0
    with victim:
        for index in range(20):
            uid, tid = 100 + index, 1
            ack = Header(packet_kind=PacketKind.ACK, transaction_kind=TransactionKind.JOIN,
                         source_uid=uid, destination_uid=0, transaction_id=tid)
            for data in (join_request(f"ghost{index}", source_uid=uid, tid=tid),
                         pack_packet(ack, b"")):
                sent += victim.sendto(data, target)
            master.expect(f"ghost{index}", timeout=10)  # its key, accepted: the join went on
        received = 0
        for _ in range(2):
            master.terminate()
            master = world.start("master", world.master_dir("auto_accept: true\n"))
            master.expect("serving on")
            # The attacker's measuring window: a call's allow ends within 4 s.
            victim.settimeout(0.2)
            until = time.monotonic() + 6.0
            while time.monotonic() < until:
                try:
                    received += len(victim.recv(65536))
                except TimeoutError:
                    continue
    assert received <= 3 * sent
