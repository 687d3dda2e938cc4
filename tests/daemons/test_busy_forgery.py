"""Forged ``BUSY`` answers against real daemons, from an attacker who can inject but not
drop: it sees every datagram on the host (a raw socket) and, for each join request or
allow hello a minion sends its master, injects a ``BUSY`` mirroring it, with the
master's address as its source (an IP header of its own) and a 10 s hint, ahead of the
master's answer.  The minion must still connect, at first contact and when it knows its
master.  Needs root (raw sockets)."""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from helpers.wire import forged_busy

from raetsalt.wire.enums import PacketKind, TransactionKind
from raetsalt.wire.packet import parse_packet_untrusted

from .helpers import World, make_world, ping

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="raw sockets need root"),
]

HANDSHAKES = {(TransactionKind.JOIN, PacketKind.REQUEST), (TransactionKind.ALLOW, PacketKind.HELLO)}


@pytest.fixture
def world() -> Iterator[World]:
    with make_world() as w:
        yield w


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _spoofed(payload: bytes, source: tuple[str, int], target: tuple[str, int]) -> bytes:
    """An IPv4 datagram carrying ``payload`` in UDP from ``source`` to ``target``."""
    udp = struct.pack("!HHHH", source[1], target[1], 8 + len(payload), 0) + payload
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64,
                         socket.IPPROTO_UDP, 0, socket.inet_aton(source[0]),
                         socket.inet_aton(target[0]))
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return header + udp


class Injector(threading.Thread):
    def __init__(self, master: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.master = master
        self.sniff = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.send = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.forged = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if not select.select([self.sniff], [], [], 0.05)[0]:
                continue
            packet = self.sniff.recv(65536)
            length = (packet[0] & 0x0F) * 4
            sport, port = struct.unpack("!HH", packet[length:length + 4])
            source = (socket.inet_ntoa(packet[12:16]), sport)
            if port != self.master[1]:
                continue
            try:
                header = parse_packet_untrusted(packet[length + 8:]).header
            except Exception:  # noqa: BLE001 - native frames and the like
                continue
            if (header.transaction_kind, header.packet_kind) not in HANDSHAKES:
                continue
            self.send.sendto(_spoofed(forged_busy(header), self.master, source), (source[0], 0))
            self.forged += 1

    def close(self) -> None:
        self.stop.set()
        self.join(5)
        self.sniff.close()
        self.send.close()


def test_an_inject_only_attacker_cannot_keep_a_minion_out(world: World) -> None:
    master = world.start("master", world.master_dir("auto_accept: true\n"))
    master.expect("serving on")
    injector = Injector(("127.0.0.1", world.port))
    injector.start()
    try:
        minion = world.start("minion", world.minion_dir("m1", "minion1"))  # first contact
        minion.expect("connected to the master themaster", timeout=60)
        assert ping(world)
        first = injector.forged
        assert first >= 1
        minion.terminate()
        minion = world.start("minion", world.minion_dir("m1", "minion1"))  # it knows it now
        minion.expect("connected to the master themaster", timeout=30)
        assert ping(world)
        assert injector.forged > first
    finally:
        injector.close()
