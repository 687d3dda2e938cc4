#!/usr/bin/env python
"""Run one real raet 0.6.8 RoadStack in this process, driven by JSON lines.

A test/benchmark helper, not part of raetsalt. Run it with the project venv's
python: ``python tests/raetpeer.py --name minion --ha 127.0.0.1:0 --keep DIR``.

stdout carries exactly one JSON object per line (events, flushed per line);
anything else that would be written to stdout (raet's ioflo console, stray
prints) is redirected to stderr so it cannot corrupt the event stream.
stdin carries one JSON command per line. The process exits on stdin EOF,
on {"cmd": "quit"}, on SIGTERM and on SIGINT, and prints {"event": "bye"} first.

Events (``"event"`` key):
  ready       {ha: [host, port], name, role, main, verhex, pubhex, pid, keep}
  joining     {remote, uid, ha}            reply to a join command
  allowing    {remote, uid}                reply to an allow command
  alive_probe {remote, uid}                reply to an alive command
  queued      {remote, count, allowed, id} reply to a send command
  send_done   {remote, count, id, elapsed} all messages of a send command finished
                                           (handed to raet and no Messenger left)
  joined / unjoined, allowed / disallowed, alive / dead   {remote}   state changes
  pending / accepted / rejected   {remote, role}   acceptance of a remote changed
  join_pended {remote, ha} our join was answered with pend (joiner side). Until the
                           join response arrives a vacuous remote has a provisional
                           name (estate_<uuid>); it is renamed before "joined".
  removed     {remote}     remote disappeared from the stack (e.g. rejected)
  message     {remote, body}   (or {remote, size, sha256} with --msg-events digest;
                                nothing per message with --msg-events none)
  role        {role, acceptance}      reply to accept / reject / pend commands
  stats       {stats, remotes: [...], transactions, rx_messages, tx_messages, errors}
  idle        {id}     reply to wait_idle, once nothing is queued or in flight
  error       {where, type, msg, trace}   an exception (raet's service loop, a bad
                                          command); the loop continues
  bye         {reason}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections import deque
from typing import Any

# The shim must be imported before raet/ioflo; it sits next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import raet_shim  # noqa: E402

ACCEPTANCE_NAMES = {None: None, 0: "pending", 1: "accepted", 2: "rejected"}
AUTO_MODES = {"never": 0, "once": 1, "always": 2}


def parse_ha(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1", int(port))


class EventOut:
    """Line-oriented JSON writer on a private duplicate of the original stdout."""

    def __init__(self) -> None:
        # Keep our own handle on fd 1, then point fd 1 (and sys.stdout) at stderr:
        # ioflo's console and any print() inside raet must never reach the event pipe.
        self._fp = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, **fields}
        self._fp.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
        self._fp.flush()


class SendBatch:
    """Messages of one send command still to be handed to raet (window-limited)."""

    def __init__(self, uid: int, name: str, bodies: deque, count: int, window: int,
                 ident: Any, started: float) -> None:
        self.uid = uid
        self.name = name
        self.bodies = bodies
        self.count = count
        self.window = window
        self.ident = ident
        self.started = started


class Peer:
    """One RoadStack plus the command/event plumbing around it."""

    def __init__(self, args: argparse.Namespace, out: EventOut) -> None:
        self.args = args
        self.out = out
        raet = raet_shim.load()
        raet_shim.mute_console(args.verbosity)
        from ioflo.base.storing import Store
        from raet.road import estating, stacking, transacting

        self.estating = estating
        self.transacting = transacting
        stacking.RoadStack.JoinentTimeout = args.joinent_timeout
        stacking.RoadStack.JoinerTimeout = args.joiner_timeout
        stacking.RoadStack.BurstSize = args.burst
        self.store = Store(stamp=time.monotonic())
        kwargs: dict[str, Any] = dict(
            store=self.store,
            name=args.name,
            main=args.main,
            auto=AUTO_MODES[args.auto],
            mutable=args.mutable,
            ha=parse_ha(args.ha),
            dirpath=args.keep,
            period=args.period,
            offset=args.offset,
        )
        if args.role:
            kwargs["role"] = args.role
        if args.kind is not None:
            kwargs["kind"] = args.kind
        if args.sighex:
            kwargs["sigkey"] = args.sighex
        if args.prihex:
            kwargs["prikey"] = args.prihex
        self.stack = stacking.RoadStack(**kwargs)
        if args.head_kind == "json":
            self.stack.Hk = raet.raeting.HeadKind.json.value
        self.messenger_cls = transacting.Messenger
        self.states: dict[int, tuple[Any, ...]] = {}
        self.names: dict[int, str] = {}
        self.pended_joins: set[int] = set()
        self.batches: deque[SendBatch] = deque()
        self.idle_waiters: list[Any] = []
        self.rx_messages = 0
        self.tx_messages = 0
        self.errors = 0
        self.next_manage = self.store.stamp + args.manage_every if args.manage_every > 0 else None
        self.running = True
        self.bye_reason = "eof"

    # ----------------------------------------------------------------- helpers
    def ready(self) -> None:
        local = self.stack.local
        self.out.emit(
            "ready",
            ha=list(self.stack.ha),
            name=self.stack.name,
            role=local.role,
            main=bool(self.stack.main),
            verhex=local.signer.verhex.decode("ascii"),
            pubhex=local.priver.pubhex.decode("ascii"),
            pid=os.getpid(),
            keep=self.stack.keep.dirpath,
        )

    def error(self, where: str, exc: BaseException) -> None:
        self.errors += 1
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        self.out.emit("error", where=where, type=type(exc).__name__, msg=str(exc),
                      trace="".join(tb[-3:]))

    def find_remote(self, name: str | None) -> Any:
        if name is None:
            remotes = list(self.stack.remotes.values())
            if not remotes:
                raise LookupError("no remotes")
            return remotes[0]
        remote = self.stack.nameRemotes.get(name)
        if remote is None:
            raise LookupError(f"unknown remote {name!r}")
        return remote

    # ---------------------------------------------------------------- commands
    def command(self, line: str) -> None:
        try:
            cmd = json.loads(line)
            if not isinstance(cmd, dict) or not isinstance(cmd.get("cmd"), str):
                raise ValueError("command must be an object with a 'cmd' string")
            handler = getattr(self, "cmd_" + cmd["cmd"], None)
            if handler is None:
                raise ValueError(f"unknown cmd {cmd['cmd']!r}")
            handler(cmd)
        except Exception as exc:  # a bad command must not stop the peer
            self.error("cmd", exc)

    def cmd_join(self, cmd: dict) -> None:
        timeout = cmd.get("timeout", self.args.join_timeout)
        if "ha" in cmd:
            ha = (str(cmd["ha"][0]), int(cmd["ha"][1]))
            remote = next((r for r in self.stack.remotes.values()
                           if tuple(r.ha) == ha), None)
            if remote is None:
                # A first contact is a vacuous remote: fuid 0, sid 0 (as a salt minion does).
                remote = self.estating.RemoteEstate(stack=self.stack, fuid=0, sid=0, ha=ha)
                self.stack.addRemote(remote)
        else:
            remote = self.find_remote(cmd.get("remote"))
        self.stack.join(uid=remote.uid, timeout=timeout, cascade=bool(cmd.get("cascade")))
        self.out.emit("joining", remote=remote.name, uid=remote.uid, ha=list(remote.ha))

    def cmd_allow(self, cmd: dict) -> None:
        remote = self.find_remote(cmd.get("remote"))
        self.stack.allow(uid=remote.uid, cascade=bool(cmd.get("cascade")))
        self.out.emit("allowing", remote=remote.name, uid=remote.uid)

    def cmd_alive(self, cmd: dict) -> None:
        remote = self.find_remote(cmd.get("remote"))
        self.stack.alive(uid=remote.uid, cascade=bool(cmd.get("cascade")))
        self.out.emit("alive_probe", remote=remote.name, uid=remote.uid)

    def cmd_send(self, cmd: dict) -> None:
        remote = self.find_remote(cmd.get("remote"))
        body = cmd.get("body", {})
        if not isinstance(body, dict):
            raise ValueError("body must be an object")
        count = int(cmd.get("count", 1))
        seq_key = cmd.get("seq")
        bodies: deque = deque()
        for i in range(count):
            if seq_key:
                copy = dict(body)
                copy[seq_key] = i
                bodies.append(copy)
            else:
                bodies.append(body)
        window = int(cmd.get("window", 0))
        batch = SendBatch(remote.uid, remote.name, bodies, count, window, cmd.get("id"),
                          time.monotonic())
        self.batches.append(batch)
        self.feed_batches()
        self.out.emit("queued", remote=remote.name, count=count,
                      allowed=bool(remote.allowed), id=batch.ident)

    def _set_role(self, cmd: dict, acceptance: int) -> None:
        role = str(cmd["role"])
        keep = self.stack.keep
        # Operator action on the keep file, as salt-key did: the pending joinent
        # re-reads the role file on its next redo tick.
        data = keep.loadRemoteRoleData(role)
        data["acceptance"] = acceptance
        keep.dumpRemoteRoleData(data, role)
        for remote in self.stack.remotes.values():
            if remote.role == role:
                remote.acceptance = acceptance
        self.out.emit("role", role=role, acceptance=ACCEPTANCE_NAMES[acceptance])

    def cmd_accept(self, cmd: dict) -> None:
        self._set_role(cmd, 1)

    def cmd_reject(self, cmd: dict) -> None:
        self._set_role(cmd, 2)

    def cmd_pend(self, cmd: dict) -> None:
        self._set_role(cmd, 0)

    def cmd_stats(self, cmd: dict) -> None:
        remotes = []
        for remote in self.stack.remotes.values():
            remotes.append(dict(
                name=remote.name, uid=remote.uid, fuid=remote.fuid, ha=list(remote.ha),
                role=remote.role, sid=remote.sid, rsid=remote.rsid,
                joined=remote.joined, allowed=remote.allowed, alived=remote.alived,
                acceptance=ACCEPTANCE_NAMES.get(remote.acceptance, remote.acceptance),
                transactions=len(remote.transactions),
            ))
        self.out.emit("stats", stats=dict(self.stack.stats), remotes=remotes,
                      transactions=len(self.stack.transactions),
                      rx_messages=self.rx_messages, tx_messages=self.tx_messages,
                      errors=self.errors, id=cmd.get("id"))

    def cmd_wait_idle(self, cmd: dict) -> None:
        self.idle_waiters.append(cmd.get("id"))

    def cmd_quit(self, cmd: dict) -> None:
        self.running = False
        self.bye_reason = "quit"

    # ------------------------------------------------------------------- loop
    def outstanding(self, uid: int) -> int:
        remote = self.stack.remotes.get(uid)
        if remote is None:
            return 0
        return sum(1 for t in remote.transactions.values() if isinstance(t, self.messenger_cls))

    def feed_batches(self) -> None:
        """Hand queued bodies to raet, keeping at most `window` Messengers in flight."""
        now = time.monotonic()
        for batch in list(self.batches):
            if batch.bodies:
                if batch.window > 0:
                    room = batch.window - self.outstanding(batch.uid) - sum(
                        1 for _, uid, _ in self.stack.txMsgs if uid == batch.uid)
                else:
                    room = len(batch.bodies)
                while room > 0 and batch.bodies:
                    self.stack.transmit(batch.bodies.popleft(), uid=batch.uid)
                    self.tx_messages += 1
                    room -= 1
            elif (self.outstanding(batch.uid) == 0
                  and not any(uid == batch.uid for _, uid, _ in self.stack.txMsgs)):
                self.batches.remove(batch)
                self.out.emit("send_done", remote=batch.name, count=batch.count,
                              id=batch.ident, elapsed=now - batch.started)

    def deliver(self) -> None:
        rx = self.stack.rxMsgs
        while rx:
            body, name = rx.popleft()
            self.rx_messages += 1
            mode = self.args.msg_events
            if mode == "full":
                self.out.emit("message", remote=name, body=body)
            elif mode == "digest":
                packed = json.dumps(body, separators=(",", ":")).encode("utf-8")
                self.out.emit("message", remote=name, size=len(packed),
                              sha256=hashlib.sha256(packed).hexdigest())
            if self.args.echo:
                remote = self.stack.nameRemotes.get(name)
                if remote is not None:
                    self.stack.transmit(body, uid=remote.uid)
                    self.tx_messages += 1

    def watch(self) -> None:
        """Emit events for state changes of remotes (polled; raet has no callbacks)."""
        seen = set()
        for uid, remote in self.stack.remotes.items():
            seen.add(uid)
            self.names[uid] = remote.name
            new = (remote.name, remote.joined, remote.allowed, remote.alived,
                   remote.acceptance)
            old = self.states.get(uid, (remote.name, None, None, None, None))
            if new != old:
                self.states[uid] = new
                name = remote.name
                if new[4] != old[4] and new[4] is not None:
                    self.out.emit(ACCEPTANCE_NAMES.get(new[4], str(new[4])), remote=name,
                                  role=remote.role)
                if bool(new[1]) != bool(old[1]) and (new[1] or old[1] is not None):
                    self.out.emit("joined" if new[1] else "unjoined", remote=name)
                if bool(new[2]) != bool(old[2]) and (new[2] or old[2] is not None):
                    self.out.emit("allowed" if new[2] else "disallowed", remote=name)
                if bool(new[3]) != bool(old[3]) and (new[3] or old[3] is not None):
                    self.out.emit("alive" if new[3] else "dead", remote=name)
            for transaction in remote.transactions.values():
                if (getattr(transaction, "pended", False)
                        and isinstance(transaction, self.transacting.Joiner)
                        and id(transaction) not in self.pended_joins):
                    self.pended_joins.add(id(transaction))
                    self.out.emit("join_pended", remote=remote.name, ha=list(remote.ha))
        for uid in list(self.states):
            if uid not in seen:
                del self.states[uid]
                self.out.emit("removed", remote=self.names.pop(uid, str(uid)))

    def check_idle(self) -> None:
        if not self.idle_waiters:
            return
        if (self.batches or self.stack.txMsgs or self.stack.txes
                or any(isinstance(t, (self.messenger_cls, self.transacting.Messengent))
                       for t in self.stack.transactions)):
            return
        for ident in self.idle_waiters:
            self.out.emit("idle", id=ident)
        self.idle_waiters.clear()

    def service(self) -> None:
        # Rx and tx halves are guarded separately: raet lets exceptions escape from
        # packet parsing/decryption (quirk Q1, docs/raet-wire.md §10); queued datagrams must
        # still go out in the same pass.
        try:
            self.stack.serviceAllRx()
        except Exception as exc:
            self.error("serviceAllRx", exc)
        try:
            self.stack.serviceAllTx()
        except Exception as exc:
            self.error("serviceAllTx", exc)

    def run(self) -> None:
        stdin_fd = sys.stdin.fileno()
        sock = self.stack.server.ss
        inbuf = b""
        stdin_open = True
        wait = self.args.idle_wait
        while self.running:
            self.store.changeStamp(time.monotonic())
            self.service()
            self.deliver()
            if self.next_manage is not None and self.store.stamp >= self.next_manage:
                self.next_manage = self.store.stamp + self.args.manage_every
                try:
                    self.stack.manage(cascade=True)
                except Exception as exc:
                    self.error("manage", exc)
            self.feed_batches()
            self.watch()
            self.check_idle()

            busy = bool(self.stack.txes or self.stack.txMsgs or self.stack.rxes)
            timeout = 0.0 if busy else wait
            readers = [sock, stdin_fd] if stdin_open else [sock]
            try:
                ready, _, _ = select.select(readers, [], [], timeout)
            except InterruptedError:
                continue
            if stdin_open and stdin_fd in ready:
                chunk = os.read(stdin_fd, 1 << 16)
                if not chunk:
                    stdin_open = False
                    self.running = False
                    self.bye_reason = "eof"
                inbuf += chunk
                while b"\n" in inbuf:
                    line, _, inbuf = inbuf.partition(b"\n")
                    if line.strip():
                        self.command(line.decode("utf-8", "replace"))
        self.store.changeStamp(time.monotonic())
        try:
            self.stack.serviceAllTx()
        except Exception as exc:
            self.error("serviceAllTx", exc)

    def close(self) -> None:
        try:
            self.stack.server.close()
        finally:
            self.out.emit("bye", reason=self.bye_reason)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="estate name (also the default role)")
    p.add_argument("--ha", default="127.0.0.1:0",
                   help="HOST:PORT to bind (port 0 = pick a free one; see the ready event)")
    p.add_argument("--keep", required=True,
                   help="raet keep directory (RoadKeep dirpath): local/, remote/, role/")
    p.add_argument("--main", action="store_true", help="main estate (accepts vacuous joins)")
    p.add_argument("--auto", choices=sorted(AUTO_MODES), default="never",
                   help="key auto-acceptance mode (raet default: never)")
    p.add_argument("--mutable", action="store_true", help="mutable road")
    p.add_argument("--role", default=None)
    p.add_argument("--kind", type=int, default=None)
    p.add_argument("--sighex", default=None, help="Ed25519 seed, 64 hex chars")
    p.add_argument("--prihex", default=None, help="Curve25519 secret key, 64 hex chars")
    p.add_argument("--echo", action="store_true", help="send each received message back")
    p.add_argument("--head-kind", choices=["raet", "json"], default="raet")
    p.add_argument("--burst", type=int, default=0, help="RoadStack.BurstSize (0 = unlimited)")
    p.add_argument("--period", type=float, default=3.0,
                   help="presence period in seconds (salt used 3.0)")
    p.add_argument("--offset", type=float, default=0.5)
    p.add_argument("--manage-every", type=float, default=10.0,
                   help="call stack.manage(cascade=True) every N s (salt: 10; 0 = never)")
    p.add_argument("--join-timeout", type=float, default=0.0,
                   help="default join command timeout (salt: 0 = retry forever)")
    p.add_argument("--joiner-timeout", type=float, default=5.0,
                   help="RoadStack.JoinerTimeout (raet default 5.0)")
    p.add_argument("--joinent-timeout", type=float, default=0.0,
                   help="RoadStack.JoinentTimeout (salt: 0 = never; raet default 5.0)")
    p.add_argument("--idle-wait", type=float, default=0.002,
                   help="max seconds to block in select() when nothing is queued "
                        "(socket/stdin readiness wakes it at once; 0 = pure spin)")
    p.add_argument("--msg-events", choices=["full", "digest", "none"], default="full")
    p.add_argument("--verbosity", type=int, default=0,
                   help="raet console verbosity (goes to stderr): 0 mute .. 4 profuse")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = EventOut()
    peer = Peer(args, out)

    def on_signal(signum: int, frame: Any) -> None:
        peer.running = False
        peer.bye_reason = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    peer.ready()
    try:
        peer.run()
    except BrokenPipeError:
        return 1
    finally:
        try:
            peer.close()
        except (BrokenPipeError, OSError):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
