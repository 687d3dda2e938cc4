"""Checks of tests/data/raet_vectors.json itself (the golden raet 0.6.8 datagrams).

The wire/crypto tests consume the file; these tests make sure it is internally
consistent and that it still matches what raet 0.6.8 produces.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from raetpeer_client import raet_available

DATA = Path(__file__).resolve().parent / "data"
VECTORS = DATA / "raet_vectors.json"
FLAG_BITS = {"vf": 0x80, "df": 0x40, "nf": 0x20, "af": 0x10, "sf": 0x08, "wf": 0x04,
             "bf": 0x02, "cf": 0x01}


def _load() -> dict[str, Any]:
    return json.loads(VECTORS.read_text())


def test_every_packet_is_consistent() -> None:
    doc = _load()
    names = [p["name"] for p in doc["packets"]]
    assert len(names) == len(set(names))
    for p in doc["packets"]:
        data = bytes.fromhex(p["hex"])
        hdr = p["header"]
        assert len(data) == p["length"] == hdr["packet_length"] <= 1024, p["name"]
        head = p["head_text"].encode("latin-1")
        assert data.startswith(head) and len(head) == hdr["head_length"], p["name"]
        coat, foot = bytes.fromhex(p["coat_hex"]), bytes.fromhex(p["foot_hex"])
        assert head + coat + foot == data and len(foot) == hdr["foot_length"], p["name"]
        assert list(p["head"]) == p["head_order"], p["name"]
        assert hdr["flags"] == sum(FLAG_BITS[f] for f in p["flags_set"]), p["name"]
        if hdr["foot_kind"] == 1:
            assert p["signature"]["sighex"] == doc["keys"][p["signature"]["signer"]]["sighex"]
        if "message" in p:
            msg = doc["messages"][p["message"]]
            stream = bytes.fromhex(msg["coat_stream_hex"])
            if hdr["packet_kind"] == 0 and hdr["segment_count"] > 1:
                seg = p["segment"]
                assert stream[seg["offset"]:seg["offset"] + seg["length"]] == coat
                assert hdr["message_length"] == len(stream)
            elif hdr["packet_kind"] == 0:
                assert coat == stream
            box = msg["box"]
            assert stream == bytes.fromhex(box["cipher_hex"]) + bytes.fromhex(box["nonce"])
            assert json.loads(bytes.fromhex(msg["plain_hex"])) == msg["body"]


def test_expected_vectors_are_present() -> None:
    names = {p["name"] for p in _load()["packets"]}
    for scenario in ("basic", "jsonhead"):
        for step in ("join_request", "join_response", "join_ack", "allow_hello",
                     "allow_cookie", "allow_initiate", "allow_ack", "allow_ack_final",
                     "alive_request", "alive_ack", "message_single", "message_single_done",
                     "message_reply", "message_seg0", "message_seg1", "message_seg2",
                     "message_segmented_done"):
            assert f"{scenario}.{step}" in names
    assert {"pend.join_pend", "renew.join_renew"} <= names


@pytest.mark.interop
def test_generator_reproduces_the_file(tmp_path: Path) -> None:
    if not raet_available():
        pytest.skip("raet 0.6.8 not installed")
    doc = _load()
    if socket.getfqdn("127.0.0.1") != doc["fqdn_of_127.0.0.1"]:
        pytest.skip("fqdn of 127.0.0.1 differs from the generating machine (initiate packets)")
    out = tmp_path / "vectors.json"
    subprocess.run([sys.executable, str(DATA / "make_raet_vectors.py"), str(out)],
                   check=True, capture_output=True, timeout=60)
    fresh = json.loads(out.read_text())
    fresh.pop("python"), doc.pop("python")
    assert fresh == doc
