"""eauth guessing limits: the pure ``LoginLimiter`` with a manual clock, and the master's
``AccessGate`` on a real command socket with a manual ``now`` (logins run in real worker
threads; the test waits on the gate's sockets, never sleeps)."""

from __future__ import annotations

import logging
import os
import selectors
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raetsalt.auth.limits import (
    MAX_PASSWORD,
    LoginLimiter,
    LoginPolicy,
    login_keys,
    plausible_username,
)
from raetsalt.auth.passwords import md5_crypt
from raetsalt.daemon.access import SHARE_MK_TOKEN, AccessGate
from raetsalt.drivers.cmdsock import StreamClient, command_socket_path

POLICY = LoginPolicy(fail_delay=1.0, fail_delay_max=8.0, lockout_after=5, lockout_time=60.0)
FRED = login_keys("fred", 1000)


def test_failures_are_answered_later_and_later() -> None:
    limiter = LoginLimiter(POLICY)
    now, answers = 0.0, []
    for _ in range(4):
        assert limiter.admit(FRED, now) is None
        at = limiter.finish(FRED, False, now, now)
        answers.append(at - now)
        now = at
    assert answers == [1.0, 2.0, 4.0, 8.0]
    assert POLICY.delay(30) == 8.0 and POLICY.delay(10_000) == 8.0  # capped, no overflow


def test_the_answer_time_does_not_depend_on_how_long_the_check_took() -> None:
    limiter = LoginLimiter(POLICY)
    assert limiter.admit(FRED, 10.0) is None
    assert limiter.finish(FRED, False, started=10.0, now=10.7) == 11.0
    other = login_keys("ghost", 1001)
    assert limiter.admit(other, 10.0) is None
    assert limiter.finish(other, False, started=10.0, now=10.01) == 11.0


def test_one_attempt_per_key_at_a_time() -> None:
    limiter = LoginLimiter(POLICY)
    assert limiter.admit(FRED, 0.0) is None
    busy = limiter.admit(login_keys("fred", 2000), 0.0)  # same user, another uid
    assert busy is not None and busy.why == "busy" and busy.key == ("user", "fred")
    busy = limiter.admit(login_keys("alice", 1000), 0.0)  # same uid, another user
    assert busy is not None and busy.key == ("uid", 1000)
    at = limiter.finish(FRED, False, 0.0, 0.1)
    refused = limiter.admit(FRED, at - 0.01)  # its answer is still held back
    assert refused is not None and refused.why == "busy"
    assert limiter.admit(FRED, at) is None


def test_lockout_refuses_even_the_right_password_until_it_expires() -> None:
    limiter = LoginLimiter(POLICY)
    now = 0.0
    for _ in range(POLICY.lockout_after):
        assert limiter.admit(FRED, now) is None
        now = limiter.finish(FRED, False, now, now)
    locked = limiter.admit(FRED, now)
    assert locked is not None and locked.why == "locked"
    assert locked.until == pytest.approx(now - 8.0 + 60.0)  # the last failure + 60 s
    assert limiter.admit(FRED, locked.until - 0.001) is not None
    assert limiter.admit(FRED, locked.until) is None
    limiter.finish(FRED, True, locked.until, locked.until)
    assert limiter.failures(("user", "fred")) == 0


def test_a_success_clears_the_user_but_never_the_uid() -> None:
    limiter = LoginLimiter(POLICY)
    now = 0.0
    for user in ("victim", "mine", "victim", "mine"):
        keys = login_keys(user, 1000)
        assert limiter.admit(keys, now) is None
        now = limiter.finish(keys, user == "mine", now, now)
    assert limiter.failures(("user", "victim")) == 2
    assert limiter.failures(("user", "mine")) == 0
    assert limiter.failures(("uid", 1000)) == 2


def test_the_records_stay_bounded() -> None:
    limiter = LoginLimiter(POLICY, max_records=100)
    for i in range(5000):
        keys = login_keys(f"u{i}", i)
        assert limiter.admit(keys, float(i)) is None
        limiter.finish(keys, False, float(i), float(i))
    assert len(limiter) <= 100


def test_implausible_names() -> None:
    assert plausible_username("fred") and plausible_username("a" * 128)
    for name in ("", "a" * 129, "fred\n", " fred", "\x00"):
        assert not plausible_username(name)


# ------------------------------------------------------------------ the access gate


class Gate:
    """An AccessGate on a real command socket; ``now`` is set by the test."""

    def __init__(self, root: Path, **opts: Any) -> None:
        users = root / "users.htpasswd"
        users.write_text(f"fred:{md5_crypt(b'fred-secret', b'Q8x1Tz0p', b'$apr1$')}\n")
        self.opts = {"cachedir": str(root / "cache"), "sock_dir": str(root / "sock"),
                     "external_auth": {"file": {"^filename": str(users),
                                                "^filetype": "htpasswd",
                                                "fred": ["test.*"]}},
                     "eauth_fail_delay": 1.0, "eauth_fail_delay_max": 8.0,
                     "eauth_lockout_after": 4, "eauth_lockout_time": 30.0, **opts}
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.fired: list[tuple[str, dict[str, Any]]] = []
        self.gate = AccessGate(self.opts, self.opts["sock_dir"], lambda yard: None,
                               lambda yard, body: self.sent.append((yard, body)),
                               lambda tag, data: self.fired.append((tag, data)))
        self.selector = selectors.DefaultSelector()
        self.gate.register(self.selector)
        self.path = command_socket_path(self.opts)
        self.now = 100.0

    def login(self, username: str, password: str) -> StreamClient:
        client = StreamClient(self.path)
        client.request(SHARE_MK_TOKEN, eauth="file", username=username, password=password)
        return client

    def pump(self, until: Callable[[], bool], timeout: float = 5.0) -> None:
        """Poll at the current ``now`` until ``until()`` (real time only bounds it)."""
        deadline = time.monotonic() + timeout
        while True:
            self.gate.poll(self.now)
            if until():
                return
            assert time.monotonic() < deadline, "gate made no progress"
            self.selector.select(0.05)

    def checked(self) -> bool:
        """No login is still running in a worker."""
        return not self.gate._logins

    def started(self) -> bool:
        """A login reached the gate (it may be checked already: workers are quick)."""
        return bool(self.gate._logins or self.gate._deferred or self.sent)

    def answers(self) -> list[dict[str, Any]]:
        out = [body for _yard, body in self.sent]
        self.sent.clear()
        return out

    def close(self) -> None:
        self.gate.unregister(self.selector)
        self.gate.close()


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    g = Gate(tmp_path)
    yield g
    g.close()


def test_a_wrong_password_is_answered_after_the_delay(gate: Gate) -> None:
    client = gate.login("fred", "nope")
    gate.pump(gate.started)
    gate.pump(gate.checked)
    assert gate.answers() == []  # held back
    assert gate.gate.get_timer() == pytest.approx(101.0)
    gate.now = 101.0
    gate.pump(lambda: bool(gate.sent))
    [answer] = gate.answers()
    assert answer["error"] == 'Authentication failure of type "eauth" occurred for user fred.'
    [(tag, data)] = gate.fired
    assert tag == "raetsalt/eauth/fred/failed" and data["failures"] == 1
    client.close()


def test_unknown_users_and_wrong_passwords_answer_at_the_same_moment(gate: Gate) -> None:
    clients = [gate.login("fred", "nope")]
    gate.pump(gate.started)
    gate.now += 0.3  # the check of fred "took" 0.3 s
    gate.pump(gate.checked)
    fred_at = gate.gate.get_timer()
    gate.now = 100.0
    gate.gate.limiter = LoginLimiter(gate.gate.limiter.policy)  # a fresh uid count
    gate.gate._deferred.clear()
    clients.append(gate.login("ghost", "nope"))
    gate.pump(gate.started)
    gate.pump(gate.checked)
    assert gate.gate.get_timer() == fred_at == pytest.approx(101.0)
    for client in clients:
        client.close()


def test_the_right_password_is_answered_at_once(gate: Gate) -> None:
    client = gate.login("fred", "fred-secret")
    gate.pump(lambda: bool(gate.sent))
    [answer] = gate.answers()
    assert isinstance(answer["token"], str) and answer["name"] == "fred"
    client.close()


def test_lockout_then_the_right_password_after_it_expires(
        gate: Gate, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "raetsalt.daemon")
    clients = []
    for _ in range(4):
        clients.append(gate.login("fred", "guess"))
        gate.pump(lambda: not gate.gate._logins and not gate.sent and bool(gate.gate._deferred))
        gate.now = gate.gate.get_timer() or gate.now
        gate.pump(lambda: bool(gate.sent))
        assert "error" in gate.answers()[0]
    clients.append(gate.login("fred", "fred-secret"))
    gate.pump(lambda: bool(gate.gate._deferred))
    assert not gate.gate._logins  # refused without a check...
    assert gate.gate.get_timer() == pytest.approx(gate.now + 1.0)  # ...held back 1 s
    gate.now += 1.0
    gate.pump(lambda: bool(gate.sent))
    [locked] = gate.answers()
    assert "Too many failed logins: try again in" in locked["error"]
    gate.now += 30.0
    clients.append(gate.login("fred", "fred-secret"))
    gate.pump(lambda: bool(gate.sent))
    assert "token" in gate.answers()[0]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("login of fred" in m or "login of 'fred'" in m for m in messages) == 1
    assert sum("locked for 30 s after 4 failed logins" in m for m in messages) == 1
    assert sum("refused: locked" in m for m in messages) == 1
    for client in clients:
        client.close()


def test_a_second_login_of_the_same_user_is_refused_while_one_runs(gate: Gate) -> None:
    first = gate.login("fred", "nope")
    gate.pump(gate.started)
    gate.pump(gate.checked)
    second = gate.login("fred", "fred-secret")
    gate.pump(lambda: len(gate.gate._deferred) == 2)  # fred's failure, then this one
    gate.now = 101.0  # when the first attempt's answer goes out, so does the refusal
    gate.pump(lambda: len(gate.sent) == 2)
    busy = gate.answers()[1]
    assert "Another login of this user or from this user id is under way" in busy["error"]
    first.close()
    second.close()


def test_attempts_pipelined_behind_a_held_back_answer_are_dropped(gate: Gate) -> None:
    client = StreamClient(gate.path)
    for _ in range(50):
        client.request(SHARE_MK_TOKEN, eauth="file", username="fred", password="nope")
    gate.pump(lambda: gate.gate.dropped_logins >= 40)
    gate.pump(gate.checked)
    # The checked attempt's own answer, and at most one refusal, are held back.
    held = gate.gate._deferred
    assert len(held) <= 2 and any(d.error.endswith("for user fred.") for d in held)
    client.close()


def test_hostile_names_and_passwords_are_refused_unchecked(
        gate: Gate, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "raetsalt.daemon")
    client = gate.login("x" * 100_000, "nope")
    gate.pump(lambda: bool(gate.gate._deferred))
    assert not gate.gate._logins  # no backend call
    gate.now = gate.gate.get_timer() or gate.now
    gate.pump(lambda: bool(gate.sent))
    [answer] = gate.answers()
    assert len(answer["error"]) < 200 and "(100000 characters)" in answer["error"]
    assert gate.fired[0][0] == "raetsalt/eauth/-/failed"
    assert all(len(r.getMessage()) < 400 for r in caplog.records)
    client.close()
    gate.now += 60.0  # the uid's failure is forgotten
    client = gate.login("fred", "p" * (MAX_PASSWORD + 1))
    gate.pump(lambda: bool(gate.gate._deferred))
    assert not gate.gate._logins  # refused with no backend call
    client.close()


def test_the_default_policy_allows_a_guesser_a_few_dozen_guesses_an_hour() -> None:
    """An attacker who retries the instant each answer comes (the best it can do: a
    refused attempt is not a guess) against the defaults, for one simulated hour."""
    limiter = LoginLimiter(LoginPolicy())
    now, checked = 0.0, 0
    while now < 3600.0:
        refusal = limiter.admit(FRED, now)
        if refusal is not None:
            now = max(refusal.until, now + 0.001)
            continue
        checked += 1
        now = limiter.finish(FRED, False, now, now)
    print(f"default policy: {checked} checked guesses in an hour ({checked / 3600:.4f}/s)")
    assert checked <= 40  # 2,905 per second before


def test_an_unknown_user_costs_the_same_hashing(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from raetsalt.auth import backends, passwords

    users = tmp_path / "users"
    users.write_text(f"fred:{passwords.sha_crypt(b'x', b'saltsalt', None, 512)}\n")
    conf = {"file": {"^filename": str(users), "^filetype": "htpasswd"}}
    calls: list[str] = []
    real = passwords.verify
    monkeypatch.setattr(passwords, "verify",
                        lambda pw, stored: calls.append(stored) or real(pw, stored))
    assert not backends.authenticate(conf, "file", "fred", "nope").ok
    assert not backends.authenticate(conf, "file", "ghost", "nope").ok
    assert len(calls) == 2 and calls[0] == calls[1]  # ghost hashed against fred's entry


def test_a_relayed_login_counts_against_its_client_not_the_relays_uid() -> None:
    assert login_keys("fred", 1000, "http:10.0.0.9") == (("user", "fred"),
                                                         ("client", "http:10.0.0.9"))
    assert login_keys(None, 1000, "http:10.0.0.9") == (("client", "http:10.0.0.9"),)
    limiter = LoginLimiter(LoginPolicy(lockout_after=2))
    for now in (0.0, 100.0):
        keys = login_keys(f"guess{now}", 1000, "http:10.0.0.9")
        assert limiter.admit(keys, now) is None
        limiter.finish(keys, False, now, now)
    assert limiter.admit(login_keys("ann", 1000, "http:10.0.0.9"), 200.0) is not None
    assert limiter.admit(login_keys("ann", 1000, "http:10.0.0.8"), 200.0) is None


def test_a_command_socket_client_cannot_name_a_relayed_client(gate: Gate) -> None:
    """Only lane clients (root or the master's user) may say whom they relay a login for;
    on the command socket ``login_client`` is ignored and the caller's uid is counted."""
    client = StreamClient(gate.path)
    client.request(SHARE_MK_TOKEN, eauth="file", username="fred", password="nope",
                   login_client="http:10.9.9.9")
    gate.pump(gate.started)
    gate.pump(gate.checked)
    uid = os.geteuid()
    assert gate.gate.limiter.failures(("uid", uid)) == 1
    assert gate.gate.limiter.failures(("client", "http:10.9.9.9")) == 0
    client.close()


def _lane_gate(tmp_path: Path) -> tuple[Gate, Any]:
    """A gate whose lane yard ``relay`` is a socket in sock_dir (root's or the test
    user's: the master's own process, as Salt's request channel is)."""
    import socket

    g = Gate(tmp_path)
    relay = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    os.makedirs(g.opts["sock_dir"], mode=0o700, exist_ok=True)
    path = os.path.join(g.opts["sock_dir"], "master.relay.uxd")
    relay.bind(path)
    g.gate.lane_path = lambda yard: path if yard == "relay" else None
    return g, relay


def test_a_lane_client_of_the_master_publishes_as_the_local_user_it_names(
        tmp_path: Path) -> None:
    from raetsalt import protocol as p

    g, relay = _lane_gate(tmp_path)
    try:
        [ready] = g.gate.from_lane("relay", p.SHARE_PUBLISH, {
            "req": "r1", "as_user": "nobody", "tgt": "*", "fun": "test.ping"}, g.now)
        assert ready.requester.kind == "user" and ready.requester.name == "nobody"
        assert "as_user" not in ready.body
        for share, name in ((p.SHARE_PUBLISH, "no-such-user-here"),
                            (p.SHARE_RUNNER, "nobody"), (p.SHARE_PUBLISH, 7)):
            assert g.gate.from_lane("relay", share, {"req": "r2", "as_user": name}, g.now) == []
            [(_yard, body)] = g.sent
            g.sent.clear()
            assert "may not be acted for here" in body["error"] and body["denied"]
    finally:
        relay.close()
        g.close()


def test_a_command_socket_client_cannot_act_for_another_user(gate: Gate) -> None:
    from raetsalt import protocol as p

    client = StreamClient(gate.path)
    client.request(p.SHARE_PUBLISH, as_user="root", tgt="*", fun="cmd.run", arg=["id"])
    gate.pump(lambda: bool(gate.sent))
    [body] = gate.answers()
    assert "may not be acted for here" in body["error"]
    client.close()


class FakeShared:
    """A cluster's token store in memory: ``remote`` holds tokens another master made
    that this one has not heard of (``fetch`` brings them in)."""

    def __init__(self) -> None:
        self.mirror: dict[str, dict[str, Any]] = {}
        self.remote: dict[str, dict[str, Any]] = {}
        self.waits: list[float] = []
        self.fetched: list[str] = []

    def lookup(self, digest: str, now: float) -> dict[str, Any] | None:
        record = self.mirror.get(digest)
        return dict(record) if record is not None and record["expire"] > now else None

    def revoked(self, digest: str) -> bool:
        return False

    def put(self, digest: str, record: dict[str, Any], wait: float = 0.0) -> bool:
        self.waits.append(wait)
        self.mirror[digest] = record
        return True

    def revoke(self, digest: str, expire: float, wait: float = 0.0) -> bool:
        self.mirror.pop(digest, None)
        return True

    def fetch(self, digest: str, timeout: float) -> None:
        self.fetched.append(digest)
        if digest in self.remote:
            self.mirror[digest] = self.remote.pop(digest)

    def close(self) -> None:
        pass


def test_in_a_cluster_tokens_are_shared_before_the_answer_and_fetched_when_unknown(
        gate: Gate) -> None:
    from raetsalt import protocol as p
    from raetsalt.auth.tokens import digest_of

    shared = FakeShared()
    gate.gate.tokens.shared = shared
    client = gate.login("fred", "fred-secret")
    gate.pump(lambda: bool(gate.sent))
    [answer] = gate.answers()
    assert answer["name"] == "fred" and shared.waits == [3.0]  # waited for the commit
    client.close()
    # a token made on another master a moment ago: read from the cluster, then served
    token = "ab" * 32
    shared.remote[digest_of(token)] = {"name": "ann", "eauth": "file", "groups": [],
                                       "start": 0.0, "expire": time.time() + 60}
    ready: list[Any] = []
    client = StreamClient(gate.path)
    client.request(p.SHARE_PUBLISH, token=token, tgt="*", fun="test.ping")
    deadline = time.monotonic() + 5.0  # a hang detector: the gate answers by itself
    while not ready and time.monotonic() < deadline:
        ready.extend(gate.gate.poll(gate.now))
        gate.selector.select(0.05)
    assert [r.requester.name for r in ready] == ["ann"]
    assert shared.fetched == [digest_of(token)] and gate.sent == []
    # one that no master made: refused once the cluster was asked
    client.request(p.SHARE_PUBLISH, token="cd" * 32, tgt="*", fun="test.ping")
    gate.pump(lambda: bool(gate.sent))
    [answer] = gate.answers()
    assert 'Authentication failure of type "token"' in answer["error"]
    assert shared.fetched == [digest_of(token), digest_of("cd" * 32)]
    client.close()
