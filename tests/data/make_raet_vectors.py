#!/usr/bin/env python
"""Generate tests/data/raet_vectors.json: golden datagrams produced by raet 0.6.8 itself.

Run with the project venv:  .venv/bin/python tests/data/make_raet_vectors.py [OUT]

How the vectors are made
------------------------
* Two (or three) real raet RoadStacks run in this process on 127.0.0.1 and talk
  over real UDP sockets. Every datagram a stack writes is recorded by wrapping its
  socket's ``send``. Nothing is re-encoded by this script: the hex in the file is
  exactly what raet put on the wire.
* Long-term keys are fixed: each seed is sha256 of a fixed string (recorded in the
  file). Ed25519 signatures are deterministic, so they are reproducible from them.
* Every random byte raet asks for (short-term key pairs, box nonces, the allow
  "oreo") goes through ``libnacl.randombytes``; this script replaces that function
  with a deterministic generator (sha512 of a fixed label and a counter) and logs
  each draw with the raet call chain that asked for it. Re-running the script
  therefore reproduces the same file (see the fqdn caveat below).
* raet's store time is a simulated clock advanced by 1 ms per service pass, so no
  redo timer fires and each exchange is the minimal packet sequence.
* Before writing, the script re-derives every box and every signature from the
  recorded keys, nonces and plaintexts (with libnacl, not raet) and checks that the
  bytes equal the captured datagram; a vector that cannot be re-derived is a bug
  here and aborts the run.

Caveat: the initiate packet's inner plaintext carries the responder's fqdn as raet
computed it (``socket.getfqdn("127.0.0.1")``); it is recorded in the file, but on a
machine with a different /etc/hosts a regenerated file differs in those packets.

This file is part of the tests tree; it reads raet for facts and never ships with
raetsalt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/, for raet_shim

import libnacl  # noqa: E402
import raet_shim  # noqa: E402  (must precede raet/ioflo)

RNG_LABEL = b"raetsalt-vectors:rng:v1:"
KEY_LABEL = "raetsalt-vectors:{name}:{kind}"
STEP = 0.001  # simulated seconds per service pass
PK_NAMES = {0: "message", 1: "ack", 2: "nack", 3: "resend", 4: "request", 5: "response",
            6: "hello", 7: "cookie", 8: "initiate", 9: "unjoined", 10: "unallowed",
            11: "renew", 12: "refuse", 13: "reject", 14: "pend", 15: "done"}
TK_NAMES = {0: "message", 1: "join", 2: "bind", 3: "allow", 4: "alive"}
HEX_KEYS = {"pl", "hl", "vn", "pk", "hk", "se", "de", "si", "ti", "tk", "oi", "sn", "sc",
            "ml", "bk", "ck", "fk", "fl"}
HEAD_DEFAULTS = {"pk": 0, "hk": 0, "se": 0, "de": 0, "si": 0, "ti": 0, "tk": 0, "sn": 0,
                 "sc": 1, "ml": 0, "bk": 0, "ck": 0, "fk": 0, "fl": 0, "fg": "00"}


# --------------------------------------------------------------------------- rng
class DeterministicRandom:
    """Stand-in for libnacl.randombytes that is reproducible and logs every draw."""

    def __init__(self) -> None:
        self.counter = 0
        self.draws: list[dict[str, Any]] = []
        self.scenario = ""

    def __call__(self, size: int) -> bytes:
        out = b""
        block = 0
        while len(out) < size:
            out += hashlib.sha512(RNG_LABEL + struct.pack(">QQ", self.counter, block)).digest()
            block += 1
        out = out[:size]
        chain = []
        frame = sys._getframe(1)
        while frame is not None and len(chain) < 6:
            code = frame.f_code
            if "/raet/" in code.co_filename:
                owner = frame.f_locals.get("self")
                prefix = type(owner).__name__ + "." if owner is not None else ""
                chain.append(prefix + code.co_name)
            frame = frame.f_back
        self.draws.append({"index": self.counter, "scenario": self.scenario, "size": size,
                           "hex": out.hex(), "caller": " <- ".join(chain)})
        self.counter += 1
        return out


RNG = DeterministicRandom()
libnacl.randombytes = RNG  # raet.nacling calls libnacl.randombytes at call time

raet = raet_shim.load()
raet_shim.mute_console(0)
from ioflo.base.storing import Store  # noqa: E402
from raet.road import estating, packeting, stacking  # noqa: E402


# -------------------------------------------------------------------------- keys
def fixed_keys(name: str) -> dict[str, str]:
    sig_src = KEY_LABEL.format(name=name, kind="sig")
    pri_src = KEY_LABEL.format(name=name, kind="pri")
    sighex = hashlib.sha256(sig_src.encode()).hexdigest()
    prihex = hashlib.sha256(pri_src.encode()).hexdigest()
    verkey, _ = libnacl.crypto_sign_seed_keypair(bytes.fromhex(sighex))
    pubkey = libnacl.crypto_scalarmult_base(bytes.fromhex(prihex))
    return {"sighex": sighex, "sighex_source": f"sha256({sig_src!r})",
            "prihex": prihex, "prihex_source": f"sha256({pri_src!r})",
            "verhex": verkey.hex(), "pubhex": pubkey.hex()}


KEYS = {name: fixed_keys(name) for name in ("main", "minion")}
MESSAGES: dict[str, dict[str, Any]] = {}  # message id -> crypto record (see message_records)


# ---------------------------------------------------------------------- harness
class Road:
    """A few stacks sharing one simulated clock, with every sent datagram captured."""

    def __init__(self, scenario: str, tmp: Path) -> None:
        self.scenario = scenario
        RNG.scenario = scenario
        self.tmp = tmp
        self.store = Store(stamp=1000.0)
        self.stacks: dict[str, Any] = {}
        self.sent: list[dict[str, Any]] = []
        self.head_kind = 0

    def add(self, name: str, *, main: bool, auto: int, keepname: str | None = None,
            port: int = 0, hk: int = 0) -> Any:
        keys = KEYS[name]
        stack = stacking.RoadStack(store=self.store, name=name, main=main, auto=auto,
                                   ha=("127.0.0.1", port),
                                   dirpath=str(self.tmp / self.scenario / (keepname or name)),
                                   sigkey=keys["sighex"], prikey=keys["prihex"])
        stack.Hk = hk
        server = stack.server
        original = server.send

        def send(data: bytes, da: Any, _name: str = name, _orig: Any = original) -> Any:
            self.sent.append({"sender": _name, "to": tuple(da), "data": bytes(data)})
            return _orig(data, da)

        server.send = send
        self.stacks[name] = stack
        return stack

    def service(self, until: Any, max_passes: int = 5000) -> None:
        for _ in range(max_passes):
            self.store.advanceStamp(STEP)
            for stack in list(self.stacks.values()):
                stack.serviceAll()
            if until() and not any(s.transactions for s in self.stacks.values()):
                # one more pass so nothing queued is left behind
                for stack in list(self.stacks.values()):
                    stack.serviceAll()
                return
        raise RuntimeError(f"{self.scenario}: condition not reached")

    def take(self) -> list[dict[str, Any]]:
        out, self.sent = self.sent, []
        return out

    def close(self) -> None:
        for stack in self.stacks.values():
            stack.server.close()


def receiver_name(road: Road, record: dict[str, Any]) -> str:
    for name, stack in road.stacks.items():
        if tuple(stack.ha) == record["to"] and name != record["sender"]:
            return name
    return "?"


# ---------------------------------------------------------------------- decoding
def split_packet(data: bytes) -> dict[str, Any]:
    """Head/coat/foot split plus the head fields as they appear on the wire."""
    if data.startswith(b"ri RAET\n"):
        front, sep, _ = data.partition(b"\n\n")
        head = front + sep
        order, fields = [], {}
        for line in front.decode("latin-1").split("\n"):
            key, value = line.split(" ")
            order.append(key)
            fields[key] = int(value, 16) if key in HEX_KEYS else value
        kind = "raet"
    else:
        front, sep, _ = data.partition(b"\r\n\r\n")
        head = front + sep
        raw = json.loads(front)
        order = list(raw)
        fields = {k: (int(v, 16) if k in ("pl", "hl") else v) for k, v in raw.items()}
        kind = "json"
    fl = fields.get("fl", 0)
    coat = data[len(head):len(data) - fl]
    foot = data[len(data) - fl:] if fl else b""
    return {"head_kind": kind, "head_bytes": head, "head_order": order, "head": fields,
            "coat": coat, "foot": foot}


def raet_parse(data: bytes) -> dict[str, Any]:
    """raet's own RxHead parse of the datagram (all fields with raet's defaults)."""
    packet = packeting.RxPacket(packed=data)
    packet.head.parse()
    return {k: v for k, v in packet.data.items() if k not in ("sh", "sp", "dh", "dp")}


def contract_header(parsed: dict[str, Any]) -> dict[str, Any]:
    """The head in the field names of raetsalt.wire.header.Header (all values)."""
    return {
        "packet_kind": parsed["pk"], "transaction_kind": parsed["tk"],
        "source_uid": parsed["se"], "destination_uid": parsed["de"],
        "session_id": parsed["si"], "transaction_id": parsed["ti"],
        "flags": int(parsed["fg"], 16), "segment_number": parsed["sn"],
        "segment_count": parsed["sc"], "message_length": parsed["ml"],
        "body_kind": parsed["bk"], "coat_kind": parsed["ck"], "foot_kind": parsed["fk"],
        "head_kind": parsed["hk"], "packet_length": parsed["pl"],
        "head_length": parsed["hl"], "foot_length": parsed["fl"],
    }


def box(secret: bytes, public: bytes, nonce: bytes, plain: bytes) -> bytes:
    """crypto_box as raet does it: tag(16) || ciphertext."""
    return libnacl.crypto_box_afternm(plain, nonce, libnacl.crypto_box_beforenm(public, secret))


def unbox(secret: bytes, public: bytes, nonce: bytes, cipher: bytes) -> bytes:
    return libnacl.crypto_box_open_afternm(cipher, nonce,
                                           libnacl.crypto_box_beforenm(public, secret))


def box_record(secret: bytes, public: bytes, nonce: bytes, plain: bytes, cipher: bytes,
               secret_is: str, public_is: str) -> dict[str, Any]:
    if box(secret, public, nonce, plain) != cipher:
        raise AssertionError("box does not re-derive")
    return {"secret": secret.hex(), "secret_is": secret_is, "public": public.hex(),
            "public_is": public_is, "nonce": nonce.hex(), "plain_hex": plain.hex(),
            "cipher_hex": cipher.hex()}


# --------------------------------------------------------------------- scenarios
class Collector:
    def __init__(self) -> None:
        self.packets: list[dict[str, Any]] = []
        self.scenarios: dict[str, Any] = {}
        self.names: set[str] = set()

    def record(self, road: Road, captured: list[dict[str, Any]], names: list[str],
               session: dict[str, Any] | None = None,
               messages: dict[str, dict[str, Any]] | None = None) -> None:
        if len(captured) != len(names):
            summary = [(c["sender"], split_packet(c["data"])["head"]) for c in captured]
            raise AssertionError(f"{road.scenario}: expected {names}, got {summary}")
        for rec, name in zip(captured, names, strict=True):
            full = f"{road.scenario}.{name}"
            assert full not in self.names, full
            self.names.add(full)
            self.packets.append(self.describe(road, rec, full, session or {},
                                              (messages or {}).get(name)))

    def describe(self, road: Road, rec: dict[str, Any], name: str,
                 session: dict[str, Any], message: dict[str, Any] | None) -> dict[str, Any]:
        data: bytes = rec["data"]
        parts = split_packet(data)
        parsed = raet_parse(data)
        header = contract_header(parsed)
        sender, receiver = rec["sender"], receiver_name(road, rec)
        entry: dict[str, Any] = {
            "name": name, "scenario": road.scenario, "sender": sender, "receiver": receiver,
            "length": len(data), "hex": data.hex(),
            "head_kind": parts["head_kind"],
            "head_text": parts["head_bytes"].decode("latin-1"),
            "head_order": parts["head_order"], "head": parts["head"],
            "header": header,
            "packet_kind_name": PK_NAMES.get(header["packet_kind"]),
            "transaction_kind_name": TK_NAMES.get(header["transaction_kind"]),
            "flags_set": [f for f in ("vf", "df", "nf", "af", "sf", "wf", "bf", "cf")
                          if parsed[f]],
            "coat_hex": parts["coat"].hex(), "foot_hex": parts["foot"].hex(),
        }
        if parts["foot"]:
            seed = bytes.fromhex(KEYS[sender]["sighex"])
            _, sk = libnacl.crypto_sign_seed_keypair(seed)
            signed = data[:len(data) - 64] + b"\x00" * 64
            signature = libnacl.crypto_sign(signed, sk)[:64]
            if signature != parts["foot"]:
                raise AssertionError(f"{name}: signature does not re-derive")
            entry["signature"] = {"signer": sender, "sighex": KEYS[sender]["sighex"]}
        coat = parts["coat"]
        tk, bk, ck = header["transaction_kind"], header["body_kind"], header["coat_kind"]
        if tk == 3 and bk == 2:
            entry["allow"] = self.describe_allow(header["packet_kind"], coat, sender,
                                                 receiver, session)
        elif message is not None:
            entry["message"] = message["id"]
            if header["segment_count"] == 1:
                entry["body"] = message["body"]
                entry["body_hex"] = message["plain_hex"]
            else:
                sn = header["segment_number"]
                offset = sum(len(seg) for seg in message["_segments"][:sn])
                entry["segment"] = {"number": sn, "offset": offset,
                                    "length": len(message["_segments"][sn])}
        elif bk == 1:
            if ck == 1 and coat:
                raise AssertionError(f"{name}: encrypted packet without message record")
            entry["body_hex"] = coat.hex()
            entry["body"] = json.loads(coat) if coat else {}
        return entry

    def describe_allow(self, pk: int, body: bytes, sender: str, receiver: str,
                       session: dict[str, Any]) -> dict[str, Any]:
        short = session["short"]  # name -> (secret, public)
        long_pri = {n: bytes.fromhex(k["prihex"]) for n, k in KEYS.items()}
        long_pub = {n: bytes.fromhex(k["pubhex"]) for n, k in KEYS.items()}
        if pk == 6:  # hello: plain(64) S_i(32) box(80) n1(24)
            plain, s_pub, cipher, nonce = body[:64], body[64:96], body[96:176], body[176:200]
            assert len(body) == 200 and s_pub == short[sender][1]
            return {"layout": "hello", "plain": plain.decode("ascii"),
                    "short_public": s_pub.hex(), "box_hex": cipher.hex(), "nonce": nonce.hex(),
                    "box": box_record(short[sender][0], long_pub[receiver], nonce, plain, cipher,
                                      f"{sender} short-term secret",
                                      f"{receiver} long-term public")}
        if pk == 7:  # cookie: box(80) n2(24); stuff = S_r(32) nuid(4) fuid(4) oreo(24)
            cipher, nonce = body[:80], body[80:104]
            assert len(body) == 104
            stuff = unbox(long_pri[sender], short[receiver][1], nonce, cipher)
            s_pub, near, far, oreo = struct.unpack("!32sLL24s", stuff)
            assert s_pub == short[sender][1]
            return {"layout": "cookie", "box_hex": cipher.hex(), "nonce": nonce.hex(),
                    "stuff": {"short_public": s_pub.hex(), "near_uid": near, "far_uid": far,
                              "oreo": oreo.hex()},
                    "box": box_record(long_pri[sender], short[receiver][1], nonce, stuff,
                                      cipher, f"{sender} long-term secret",
                                      f"{receiver} short-term public")}
        if pk == 8:  # initiate: S_i(32) oreo(24) box(248) n3(24)
            s_pub, oreo, cipher, nonce = body[:32], body[32:56], body[56:304], body[304:328]
            assert len(body) == 328 and s_pub == short[sender][1]
            stuff = unbox(short[receiver][0], s_pub, nonce, cipher)
            l_pub, vouch, vnonce, fqdn = struct.unpack("!32s48s24s128s", stuff)
            assert l_pub == long_pub[sender]
            return {"layout": "initiate", "short_public": s_pub.hex(), "oreo": oreo.hex(),
                    "box_hex": cipher.hex(), "nonce": nonce.hex(),
                    "stuff": {"long_public": l_pub.hex(), "vouch_hex": vouch.hex(),
                              "vouch_nonce": vnonce.hex(),
                              "fqdn": fqdn.decode("ascii"), "fqdn_hex": fqdn.hex()},
                    "box": box_record(short[sender][0], short[receiver][1], nonce, stuff,
                                      cipher, f"{sender} short-term secret",
                                      f"{receiver} short-term public"),
                    "vouch": box_record(long_pri[sender], long_pub[receiver], vnonce, s_pub,
                                        vouch, f"{sender} long-term secret",
                                        f"{receiver} long-term public")}
        return {"layout": "empty" if not body else "unknown", "body_hex": body.hex()}


def short_keys(road: Road) -> dict[str, tuple[bytes, bytes]]:
    """Each stack's short-term key pair for its (single) remote."""
    out = {}
    for name, stack in road.stacks.items():
        (remote,) = list(stack.remotes.values())
        out[name] = (bytes.fromhex(remote.privee.keyhex.decode()),
                     bytes.fromhex(remote.privee.pubhex.decode()))
    return out


def message_records(road: Road, captured: list[dict[str, Any]], names: list[str],
                    body: dict[str, Any], sender: str,
                    short: dict[str, tuple[bytes, bytes]]) -> dict[str, dict[str, Any]]:
    """Crypto record for the message packets (one box over the whole body)."""
    receiver = next(n for n in road.stacks if n != sender)
    segments = [(n, c) for n, c in zip(names, captured, strict=False)
                if c["sender"] == sender
                and split_packet(c["data"])["head"].get("pk", 0) == 0]
    stream = b"".join(split_packet(c["data"])["coat"] for _, c in segments)
    plain = json.dumps(body, separators=(",", ":")).encode("utf-8")
    nonce, cipher = stream[-24:], stream[:-24]
    record = {"id": f"{road.scenario}.{segments[0][0].replace('_seg0', '_segmented')}",
              "body": body, "plain_hex": plain.hex(), "coat_stream_hex": stream.hex(),
              "coat_stream_length": len(stream), "segments": [n for n, _ in segments],
              "box": box_record(short[sender][0], short[receiver][1], nonce, plain, cipher,
                                f"{sender} short-term secret", f"{receiver} short-term public")}
    MESSAGES[record["id"]] = record
    # internal: the coat slice of each segment, for the per-packet offsets
    return {n: {**record, "_segments": [split_packet(c["data"])["coat"] for _, c in segments]}
            for n, _ in segments}


def filler(size: int, tag: str) -> dict[str, Any]:
    """A JSON object whose compact encoding is exactly `size` bytes."""
    overhead = len(json.dumps({"tag": tag, "fill": ""}, separators=(",", ":")))
    text = "".join("abcdefghijklmnopqrstuvwxyz0123456789"[(i * 7) % 36]
                   for i in range(size - overhead))
    return {"tag": tag, "fill": text}


def full_exchange(col: Collector, tmp: Path, scenario: str, hk: int) -> None:
    """Join, allow, alive, messages (single, reply, 3 segments) between main and minion."""
    road = Road(scenario, tmp)
    main = road.add("main", main=True, auto=1, hk=hk)
    minion = road.add("minion", main=False, auto=1, hk=hk)
    remote = estating.RemoteEstate(stack=minion, fuid=0, sid=0, ha=main.ha)
    minion.addRemote(remote)

    minion.join(uid=remote.uid)
    road.service(lambda: remote.joined and all(r.joined for r in main.remotes.values()))
    col.record(road, road.take(), ["join_request", "join_response", "join_ack"])

    minion.allow(uid=remote.uid)
    road.service(lambda: remote.allowed and all(r.allowed for r in main.remotes.values()))
    session = {"short": short_keys(road)}
    col.record(road, road.take(), ["allow_hello", "allow_cookie", "allow_initiate",
                                   "allow_ack", "allow_ack_final"], session)
    col.scenarios[scenario] = {
        "head_kind": "json" if hk else "raet",
        "uids": {n: {"nuid": list(s.remotes.values())[0].uid,
                     "fuid": list(s.remotes.values())[0].fuid,
                     "sid": list(s.remotes.values())[0].sid}
                 for n, s in road.stacks.items()},
        "short_keys": {n: {"secret": k[0].hex(), "public": k[1].hex()}
                       for n, k in session["short"].items()},
        "fqdn_used_by_minion": remote.fqdn,
    }

    minion.alive(uid=remote.uid)
    road.service(lambda: True)
    col.record(road, road.take(), ["alive_request", "alive_ack"], session)

    main_uid = list(main.remotes.values())[0].uid
    plans = [
        ("minion", {"cmd": "ping", "n": 1}, ["message_single", "message_single_done"]),
        ("main", {"cmd": "pong", "n": 1}, ["message_reply", "message_reply_done"]),
        ("minion", filler(2000, "three"),
         ["message_seg0", "message_seg1", "message_seg2", "message_segmented_done"]),
    ]
    for sender, body, names in plans:
        stack = road.stacks[sender]
        stack.transmit(body, uid=remote.uid if sender == "minion" else main_uid)
        receiver = main if sender == "minion" else minion
        road.service(lambda r=receiver: bool(r.rxMsgs))
        got, _ = receiver.rxMsgs.popleft()
        assert json.loads(json.dumps(got)) == body
        captured = road.take()
        msgs = message_records(road, captured, names, body, sender, session["short"])
        col.record(road, captured, names, session, msgs)
    road.close()


def pend_exchange(col: Collector, tmp: Path) -> None:
    """A main with auto=never pends the join until the operator accepts the role."""
    road = Road("pend", tmp)
    main = road.add("main", main=True, auto=0)
    minion = road.add("minion", main=False, auto=1)
    remote = estating.RemoteEstate(stack=minion, fuid=0, sid=0, ha=main.ha)
    minion.addRemote(remote)
    minion.join(uid=remote.uid)
    for _ in range(20):
        road.store.advanceStamp(STEP)
        for stack in road.stacks.values():
            stack.serviceAll()
    col.record(road, road.take(), ["join_request", "join_pend"])
    # operator acceptance in the main's keep (what salt-key -a did)
    data = main.keep.loadRemoteRoleData("minion")
    data["acceptance"] = 1
    main.keep.dumpRemoteRoleData(data, "minion")
    road.service(lambda: remote.joined)
    col.record(road, road.take(), ["join_response", "join_ack"])
    road.close()


def renew_exchange(col: Collector, tmp: Path) -> None:
    """A joined minion re-joins a main that lost its keep: the main answers renew."""
    road = Road("renew", tmp)
    main = road.add("main", main=True, auto=1)
    minion = road.add("minion", main=False, auto=1)
    remote = estating.RemoteEstate(stack=minion, fuid=0, sid=0, ha=main.ha)
    minion.addRemote(remote)
    minion.join(uid=remote.uid)
    road.service(lambda: remote.joined)
    road.take()  # the join itself is covered by the basic scenario
    port = main.ha[1]
    main.server.close()
    del road.stacks["main"]
    road.add("main", main=True, auto=1, keepname="main-restarted", port=port)
    minion.join(uid=remote.uid)  # non-vacuous now: de = fuid learnt in the first join
    road.service(lambda: True)
    col.record(road, road.take(), ["join_request_nonvacuous", "join_renew"])
    road.close()


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else HERE / "raet_vectors.json"
    tmp = Path(tempfile.mkdtemp(prefix="raetvec-"))
    try:
        col = Collector()
        full_exchange(col, tmp, "basic", hk=0)
        full_exchange(col, tmp, "jsonhead", hk=1)
        pend_exchange(col, tmp)
        renew_exchange(col, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    doc = {
        "format": "raetsalt raet-vectors 1",
        "generator": "tests/data/make_raet_vectors.py",
        "raet_version": raet.__version__ if hasattr(raet, "__version__") else "0.6.8",
        "python": sys.version.split()[0],
        "fqdn_of_127.0.0.1": socket.getfqdn("127.0.0.1"),
        "notes": [
            "hex = the exact datagram raet 0.6.8 sent; names are <scenario>.<step>.",
            "head = fields as they appear on the wire, numbers decoded (hex -> int; "
            "for JSON heads pl/hl decoded from their hex strings); head_order = key order.",
            "header = all head values incl. defaults, in raetsalt.wire.header.Header names, "
            "taken from raet's own head parser.",
            "signature: foot = Ed25519 over (datagram with its last 64 bytes zeroed), i.e. "
            "head || coat || 64 zero bytes, with the sender's seed keys[signer].sighex.",
            "box records: crypto_box(plain, nonce, public, secret) = cipher (tag || ct), "
            "re-derived and checked by the generator.",
            "messages[id]: one box over the whole compact-JSON body; coat stream = "
            "cipher || nonce, cut into the segments listed; packets refer to it by "
            "'message' (= id) and give their slice in 'segment' {number, offset, length}.",
            "rng.draws: every random byte string raet drew, in order, with the raet call chain.",
        ],
        "keys": KEYS,
        "scenarios": col.scenarios,
        "rng": {"algorithm": "draw i of n bytes = (sha512(label || u64be(i) || u64be(0)) "
                             "|| sha512(... u64be(1)) ...)[:n]",
                "label": RNG_LABEL.decode(), "draws": RNG.draws},
        "messages": MESSAGES,
        "packets": col.packets,
    }
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {len(col.packets)} packets to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
