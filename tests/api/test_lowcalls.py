"""The pure parts of Salt's runner/wheel calls on the local request channel: Salt's
refusal shapes, the arguments taken from Salt's low data, and the runner check made
before the answer (the master's rules, from a token)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from raetsalt.api.auth import TokenInfo, Tokens
from raetsalt.api.lowcalls import CallError, packed, runner_args, token_data
from raetsalt.saltbridge.localreq import auth_error, auth_type, refusal


def test_refusals_are_salts_shapes() -> None:
    assert auth_error("eauth", "bob") == {"error": {
        "name": "EauthAuthenticationError",
        "message": 'Authentication failure of type "eauth" occurred for user bob.'}}
    assert auth_error("eauth")["error"]["message"] == (
        'Authentication failure of type "eauth" occurred.')
    assert auth_error("token")["error"]["name"] == "TokenAuthenticationError"
    # Salt's own text for a user (key) failure has no full stop
    assert auth_error("user") == {"error": {
        "name": "UserAuthenticationError",
        "message": 'Authentication failure of type "user" occurred'}}
    assert auth_type({"token": "t"}) == "token"
    assert auth_type({"eauth": "pam", "username": "u", "password": "p"}) == "eauth"
    assert auth_type({}) == "user"


def test_token_calls_answer_in_salts_shapes() -> None:
    # Salt's ClearFuncs: a failed mk_token is "", get_token without a token False, with
    # an unknown one {}
    assert refusal("mk_token", {"cmd": "mk_token"}) == ""
    assert refusal("get_token", {"cmd": "get_token"}) is False
    assert refusal("get_token", {"cmd": "get_token", "token": 7}) == {}
    assert refusal("wheel", {"token": 7}) == auth_error("token")
    assert token_data(None) == {}
    info = TokenInfo("ab" * 32, "alice", "pam", (), 10.0, 20.0, None)
    assert token_data(info) == {"start": 10.0, "expire": 20.0, "name": "alice",
                                "eauth": "pam", "token": "ab" * 32}
    info = TokenInfo("ab" * 32, "alice", "pam", ("ops",), 10.0, 20.0, ("test.*",))
    assert token_data(info)["groups"] == ["ops"]
    assert token_data(info)["auth_list"] == ["test.*"]


def test_runner_arguments_as_salts_runner_client_sends_them() -> None:
    load = {"fun": "jobs.lookup_jid", "username": "u", "password": "p", "eauth": "file",
            "kwarg": {"arg": ["a", 1], "kwarg": {"jid": "1", "__kwarg__": True}}}
    assert runner_args(load) == (["a", 1], {"jid": "1"})
    assert runner_args({"fun": "manage.up"}) == ([], {})
    for bad in ({"kwarg": "x"}, {"kwarg": {"arg": "x"}}, {"kwarg": {"kwarg": [1]}}):
        with pytest.raises(CallError):
            runner_args(bad)


def test_wheel_arguments_are_the_low_datas_other_keys() -> None:
    load = {"cmd": "wheel", "fun": "key.accept", "match": "web*", "username": "u",
            "password": "p", "eauth": "file", "key": "k", "user": "root",
            "__jid__": "1", "print_event": False, "include_rejected": True}
    assert packed(load) == ([], {"match": "web*", "include_rejected": True})
    assert packed({"fun": "key.list", "arg": ["acc"]}) == (["acc"], {})
    with pytest.raises(CallError):
        packed({"fun": "key.list", "kwarg": ["x"]})


def test_the_runner_check_is_the_masters(tmp_path: Path) -> None:
    opts = {"cachedir": str(tmp_path), "publisher_acl_blacklist": {"users": ["mallory"]},
            "external_auth": {"file": {"alice": ["@runner"], "bob": ["@wheel"],
                                       "carol": [{"@runner": ["manage.*"]}],
                                       "mallory": ["@runner"]}}}
    (tmp_path / "tokens").mkdir()
    tokens = Tokens(opts)
    now = time.time()

    def info(name: str) -> object:
        made = tokens.store.create(name, "file", [], now, 3600)
        found = tokens.get(made["token"])
        assert found is not None
        return found

    assert tokens.check_runner(info("alice"), "manage.up", []).allowed
    assert not tokens.check_runner(info("bob"), "manage.up", []).allowed
    assert tokens.check_runner(info("carol"), "manage.up", []).allowed
    assert not tokens.check_runner(info("carol"), "jobs.list_jobs", []).allowed
    assert not tokens.check_runner(info("mallory"), "manage.up", []).allowed
    assert tokens.check_wheel(info("bob"), "key.list_all", [], {}).allowed


def test_calls_are_bounded_and_logins_more_so(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from raetsalt.api import lowcalls

    opts = {"sock_dir": str(tmp_path), "cachedir": str(tmp_path), "pki_dir": str(tmp_path)}
    answers: list[tuple[list[bytes], object]] = []
    calls = lowcalls.LowCalls(opts, lambda identity, value: answers.append((identity, value)))
    release = threading.Event()
    started = threading.Semaphore(0)

    def held(self: object, identity: list[bytes], cmd: str, load: dict[str, object],
             credentials: dict[str, object], user: str) -> None:
        started.release()
        release.wait(30)
        self._slots.release()  # type: ignore[attr-defined]
        if "eauth" in credentials:
            self._logins.release()  # type: ignore[attr-defined]

    eauth = {"eauth": "file", "username": "u", "password": "p"}
    monkeypatch.setattr(lowcalls.LowCalls, "_run", held)
    try:
        took = [calls.submit([b"i"], "wheel", {}, dict(eauth), "")
                for _ in range(lowcalls.MAX_LOGINS + 2)]
        assert took == [True] * lowcalls.MAX_LOGINS + [False, False]
        more = [calls.submit([b"i"], "wheel", {}, {}, "root")
                for _ in range(lowcalls.MAX_CALLS)]
        assert more.count(True) == lowcalls.MAX_CALLS - lowcalls.MAX_LOGINS
        assert not calls.submit([b"i"], "runner", {}, {}, "root")
    finally:
        release.set()
        for _ in range(lowcalls.MAX_CALLS):
            started.acquire(timeout=30)
        calls.close()
