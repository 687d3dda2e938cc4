"""eauth pieces without a master: password hashes (checked against the system's
crypt(3) where it knows them), the file backend's formats, the token store, backend
config checks, the command socket's framing and peer credentials."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import time
from pathlib import Path

import pytest

from raetsalt.auth import check_access_config
from raetsalt.auth import passwords as pw
from raetsalt.auth.backends import authenticate, validate_backends
from raetsalt.auth.tokens import TokenStore
from raetsalt.drivers.cmdsock import (
    CommandServer,
    StreamClient,
    decode_frames_untrusted,
    encode_frame,
)
from raetsalt.errors import BadPacket, ConfigError

SYSTEM = pw.system_crypt_available()
PASSWORDS = [b"", b"a", b"secret", b"x" * 70, "p\u00e4ssw\u00f6rd".encode()]


@pytest.mark.skipif(not SYSTEM, reason="no crypt(3) to compare with")
@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("salt", [b"abcdefgh", b"saltstringsaltstringXX", b"s"])
def test_pure_python_hashes_equal_crypt3(password: bytes, salt: bytes) -> None:
    assert pw.md5_crypt(password, salt) == pw._system_crypt(password, "$1$" + salt.decode())
    for bits, magic in ((256, "$5$"), (512, "$6$")):
        for rounds in (None, 1000, 5001):
            setting = magic + (f"rounds={rounds}$" if rounds else "") + salt.decode()
            assert pw.sha_crypt(password, salt, rounds, bits) == pw._system_crypt(
                password, setting)


def test_apr1_known_value() -> None:
    # openssl passwd -apr1 -salt xyz12345 secret
    stored = "$apr1$xyz12345$hVFg3wOytQE97CWCezCu2/"
    assert pw.md5_crypt(b"secret", b"xyz12345", b"$apr1$") == stored
    assert pw.verify("secret", stored) and not pw.verify("Secret", stored)


@pytest.mark.parametrize(
    "stored",
    [
        "{SHA}" + base64.b64encode(hashlib.sha1(b"letmein").digest()).decode(),
        pw.md5_crypt(b"letmein", b"Zz9", b"$apr1$"),
        pw.md5_crypt(b"letmein", b"abc"),
        pw.sha_crypt(b"letmein", b"pepper", None, 256),
        pw.sha_crypt(b"letmein", b"pepper", 2000, 512),
        "letmein",
    ],
)
def test_verify_each_scheme(stored: str) -> None:
    assert pw.scheme_supported(stored)[0]
    assert pw.verify("letmein", stored)
    assert not pw.verify("letmeout", stored)


@pytest.mark.skipif(not SYSTEM, reason="no crypt(3)")
def test_bcrypt_through_crypt3_when_it_knows_it() -> None:
    stored = pw._system_crypt(b"letmein", "$2b$04$abcdefghijklmnopqrstuu")
    if stored is None:
        pytest.skip("this crypt(3) has no bcrypt")
    assert pw.scheme_supported(stored) == (True, "bcrypt")
    assert pw.verify("letmein", stored) and not pw.verify("x", stored)


def test_unknown_scheme_never_matches() -> None:
    assert not pw.verify("x", "$9$nothing$here")
    assert pw.scheme_supported("$9$nothing$here")[0] is False
    assert not pw.verify("x", "$6$rounds=abc$salt$hash")


def _eauth(path: Path, **settings: object) -> dict[str, object]:
    return {"file": {"^filename": str(path), **settings, "fred": ["test.*"]}}


def test_file_backend_formats(tmp_path: Path) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("# users\nfred:" + pw.md5_crypt(b"pw1", b"salty", b"$apr1$") + "\n")
    conf = _eauth(htpasswd, **{"^filetype": "htpasswd"})
    assert authenticate(conf, "file", "fred", "pw1").ok
    result = authenticate(conf, "file", "fred", "pw2")
    assert not result.ok and result.reason == "wrong password"
    assert "no user 'bob'" in authenticate(conf, "file", "bob", "pw1").reason

    text = tmp_path / "users.txt"
    text.write_text("x|fred|" + hashlib.sha256(b"pw1").hexdigest() + "\n")
    conf = _eauth(text, **{"^hashtype": "sha256", "^field_separator": "|",
                           "^username_field": 2, "^password_field": 3})
    assert authenticate(conf, "file", "fred", "pw1").ok
    assert not authenticate(conf, "file", "fred", "pw2").ok

    plain = tmp_path / "plain.txt"
    plain.write_text("fred:pw1\n")
    assert authenticate(_eauth(plain), "file", "fred", "pw1").ok

    digest = tmp_path / "htdigest"
    digest.write_text("fred:realm1:" + hashlib.md5(b"fred:realm1:pw1").hexdigest() + "\n")
    conf = _eauth(digest, **{"^filetype": "htdigest", "^realm": "realm1"})
    assert authenticate(conf, "file", "fred", "pw1").ok
    assert not authenticate(conf, "file", "fred", "pw1x").ok

    assert not authenticate(conf, "ldap", "fred", "pw1").ok
    assert "not configured" in authenticate({}, "file", "fred", "pw1").reason


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({}, "'^filename' (the password file) is required"),
        ({"^filename": "/x", "^filetype": "csv"}, "is not one of text, htpasswd, htdigest"),
        ({"^filename": "/x", "^hashtype": "rot13"}, "unknown hash 'rot13'"),
        ({"^filename": "/x", "^password_field": 0}, "must be a field number from 1"),
        ({"^filename": "/x", "^filetype": "htdigest"}, "'^realm' is required"),
        ({"^filename": "/x", "^colour": "red"}, "unknown setting(s) ['^colour']"),
    ],
)
def test_bad_file_settings(settings: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_backends({"file": {**settings, "fred": ["test.*"]}})
    assert fragment in str(info.value)


def test_backend_warnings_and_the_master_check() -> None:
    warnings = validate_backends({"ldap": {"fred": ["x"]},
                                  "file": {"^filename": "/nonexistent/u", "fred": ["x"]}})
    assert any("unknown eauth backend" in w for w in warnings)
    assert any("does not exist" in w for w in warnings)
    opts = {"peer": {"web": ["test.ping"]}, "external_auth": {"file": {"^filename": "/x",
                                                                        "fred": ["test.*"]}}}
    assert any("prefix match" in w for w in check_access_config(opts))
    with pytest.raises(ConfigError):
        check_access_config({"external_auth": {"file": {"fred": ["test.*"]}}})


def test_token_store(tmp_path: Path) -> None:
    store = TokenStore(tmp_path / "tokens")
    assert (tmp_path / "tokens").stat().st_mode & 0o777 == 0o700
    record = store.create("fred", "file", ("ops",), 1000.0, 60.0, acl=["test.*"])
    token = record["token"]
    assert len(token) == 64 and not (tmp_path / "tokens" / token).exists()
    [path] = list((tmp_path / "tokens").iterdir())
    assert path.stat().st_mode & 0o777 == 0o600
    got = store.get(token, 1059.0)
    assert got is not None and got["name"] == "fred" and got["auth_list"] == ["test.*"]
    assert store.get(token.upper(), 1000.0) is None and store.get(None, 1000.0) is None
    assert store.get(token, 1060.0) is None and not path.exists()
    store.create("bob", "pam", (), 0.0, 1.0)
    assert store.clean(5.0) == 1


def test_frames_roundtrip_and_garbage() -> None:
    buf = bytearray(encode_frame({"a": 1}) + encode_frame({"b": [1, 2]}) + b"\0\0")
    assert decode_frames_untrusted(buf) == [{"a": 1}, {"b": [1, 2]}]
    assert buf == b"\0\0"
    with pytest.raises(BadPacket):
        decode_frames_untrusted(bytearray(b"\xff\xff\xff\xff"))
    with pytest.raises(BadPacket):
        decode_frames_untrusted(bytearray(b"\0\0\0\1\x91"))  # a list, not a map


def test_command_socket_reports_peer_credentials(tmp_path: Path) -> None:
    import selectors

    path = str(tmp_path / "s_cmd" / "master.sock")
    server = CommandServer(path)
    outer = selectors.DefaultSelector()
    server.register(outer)
    try:
        assert os.stat(path).st_mode & 0o777 == 0o666
        with StreamClient(path) as client:
            req = client.request("publish", fun="test.ping")
            requests = []
            deadline = time.monotonic() + 5
            while not requests and time.monotonic() < deadline:
                outer.select(1.0)
                requests = server.poll(time.monotonic())
            [(conn, cred, body)] = requests
            assert (cred.uid, cred.gid, cred.pid) == (os.getuid(), os.getgid(), os.getpid())
            assert body["req"] == req and body["fun"] == "test.ping"
            assert server.send(conn, {"req": req, "ok": True})
            assert client.receive(5.0) == [{"req": req, "ok": True}]
        # a peer that sends garbage is dropped
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(path)
        raw.sendall(b"\xff\xff\xff\xffjunk")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            outer.select(0.2)
            assert server.poll(time.monotonic()) == []
            raw.settimeout(0.2)
            try:
                if raw.recv(10) == b"":
                    break
            except TimeoutError:
                continue
        else:
            raise AssertionError("garbage peer not disconnected")
        raw.close()
    finally:
        server.unregister(outer)
        server.close()
    assert not os.path.exists(path)
