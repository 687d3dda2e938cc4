"""raetsalt-api over plain HTTP on a real master with two minions: the endpoints'
shapes and status codes, the event stream, webhooks, and hostile clients (huge bodies
and headers, bad documents, bad and expired tokens, slow event readers, password
guessing)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import yaml
from remote.cluster import wait_event

from api.helpers import ANN, FRED, Site, started_site
from raetsalt.auth.tokens import TokenStore
from raetsalt.config import load_node_config
from raetsalt.event import MasterEvent, SaltEvent

pytestmark = pytest.mark.integration

LIMITS = """  max_request_body_size: 65536
  max_header_size: 8192
  sse_queue: 8
  socket_timeout: 2
"""


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with started_site(2, LIMITS) as up:
        yield up


@pytest.fixture(scope="module")
def token(site: Site) -> str:
    return site.login()


def _data(body: bytes) -> dict[str, object]:
    assert b"Traceback" not in body and b'File "' not in body
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


def _bus(site: Site) -> MasterEvent:
    """A listener on the master's bus (subscribed at once: read it)."""
    return MasterEvent(load_node_config(site.master_conf, "master")["sock_dir"])


def _firer(site: Site) -> SaltEvent:
    """A connection to the master's bus that only fires (never subscribed, so the
    events it does not read pile up nowhere)."""
    return SaltEvent("master", load_node_config(site.master_conf, "master")["sock_dir"])


# ------------------------------------------------------------------ the endpoints


def test_login_answers_salts_shape(site: Site) -> None:
    before = time.time()
    status, headers, body = site.request("POST", "/login", {"username": "fred",
                                                            "password": FRED[1],
                                                            "eauth": "file"})
    assert status == 200
    ret = _data(body)["return"][0]  # type: ignore[index]
    assert set(ret) == {"token", "expire", "start", "user", "eauth", "perms"}
    assert ret["user"] == "fred" and ret["eauth"] == "file"
    assert ret["perms"] == [".*", "@runner", "@wheel"]
    assert before - 1 <= ret["start"] <= time.time() and ret["expire"] > ret["start"]
    assert headers["X-Auth-Token"] == ret["token"]
    assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]


def test_login_in_yaml_and_form_bodies(site: Site) -> None:
    for content_type, raw in (
        ("application/x-yaml", b"username: ann\npassword: ann-secret\neauth: file\n"),
        ("application/x-www-form-urlencoded", b"username=ann&password=ann-secret&eauth=file"),
    ):
        status, _h, body = site.request("POST", "/login", raw=raw,
                                        headers={"Content-Type": content_type,
                                                 "Accept": "application/x-yaml"})
        assert status == 200, body
        ret = yaml.safe_load(body)["return"][0]
        assert ret["user"] == "ann"
        assert ret["perms"] == ["test.ping", {"@runner": ["manage.up"]}]


def test_lowstate_clients(site: Site, token: str) -> None:
    auth = {"X-Auth-Token": token}
    status, _h, body = site.request("POST", "/", [
        {"client": "local", "tgt": "*", "fun": "test.echo", "arg": ["one"]},
        {"client": "local", "tgt": "minion1", "fun": "test.arg", "arg": ["a", "b=2"],
         "kwarg": {"c": 3}},
        {"client": "runner", "fun": "manage.up"},
    ], auth)
    assert status == 200
    ret = _data(body)["return"]
    assert ret[0] == {"minion1": "one", "minion2": "one"}  # type: ignore[index]
    assert ret[1]["minion1"]["args"] == ["a"]  # type: ignore[index]
    assert ret[1]["minion1"]["kwargs"]["b"] == 2  # type: ignore[index]
    assert ret[1]["minion1"]["kwargs"]["c"] == 3  # type: ignore[index]
    assert ret[2] == ["minion1", "minion2"]  # type: ignore[index]


def test_local_batch(site: Site, token: str) -> None:
    status, _h, body = site.request("POST", "/", [
        {"client": "local_batch", "tgt": "*", "fun": "test.ping", "batch": "1"}],
        {"X-Auth-Token": token})
    assert status == 200
    assert sorted(_data(body)["return"], key=str) == [  # type: ignore[arg-type]
        {"minion1": True}, {"minion2": True}]


def test_form_encoded_lowstate(site: Site, token: str) -> None:
    status, _h, body = site.request(
        "POST", "/", raw=b"client=local&tgt=minion2&fun=test.echo&arg=formed",
        headers={"X-Auth-Token": token, "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200
    assert _data(body)["return"] == [{"minion2": "formed"}]


def test_per_request_credentials_on_run(site: Site) -> None:
    status, _h, body = site.request("POST", "/run", [
        {"client": "local", "tgt": "minion1", "fun": "test.ping", "username": "ann",
         "password": ANN[1], "eauth": "file"}])
    assert status == 200
    assert _data(body)["return"] == [{"minion1": True}]


def test_runner_async_fires_its_result(site: Site, token: str) -> None:
    bus = _bus(site)
    try:
        bus.subscribe("salt/run/")
        status, _h, body = site.request("POST", "/", [
            {"client": "runner_async", "fun": "manage.up"}], {"X-Auth-Token": token})
        assert status == 200
        job = _data(body)["return"][0]  # type: ignore[index]
        assert job["tag"] == f"salt/run/{job['jid']}"
        event = wait_event(bus, f"salt/run/{job['jid']}/ret", timeout=30)
        assert event["data"]["return"] == ["minion1", "minion2"]
        assert event["data"]["success"] is True
    finally:
        bus.destroy()


def test_minions_jobs_keys(site: Site, token: str) -> None:
    auth = {"X-Auth-Token": token}
    status, _h, body = site.request("GET", "/minions/minion1", headers=auth)
    assert status == 200
    grains = _data(body)["return"][0]["minion1"]  # type: ignore[index]
    assert grains["id"] == "minion1" and grains["role"] == "web1"
    status, _h, body = site.request("POST", "/minions", {"tgt": "*", "fun": "test.ping"}, auth)
    assert status == 202
    posted = _data(body)
    jid = posted["return"][0]["jid"]  # type: ignore[index]
    assert posted["_links"] == {"jobs": [{"href": f"/jobs/{jid}"}]}
    status, _h, body = site.request("GET", "/jobs", headers=auth)
    assert status == 200 and jid in _data(body)["return"][0]  # type: ignore[index]
    status, _h, body = site.request("GET", f"/jobs/{jid}", headers=auth)
    assert status == 200
    job = _data(body)
    assert job["info"][0]["Function"] == "test.ping"  # type: ignore[index]
    status, _h, body = site.request("GET", "/keys", headers=auth)
    assert status == 200
    assert _data(body)["return"]["minions"] == ["minion1", "minion2"]  # type: ignore[index]
    status, _h, body = site.request("GET", "/keys/minion2", headers=auth)
    fingers = _data(body)["return"]["minions"]  # type: ignore[index]
    assert list(fingers) == ["minion2"] and fingers["minion2"].count(":") >= 15


def test_webhook_fires_on_the_bus_without_credentials(site: Site, token: str) -> None:
    bus = _bus(site)
    try:
        bus.subscribe("salt/netapi/hook/")
        status, _h, body = site.request("POST", "/hook/deploy/web", {"version": "1.2"},
                                        {"X-Auth-Token": token, "X-Trace": "abc"})
        assert status == 200 and _data(body) == {"success": True}
        event = wait_event(bus, "salt/netapi/hook/deploy/web")
    finally:
        bus.destroy()
    assert event["data"]["post"] == {"version": "1.2"}
    headers = {k.lower(): v for k, v in event["data"]["headers"].items()}
    assert headers["x-trace"] == "abc" and "x-auth-token" not in headers
    status, _h, _b = site.request("POST", "/hook/deploy/web", {"version": "1.3"})
    assert status == 401


def test_stats_needs_a_token(site: Site, token: str) -> None:
    assert site.request("GET", "/stats")[0] == 401
    status, _h, body = site.request("GET", "/stats", headers={"X-Auth-Token": token})
    assert status == 200 and _data(body)["raetsalt-api"]["Requests"] > 0  # type: ignore[index]


def test_accept_negotiation(site: Site) -> None:
    status, headers, body = site.request("GET", "/", headers={"Accept": "application/x-yaml"})
    assert status == 200 and headers["Content-Type"] == "application/x-yaml"
    assert yaml.safe_load(body)["return"] == "Welcome"
    status, _h, _b = site.request("GET", "/", headers={"Accept": "application/xml"})
    assert status == 406


def test_logout_ends_the_token(site: Site) -> None:
    own = site.login(ANN)
    assert site.request("POST", "/logout", headers={"X-Auth-Token": own})[0] == 200
    status, _h, body = site.request("POST", "/", [{"client": "local", "tgt": "*",
                                                   "fun": "test.ping"}],
                                    {"X-Auth-Token": own})
    assert status == 401


# ------------------------------------------------------------------ access control


@pytest.mark.parametrize(("chunk", "why"), [
    ({"client": "local", "tgt": "*", "fun": "cmd.run", "arg": ["id"]}, "cmd.run"),
    ({"client": "runner", "fun": "jobs.list_jobs"}, "jobs.list_jobs"),
    ({"client": "wheel", "fun": "key.delete", "match": "minion1"}, "key.delete"),
])
def test_restricted_user_is_denied_and_told_why(site: Site, chunk: dict[str, object],
                                                why: str) -> None:
    own = site.login(ANN)
    status, _h, body = site.request("POST", "/", [chunk], {"X-Auth-Token": own})
    assert status == 401
    assert why in str(_data(body)["return"])
    keys = site.request("GET", "/keys", headers={"X-Auth-Token": own})
    assert keys[0] == 401


@pytest.mark.parametrize("headers", [
    {},
    {"X-Auth-Token": "0" * 64},
    {"X-Auth-Token": "not-a-token"},
    {"X-Auth-Token": "a" * 5000},
])
def test_bad_tokens_are_refused(site: Site, headers: dict[str, str]) -> None:
    for method, path, body in (("POST", "/", [{"client": "local", "tgt": "*",
                                               "fun": "test.ping"}]),
                               ("GET", "/minions", None), ("GET", "/jobs", None),
                               ("GET", "/keys", None), ("GET", "/events", None),
                               ("POST", "/logout", None)):
        status, _h, raw = site.request(method, path, body, headers)
        assert status == 401, (method, path)
        _data(raw)


def test_a_bad_token_in_the_chunk_is_refused(site: Site, token: str) -> None:
    status, _h, _b = site.request("POST", "/", [{"client": "local", "tgt": "*",
                                                 "fun": "test.ping", "token": "zz"}],
                                  {"X-Auth-Token": token})
    assert status == 401


def test_expired_token_is_refused(site: Site) -> None:
    opts = load_node_config(site.master_conf, "master")
    store = TokenStore(f"{opts['cachedir']}/tokens")
    old = store.create("fred", "file", [], time.time() - 100, 10)["token"]
    status, _h, body = site.request("POST", "/", [{"client": "local", "tgt": "*",
                                                   "fun": "test.ping"}],
                                    {"X-Auth-Token": old})
    assert status == 401 and "expired" in str(_data(body)["return"])
    assert site.request("GET", "/events", headers={"X-Auth-Token": old})[0] == 401


def test_password_guessing_locks_out_that_client_only(site: Site) -> None:
    def login(source: str, user: tuple[str, str]) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=60,
                                          source_address=(source, 0))
        try:
            conn.request("POST", "/login", json.dumps({"username": user[0],
                                                       "password": user[1],
                                                       "eauth": "file"}),
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            _data(response.read())
            return response.status
        finally:
            conn.close()

    for _ in range(5):
        assert login("127.0.0.9", ("guessed", "wrong")) == 401
    # that client is locked now, even with a right password...
    assert login("127.0.0.9", ANN) == 401
    # ...while other clients are not
    assert login("127.0.0.8", ANN) == 200
    site.master.expect("client 'http:127.0.0.9'", timeout=30)


# ------------------------------------------------------------------ hostile HTTP


def test_huge_body_is_refused(site: Site, token: str) -> None:
    raw = json.dumps([{"client": "local", "tgt": "*", "fun": "test.echo",
                       "arg": ["x" * 200_000]}]).encode()
    status, _h, _b = site.request("POST", "/", raw=raw,
                                  headers={"X-Auth-Token": token,
                                           "Content-Type": "application/json"})
    assert status == 413


def test_huge_chunked_body_is_refused(site: Site, token: str) -> None:
    """A chunked body over the limit is refused with 413 and the connection closed; the
    client may find the connection closed while it is still sending (the kernel resets
    a socket closed with unread data), but never a body taken in."""
    import socket

    head = ("POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            f"X-Auth-Token: {token}\r\nContent-Type: application/json\r\n\r\n").encode()
    chunk = b"1000\r\n" + b"[" * 4096 + b"\r\n"
    answer = b""
    cut_off = False
    with socket.create_connection(("127.0.0.1", site.api.port), timeout=30) as sock:
        try:
            sock.sendall(head)
            for _ in range(64):
                sock.sendall(chunk)
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            cut_off = True
        try:
            while data := sock.recv(65536):
                answer += data
        except ConnectionResetError:
            cut_off = True
    assert answer.startswith(b"HTTP/1.1 413") or (cut_off and not answer), answer[:200]
    assert b"Traceback" not in answer
    assert site.request("GET", "/")[0] == 200  # and the API still serves


def test_huge_headers_are_refused(site: Site) -> None:
    status, _h, body = site.request("GET", "/", headers={"X-Junk": "j" * 20_000})
    assert status in (413, 431, 400)
    assert b"Traceback" not in body
    assert site.request("GET", "/")[0] == 200  # and the API still serves


@pytest.mark.parametrize(("content_type", "raw", "status"), [
    ("application/json", b'[{"client": "local",', 400),
    ("application/json", b"[" * 30_000 + b"]" * 30_000, 400),
    ("application/json", b"\xff\xfe", 400),
    ("application/x-yaml", b"- client: [local\n", 400),
    ("application/x-yaml", b"- !!python/object/apply:os.system ['id']\n", 400),
    ("application/x-yaml", b"a: &a [x, x, x, x, x, x, x, x, x]\n"
                           b"b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                           b"c: [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n", 400),
    ("application/xml", b"<lowstate/>", 406),
    ("application/json", b'"just text"', 400),
    ("application/json", b'[{"client": "evil", "fun": "x"}]', 400),
    ("application/json", b'[{"client": "local", "fun": "test.ping"}]', 400),
])
def test_bad_documents(site: Site, token: str, content_type: str, raw: bytes,
                       status: int) -> None:
    got, _h, body = site.request("POST", "/", raw=raw,
                                 headers={"X-Auth-Token": token,
                                          "Content-Type": content_type})
    assert got == status
    _data(body)


def test_cors_is_off_unless_configured(site: Site) -> None:
    _s, headers, _b = site.request("GET", "/", headers={"Origin": "https://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in headers)


# ------------------------------------------------------------------ the event stream


def _open_stream(site: Site, headers: dict[str, str], path: str = "/events"
                 ) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", site.api.port), timeout=30)
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Accept: text/event-stream",
             *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while b"retry: 400" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return sock, data


def test_events_stream_the_bus(site: Site, token: str) -> None:
    sock, head = _open_stream(site, {"X-Auth-Token": token})
    try:
        assert b"text/event-stream" in head
        bus = _firer(site)
        try:
            assert bus.fire_event({"n": 1}, "api/test/one")
        finally:
            bus.destroy()
        data = b""
        while b"api/test/one" not in data or b"\n\n" not in data.split(b"api/test/one")[-1]:
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
        frame = data[data.index(b"tag: api/test/one"):]
        tag_line, data_line = frame.split(b"\n")[:2]
        event = json.loads(data_line.split(b"data: ", 1)[1].split(b"\r\n")[0])
        assert event["tag"] == "api/test/one" and event["data"]["n"] == 1
    finally:
        sock.close()


def test_concurrent_clients_publishing_back_to_back_all_get_complete_answers(
        site: Site, token: str) -> None:
    """4 clients x 300 ``local`` publications, back to back on keep-alive connections,
    while an event stream is read (the API's hub is on the bus) and another bus
    subscriber never reads: every answer is 200 with both minions' returns.  Each
    carries 4 KiB (``test.echo``), so the job events the stalled subscriber is sent
    (about 18 MiB) outgrow any send buffer Linux grants the master."""
    clients, each = 4, 300
    stalled = _bus(site)  # subscribed, never read: its lane socket fills
    stream, _head = _open_stream(site, {"X-Auth-Token": token})
    stream.settimeout(0.2)
    done = threading.Event()
    streamed = [0]

    def drain() -> None:
        while not done.is_set():
            try:
                chunk = stream.recv(1 << 16)
            except TimeoutError:
                continue
            if not chunk:
                return
            streamed[0] += chunk.count(b"tag: salt/job/")

    pad = "x" * 4096
    body = json.dumps([{"client": "local", "tgt": "*", "fun": "test.echo", "arg": [pad]}])
    headers = {"X-Auth-Token": token, "Content-Type": "application/json",
               "Accept": "application/json"}
    outcomes: list[Counter[str]] = [Counter() for _ in range(clients)]

    def client(index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", site.api.port, timeout=120)
        try:
            for _ in range(each):
                conn.request("POST", "/", body, headers)
                response = conn.getresponse()
                answer = response.read()
                if (response.status == 200 and json.loads(answer)["return"]
                        == [{"minion1": pad, "minion2": pad}]):
                    outcomes[index]["complete"] += 1
                else:  # the first incomplete answer ends this client: it failed
                    outcomes[index][f"{response.status} {answer[:120]!r}"] += 1
                    return
        finally:
            conn.close()

    reader = threading.Thread(target=drain)
    workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    reader.start()
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        done.set()
        reader.join()
        stream.close()
        stalled.destroy()
    assert outcomes == [Counter(complete=each)] * clients
    assert streamed[0] > 0  # the hub was on the bus all along


def test_events_with_the_login_cookie(site: Site) -> None:
    own = site.login(ANN)
    sock, _head = _open_stream(site, {"Cookie": f"session_id={own}"})
    sock.close()


def test_events_refuse_a_token_in_the_query(site: Site, token: str) -> None:
    status, _h, body = site.request("GET", f"/events?token={token}")
    assert status == 400 and "query" in str(_data(body)["return"])


def test_a_slow_event_reader_is_dropped() -> None:
    with started_site(0, LIMITS) as own:  # its flood of events stays off the others' site
        _slow_reader_is_dropped(own, own.login())


def _slow_reader_is_dropped(site: Site, token: str) -> None:
    slow = socket.create_connection(("127.0.0.1", site.api.port), timeout=30)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        slow.sendall(f"GET /events HTTP/1.1\r\nHost: x\r\nX-Auth-Token: {token}\r\n\r\n"
                     .encode())
        assert slow.recv(1)  # the stream started; from now on it reads nothing
        bus = _firer(site)
        try:
            blob = "z" * 60_000
            for n in range(400):
                bus.fire_event({"n": n, "blob": blob}, "api/test/flood")
        finally:
            bus.destroy()
        site.api.daemon.expect("that did not keep up were dropped", timeout=60)
        # the API still serves everyone else
        status, _h, body = site.request("GET", "/stats", headers={"X-Auth-Token": token})
        stats = _data(body)["raetsalt-api"]
        assert status == 200 and stats["Event streams dropped (slow readers)"] >= 1  # type: ignore[index]
    finally:
        slow.close()


def test_a_stopped_master_is_503_not_a_traceback() -> None:
    with started_site(0) as own:
        token = own.login()
        own.master.popen.terminate()
        assert own.master.popen.wait(30) == 0
        for method, path, body in (
                ("POST", "/", [{"client": "local", "tgt": "*", "fun": "test.ping"}]),
                ("POST", "/", [{"client": "runner", "fun": "manage.up"}]),
                ("POST", "/login", {"username": "fred", "password": FRED[1],
                                    "eauth": "file"})):
            status, _h, raw = own.request(method, path, body, {"X-Auth-Token": token})
            assert status == 503, (path, raw)
            assert "not running" in str(_data(raw)["return"])


def test_tls_when_certificates_are_configured() -> None:
    with started_site(1, tls=True) as own:
        assert own.url.startswith("https://")
        token = own.login()
        status, _h, body = own.request("POST", "/", [{"client": "local", "tgt": "*",
                                                      "fun": "test.ping"}],
                                       {"X-Auth-Token": token})
        assert status == 200 and _data(body)["return"] == [{"minion1": True}]
        _s, headers, _b = own.request("POST", "/login", {"username": "ann",
                                                         "password": ANN[1],
                                                         "eauth": "file"})
        assert "Secure" in headers["Set-Cookie"]
        # plain HTTP on the TLS port gets nowhere
        plain = http.client.HTTPConnection("127.0.0.1", own.api.port, timeout=30)
        try:
            plain.request("GET", "/")
            assert plain.getresponse().status == 400
        except (ConnectionError, http.client.HTTPException):
            pass
        finally:
            plain.close()


def test_disable_ssl_is_said_loudly(site: Site) -> None:
    assert any("disable_ssl is set" in line and "IN CLEAR TEXT" in line
               for line in site.api.daemon.lines)


def test_an_event_stream_ends_when_its_token_does(site: Site) -> None:
    own = site.login(ANN)
    sock, _head = _open_stream(site, {"X-Auth-Token": own})
    try:
        assert site.request("POST", "/logout", headers={"X-Auth-Token": own})[0] == 200
        bus = _firer(site)
        data = b""
        deadline = time.monotonic() + 60
        try:
            sock.settimeout(0.2)
            # an event at a time; the stream ends (the last chunk) once the API sees the
            # token gone, which it checks at most once a second while events flow, and
            # at each keep-alive (15 s) when none do
            while not data.endswith(b"0\r\n\r\n"):
                assert time.monotonic() < deadline, data[-200:]
                bus.fire_event({"n": 1}, "api/test/after-logout")
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                data += chunk
        finally:
            bus.destroy()
    finally:
        sock.close()


# ------------------------------------------------------------------ the lowstate front

ORIGIN = "Origin: http://elsewhere.example\r\n"
"""A request with an ``Origin`` header goes to CherryPy (the front leaves CORS to it)."""


def _raw_exchange(site: Site, head: str, body: bytes) -> tuple[str, list[str], bytes]:
    """One request on its own connection: (status line, headers but Date, body)."""
    with socket.create_connection(("127.0.0.1", site.api.port), timeout=60) as sock:
        sock.sendall(head.encode("latin-1") + f"Content-Length: {len(body)}\r\n\r\n".encode()
                     + body)
        conn = http.client.HTTPResponse(sock)
        conn.begin()
        data = conn.read()
        fields = [f"{k}: {v}" for k, v in conn.getheaders() if k.lower() != "date"]
        return f"{conn.status} {conn.reason}", fields, data


def _lowstate_cases(token: str, ann: str) -> list[tuple[str, str, bytes]]:
    ping = json.dumps([{"client": "local", "tgt": "*", "fun": "test.ping"}]).encode()
    auth = f"X-Auth-Token: {token}\r\n"
    json_in = "Content-Type: application/json\r\n"
    deep = ("[" * 40 + "]" * 40).encode()
    return [
        ("ping", auth + json_in + "Accept: application/json\r\n", ping),
        ("yaml out", auth + json_in + "Accept: application/x-yaml\r\n", ping),
        ("any out", auth + json_in + "Accept: */*\r\n", ping),
        ("no accept", auth + json_in, ping),
        ("token padded", f"X-Auth-Token:   {token}  \r\n" + json_in, ping),
        ("unknown token", "X-Auth-Token: " + "0" * 64 + "\r\n" + json_in, ping),
        ("no credentials", json_in, ping),
        ("restricted user", f"X-Auth-Token: {ann}\r\n" + json_in,
         b'[{"client": "local", "tgt": "*", "fun": "cmd.run", "arg": ["id"]}]'),
        ("eauth in chunk", json_in, json.dumps([{
            "client": "local", "tgt": "minion1", "fun": "test.ping", "username": "ann",
            "password": ANN[1], "eauth": "file"}]).encode()),
        ("token in chunk", json_in, json.dumps([{
            "client": "local", "tgt": "minion2", "fun": "test.ping", "token": token}]).encode()),
        ("one mapping", auth + json_in, b'{"client": "local", "tgt": "*", "fun": "test.ping"}'),
        ("not json", auth + json_in, b"[{"),
        ("not a list", auth + json_in, b'"text"'),
        ("empty list", auth + json_in, b"[]"),
        ("unknown client", auth + json_in, b'[{"client": "nope", "fun": "test.ping"}]'),
        ("too deep", auth + json_in, deep),
        ("not utf-8", auth + json_in, b"[\xff\xfe]"),
        ("yaml in", auth + "Content-Type: application/x-yaml\r\n",
         b"- client: local\n  tgt: '*'\n  fun: test.ping\n"),
        ("form in", auth + "Content-Type: application/x-www-form-urlencoded\r\n",
         b"client=local&tgt=minion1&fun=test.ping"),
        ("no type", auth, b"client=local&tgt=minion1&fun=test.ping"),
        ("text in", auth + "Content-Type: text/plain; charset=utf-8\r\n", ping),
        ("xml in", auth + "Content-Type: application/xml\r\n", ping),
        ("html out", auth + json_in + "Accept: text/html\r\n", ping),
    ]


def test_the_lowstate_front_answers_as_cherrypy_does(site: Site, token: str) -> None:
    """Each ``POST /`` sent twice, once as the front takes it and once with an
    ``Origin`` header (CherryPy's handler): the same status, headers and body."""
    ann = site.login(ANN)
    for name, headers, body in _lowstate_cases(token, ann):
        head = f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
        front = _raw_exchange(site, head, body)
        cherry = _raw_exchange(site, head + ORIGIN, body)
        # the same answer; the minions' returns come in the order they arrived
        assert front[:2] == cherry[:2], name
        assert yaml.safe_load(front[2]) == yaml.safe_load(cherry[2]), name
        assert b"Traceback" not in front[2], name
    # each kind of answer was among them
    statuses = {_raw_exchange(site, f"POST / HTTP/1.1\r\nHost: x\r\n{h}", b)[0][:3]
                for _n, h, b in _lowstate_cases(token, ann)}
    assert {"200", "400", "401", "406"} <= statuses
