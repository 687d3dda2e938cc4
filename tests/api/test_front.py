"""The lowstate front in process: which requests it answers and which it leaves to
CherryPy, and how it answers a failure (a stub dispatcher; the real daemon's answers
are compared with CherryPy's in test_http.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from typing import Any, cast

import pytest

from raetsalt.api.app import Api, Stats
from raetsalt.api.config import ApiConfig
from raetsalt.api.front import LowstateFront
from raetsalt.api.lowstate import Dispatcher, HttpProblem
from raetsalt.api.master import MasterTimeout, Refused

PING = b'[{"client": "local", "tgt": "*", "fun": "test.ping"}]'


class StubDispatcher:
    def __init__(self, answer: Any = None, fail: Exception | None = None) -> None:
        self.answer = answer if answer is not None else [{"minion1": True}]
        self.fail = fail
        self.calls: list[tuple[Any, str | None, str]] = []

    def run(self, lowstate: Any, token: str | None, client: str) -> list[Any]:
        self.calls.append((lowstate, token, client))
        if self.fail is not None:
            raise self.fail
        return list(self.answer)


def _api(dispatcher: StubDispatcher, **config: Any) -> Api:
    api = Api.__new__(Api)
    api.config = ApiConfig(**config)
    api.dispatcher = cast(Dispatcher, dispatcher)
    api.counters = Stats()
    from raetsalt.log import Throttle
    api._errors = Throttle(60.0)
    return api


class Downstream:
    """CherryPy's place: records the requests passed on."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        self.seen.append(environ)
        start_response("299 Passed", [])
        return [b"passed"]


def _environ(body: bytes = PING, **extra: Any) -> dict[str, Any]:
    env = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "SCRIPT_NAME": "",
           "QUERY_STRING": "", "CONTENT_TYPE": "application/json",
           "CONTENT_LENGTH": str(len(body)), "HTTP_ACCEPT": "application/json",
           "HTTP_X_AUTH_TOKEN": "tok", "REMOTE_ADDR": "192.0.2.7",
           "wsgi.input": io.BytesIO(body)}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def _call(front: LowstateFront, environ: dict[str, Any]
          ) -> tuple[str, list[tuple[str, str]], bytes]:
    got: list[Any] = []
    body = b"".join(front(environ, lambda status, headers, exc=None: got.append(
        (status, headers))))  # type: ignore[arg-type]
    return got[0][0], got[0][1], body


@pytest.mark.parametrize("extra", [
    {"REQUEST_METHOD": "GET"},
    {"PATH_INFO": "/minions"},
    {"PATH_INFO": "/run"},
    {"SCRIPT_NAME": "/api"},
    {"QUERY_STRING": "a=1"},
    {"HTTP_ORIGIN": "http://elsewhere.example"},
    {"HTTP_TRANSFER_ENCODING": "chunked"},
    {"CONTENT_LENGTH": None},
    {"CONTENT_LENGTH": "0"},
    {"CONTENT_LENGTH": "\u00b2"},
    {"CONTENT_LENGTH": "-5"},
    {"CONTENT_TYPE": "application/xml"},
    {"HTTP_ACCEPT": "text/html"},
])
def test_requests_it_does_not_answer_go_to_cherrypy(extra: dict[str, Any]) -> None:
    dispatcher, down = StubDispatcher(), Downstream()
    front = LowstateFront(down, _api(dispatcher), access_logged=False)
    status, _headers, body = _call(front, _environ(**extra))
    assert (status, body) == ("299 Passed", b"passed")
    assert len(down.seen) == 1 and not dispatcher.calls and front.answered == 0


def test_while_the_access_log_is_written_cherrypy_answers_everything() -> None:
    dispatcher, down = StubDispatcher(), Downstream()
    front = LowstateFront(down, _api(dispatcher), access_logged=True)
    assert _call(front, _environ())[0] == "299 Passed"
    assert not dispatcher.calls


def test_a_lowstate_is_answered_with_cherrypys_headers_in_order() -> None:
    dispatcher, down = StubDispatcher(), Downstream()
    api = _api(dispatcher)
    front = LowstateFront(down, api, access_logged=False)
    status, headers, body = _call(front, _environ(HTTP_X_AUTH_TOKEN="  tok  "))
    assert status == "200 OK" and not down.seen and front.answered == 1
    assert json.loads(body) == {"return": [{"minion1": True}]}
    assert [k for k, _v in headers] == ["Content-Type", "Server", "Date",
                                        "X-Content-Type-Options", "Cache-Control",
                                        "Content-Length"]
    assert dict(headers)["Content-Length"] == str(len(body))
    assert dispatcher.calls == [([{"client": "local", "tgt": "*", "fun": "test.ping"}],
                                 "tok", "http:192.0.2.7")]
    assert api.counters.by_status == {200: 1}
    no_expiry = LowstateFront(down, _api(dispatcher, expire_responses=False),
                              access_logged=False)
    assert "Cache-Control" not in dict(_call(no_expiry, _environ())[1])


def test_yaml_is_read_and_written() -> None:
    front = LowstateFront(Downstream(), _api(StubDispatcher()), access_logged=False)
    body = b"- client: local\n  tgt: '*'\n  fun: test.ping\n"
    status, headers, out = _call(front, _environ(
        body, CONTENT_TYPE="application/x-yaml", HTTP_ACCEPT="application/x-yaml"))
    assert status == "200 OK" and dict(headers)["Content-Type"] == "application/x-yaml"
    assert out == b"return:\n- minion1: true\n"


@pytest.mark.parametrize(("fail", "status", "text"), [
    (HttpProblem(400, "a target ('tgt') is needed"), "400 Bad Request",
     "a target ('tgt') is needed"),
    (Refused("denied here", True), "401 Unauthorized", "denied here"),
    (Refused("bad", False), "400 Bad Request", "bad"),
    (MasterTimeout("no answer"), "504 Gateway Timeout", "no answer"),
    (RuntimeError("secret internals"), "500 Internal Server Error",
     "An unexpected error occurred"),
])
def test_a_failure_is_answered_as_the_handler_answers_it(
        fail: Exception, status: str, text: str, caplog: pytest.LogCaptureFixture) -> None:
    api = _api(StubDispatcher(fail=fail))
    front = LowstateFront(Downstream(), api, access_logged=False)
    got, _headers, body = _call(front, _environ())
    assert got == status
    assert json.loads(body) == {"status": int(status[:3]), "return": text}
    assert b"secret" not in body and b"Traceback" not in body
    assert api.counters.by_status == {int(status[:3]): 1}


@pytest.mark.parametrize(("body", "text"), [
    (b"[{", "Invalid JSON document"),
    (b'"text"', "Lowstates must be a list"),
    (b"[\xff]", "the body is not UTF-8"),
])
def test_a_bad_body_is_400(body: bytes, text: str) -> None:
    dispatcher = StubDispatcher()
    front = LowstateFront(Downstream(), _api(dispatcher), access_logged=False)
    status, _h, out = _call(front, _environ(body))
    assert status == "400 Bad Request" and json.loads(out)["return"] == text
    assert not dispatcher.calls


def test_a_body_cut_short_is_answered_as_no_lowstate() -> None:
    """The client announced more than it sent, then went away."""
    dispatcher = StubDispatcher()
    front = LowstateFront(Downstream(), _api(dispatcher), access_logged=False)
    env = _environ(b"", CONTENT_LENGTH="100")
    status, _h, out = _call(front, env)
    assert status == "400 Bad Request"
    assert json.loads(out)["return"] == "a lowstate is needed in the request body"


def test_a_reader_that_fails_is_400_and_a_limit_413() -> None:
    class Broken(io.RawIOBase):
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        def read(self, size: int = -1) -> bytes:
            raise self.exc

    for exc, status in ((TimeoutError("timed out"), "400 Bad Request"),
                        (OSError("Request Entity Too Large"),
                         "413 Request Entity Too Large")):
        front = LowstateFront(Downstream(), _api(StubDispatcher()), access_logged=False)
        assert _call(front, _environ(**{"wsgi.input": Broken(exc)}))[0] == status
