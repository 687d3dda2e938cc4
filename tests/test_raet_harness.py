"""Self-tests of the raet 0.6.8 peer harness (tests/raetpeer.py + tests/raetpeer_client.py).

Two real raet peers talk to each other; nothing of raetsalt is involved. If these
fail, the interop tests built on the harness cannot be trusted.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from raetpeer_client import RaetPeer

pytestmark = pytest.mark.interop

Start = Callable[..., RaetPeer]


def _body(size: int, tag: str) -> dict[str, object]:
    """A JSON object whose compact encoding is exactly `size` bytes."""
    base = {"tag": tag, "fill": ""}
    overhead = len(json.dumps(base, separators=(",", ":")))
    # a non-trivial pattern, so a misplaced segment would change the content
    fill = "".join(chr(0x30 + (i * 7) % 75) for i in range(size - overhead))
    fill = fill.replace("\\", "#").replace('"', "$")
    body = {"tag": tag, "fill": fill}
    assert len(json.dumps(body, separators=(",", ":"))) == size
    return body


def _join_and_allow(raet_peer: Start) -> tuple[RaetPeer, RaetPeer]:
    main = raet_peer("main", main=True, auto="once")
    minion = raet_peer("minion", auto="once")
    minion.join(main.ha)
    minion.wait_for("joined", remote="main")
    main.wait_for("joined", remote="minion")
    minion.allow("main")
    minion.wait_for("allowed", remote="main")
    main.wait_for("allowed", remote="minion")
    return main, minion


def test_join_allow_and_messages_both_ways(raet_peer: Start) -> None:
    main, minion = _join_and_allow(raet_peer)

    # Keys announced in the ready events are the ones the other side accepted.
    stats = main.stats()
    (remote,) = stats["remotes"]
    assert remote["name"] == "minion" and remote["acceptance"] == "accepted"
    role_file = main.keep / "role" / "remote" / "role.minion.json"
    role = json.loads(role_file.read_text())
    assert role["verhex"] == minion.verhex and role["pubhex"] == minion.pubhex

    small, large = _body(100, "small"), _body(64 * 1024, "large")
    for sender, receiver, src, dst in ((minion, main, "minion", "main"),
                                       (main, minion, "main", "minion")):
        sender.send(dst, small)
        sender.send(dst, large)
        got = sorted((m["body"] for m in receiver.wait_messages(2, remote=src)),
                     key=lambda b: len(b["fill"]))
        assert got == [small, large]
        sender.wait_idle()

    # a 64 KiB JSON body cannot fit one 1024-byte datagram: it really was segmented
    assert minion.stats()["stats"].get("message_segment_tx", 0) > 70
    assert not main.errors() and not minion.errors()


def test_echo_and_counted_send(raet_peer: Start) -> None:
    main = raet_peer("main", main=True, auto="always", echo=True)
    minion = raet_peer("minion", auto="always")
    minion.join(main.ha)
    minion.wait_for("joined", remote="main")
    minion.allow("main")
    minion.wait_for("allowed", remote="main")
    main.wait_for("allowed", remote="minion")

    minion.send("main", {"cmd": "ping"}, count=20, window=4, seq="n", ident="burst")
    minion.wait_for("send_done", id="burst")
    echoed = minion.wait_messages(20, remote="main")
    assert sorted(m["body"]["n"] for m in echoed) == list(range(20))
    assert all(m["body"]["cmd"] == "ping" for m in echoed)


def test_pending_until_operator_accepts(raet_peer: Start) -> None:
    main = raet_peer("main", main=True, auto="never", manage_every=0)
    minion = raet_peer("minion", auto="once", manage_every=0)
    minion.join(main.ha)

    pending = main.wait_for("pending", remote="minion")
    assert pending["role"] == "minion"
    # the vacuous remote still has its provisional name: match on the address
    minion.wait_for("join_pended", ha=list(main.ha))
    role_file = main.keep / "role" / "remote" / "role.minion.json"
    assert json.loads(role_file.read_text())["acceptance"] == 0
    assert not any(e["event"] == "joined" for e in main.events + minion.events)

    main.accept("minion")
    # the pended joinent re-reads the keep on its redo timer (<= 2 s) and then responds
    main.wait_for("joined", remote="minion", timeout=6)
    minion.wait_for("joined", remote="main", timeout=6)
    assert json.loads(role_file.read_text())["acceptance"] == 1


def test_peer_survives_garbage_and_bad_commands(raet_peer: Start) -> None:
    import socket

    main = raet_peer("main", main=True, auto="once")
    # A head line without a space makes raet's parser raise out of serviceAll (Q1).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"ri RAET\npl 0014\nhl 14\nbogus\n\n", main.ha)
    err = main.wait_for("error", where="serviceAllRx")
    assert err["type"] in {"ValueError", "KeyError", "PacketError"}
    main.command("nonsense")
    assert main.wait_for("error", where="cmd")["type"] == "ValueError"
    # still alive and serving
    assert main.stats()["errors"] == 2


def test_peer_exits_on_sigterm_and_on_eof(raet_peer: Start) -> None:
    import signal

    one = raet_peer("one")
    assert one.proc is not None
    one.proc.send_signal(signal.SIGTERM)
    assert one.wait_for("bye")["reason"] == "SIGTERM"
    assert one.proc.wait(timeout=5) == 0

    two = raet_peer("two")
    assert two.proc is not None and two.proc.stdin is not None
    two.proc.stdin.close()
    assert two.wait_for("bye")["reason"] == "eof"
    assert two.proc.wait(timeout=5) == 0
