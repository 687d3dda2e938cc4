"""The client commands without a master: Salt's command-line reading (target, function,
``-d``, comma commands), exit codes, the version flags on every command, output options,
``--id`` checks and the batch size rule (compared with Salt's own when it is installed)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from raetsalt import __version__
from raetsalt.cli import call as call_cli
from raetsalt.cli import run as run_cli
from raetsalt.cli import salt as salt_cli
from raetsalt.cli._batch import BatchSpecError, batch_size
from raetsalt.cli._common import EX_CONFIG, Printer, add_common

BIN = Path(sys.executable).parent
COMMANDS = ["raetsalt", "raetsalt-call", "raetsalt-run", "raetsalt-key", "raetsalt-master",
            "raetsalt-minion", "raetsalt-event", "raetsalt-road"]


def args_of(*argv: str) -> argparse.Namespace:
    return salt_cli._parser().parse_intermixed_args(list(argv))


def command(*argv: str) -> salt_cli.Command:
    args = args_of(*argv)
    return salt_cli.command_from(args.words, args)


@pytest.mark.parametrize("name", COMMANDS)
def test_version_on_every_command(name: str) -> None:
    done = subprocess.run([str(BIN / name), "--version"], capture_output=True, text=True,
                          timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{name} {__version__}\n", "")


@pytest.mark.parametrize("name", ["raetsalt-call", "raetsalt-key", "raetsalt-master"])
def test_versions_report(name: str) -> None:
    done = subprocess.run([str(BIN / name), "--versions-report"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["Raetsalt Version:", f"      raetsalt: {__version__}"]
    for heading in ("Python Version:", "Dependency Versions:", "System Versions:"):
        assert heading in lines
    assert "        PyNaCl: " in done.stdout and "        system: Linux" in done.stdout


def test_no_target_is_salts_message_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert salt_cli.main([]) == 42
    out, err = capsys.readouterr()
    assert out.startswith("usage: raetsalt [options] '<target>' <function> [arguments]")
    assert err == "\nCannot execute command without defining a target.\n\n"
    assert salt_cli.main(["web*"]) == 42
    assert capsys.readouterr().err == "\nIncomplete options passed.\n\n"


def test_usage_errors_exit_64_as_salts() -> None:
    with pytest.raises(SystemExit) as info:
        args_of("--no-such-flag")
    assert info.value.code == 64
    with pytest.raises(SystemExit) as info:
        salt_cli.main(["-d", "*", "test.ping", "extra"])
    assert info.value.code == 64


def test_doc_reads_as_salt() -> None:
    assert command("-d") == salt_cli.Command("*", "sys.doc", [])
    assert command("*", "-d", "test.ping") == salt_cli.Command("*", "sys.doc", ["test.ping"])
    assert command("web1", "-d") == salt_cli.Command("web1", "sys.doc", [])


def test_arguments_are_typed_and_no_parse_keeps_text() -> None:
    got = command("*", "test.arg", "1", "'2'", "x=017", "y=[a]", "--no-parse", "y")
    assert got.arg == [1, "2", {"__kwarg__": True, "x": 17, "y": "[a]"}]
    assert command("-L", "a,b", "test.ping").tgt == ["a", "b"]
    assert command("-L", "a b", "test.ping").tgt == ["a", "b"]


def test_comma_commands_split_their_arguments_as_salt() -> None:
    # standalone separators (the new style)
    assert command("*", "test.echo,test.arg", "hi", ",", "a", "b=1").arg == [
        ["hi"], ["a", {"__kwarg__": True, "b": 1}]]
    assert command("*", "test.ping,test.echo", ",", "x").arg == [[], ["x"]]
    # separators inside the words (the old style) and another separator
    assert command("*", "test.echo,test.echo", "a,b").arg == [["a"], ["b"]]
    assert command("*", "test.echo,test.echo", "a", "+", "b", "--args-separator", "+").arg == [
        ["a"], ["b"]]
    with pytest.raises(salt_cli._Usage, match="without defining all arguments"):
        command("*", "test.echo,test.echo,test.ping", "a,b")
    with pytest.raises(salt_cli._Usage, match="more arguments than commands"):
        command("*", "test.echo,test.echo", "a,b,c")


def test_a_bad_config_exits_78(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "master").write_text("file_rots: {}\n")
    with pytest.raises(SystemExit) as info:
        salt_cli.main(["-c", str(tmp_path), "*", "test.ping"])
    assert info.value.code == EX_CONFIG
    assert "unknown key 'file_rots' (did you mean 'file_roots'?)" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["../x", "web 1", "a/b", ""])
def test_call_checks_the_id_like_the_config(tmp_path: Path, bad: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "minion").write_text(f"root_dir: {tmp_path}\n")
    assert call_cli.main(["-c", str(tmp_path), "--local", "--id", bad, "test.ping"]) == 78
    assert capsys.readouterr().err.startswith(f"raetsalt-call: --id {bad!r} is not a valid id")


def test_call_local_doc_and_grains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "minion").write_text(f"root_dir: {tmp_path}\nid: m1\n")
    assert call_cli.main(["-c", str(tmp_path), "-d", "test.p"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("test.ping:\n") and "test.echo" not in out
    assert call_cli.main(["-c", str(tmp_path), "-g", "--out", "json"]) == 0
    assert '"id": "m1"' in capsys.readouterr().out


def test_run_doc_lists_the_runners(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli.main(["-d", "manage"]) == 0
    out = capsys.readouterr().out
    assert "manage.up:\n" in out and "jobs." not in out


def printer(*argv: str) -> Printer:
    parser = argparse.ArgumentParser()
    add_common(parser)
    return Printer(parser.parse_args(list(argv)), "test")


def test_out_file_is_emptied_then_appended_to(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    first = printer("--out-file", str(path), "--out", "json", "--out-indent", "-1")
    first.show({"m1": True})
    first.show({"m2": [1]})
    assert path.read_text() == '{"m1": true}\n{"m2": [1]}\n'
    assert os.stat(path).st_mode & 0o777 == 0o640  # emptied, not replaced
    printer("--out-file", str(path), "--out-file-append").show({"m3": "x"})
    assert path.read_text().endswith("m3:\n    x\n")
    assert capsys.readouterr().out == ""


def test_output_options(capsys: pytest.CaptureFixture[str]) -> None:
    printer("--out", "raw").show("")  # Salt prints nothing at all for empty output
    printer("--out", "text").show({"m": "a\nb"})  # Salt's other name for txt
    printer("--out", "table").show({"m": 1})  # not ours: nested, with Salt's error line
    printer("--force-color").show({"m": 1})
    out, err = capsys.readouterr()
    assert out == "m: a\nm: b\nm:\n    1\n\x1b[0;36mm\x1b[0;0m:\n    \x1b[0;1;33m1\x1b[0;0m\n"
    assert err == "[ERROR   ] Invalid outputter table specified, fall back to nested\n"


@pytest.mark.parametrize(("spec", "minions", "size"), [
    ("1", 3, 1), ("2", 3, 2), ("10", 3, 10), ("50%", 3, 1), ("10%", 3, 1), ("34%", 3, 1),
    ("67%", 3, 2), ("100%", 7, 7), ("0", 5, 1), ("25%", 8, 2), ("12.5%", 8, 1),
])
def test_batch_size(spec: str, minions: int, size: int) -> None:
    assert batch_size(spec, minions) == size
    state = pytest.importorskip("salt.utils.batch_state", reason="Salt is not installed")
    assert state.get_batch_size(spec, minions) == size


@pytest.mark.parametrize("spec", ["x", "1.5", "%", "-3", "nan%", "1e309%", "1" * 5000])
def test_bad_batch_specs(spec: str) -> None:
    with pytest.raises(BatchSpecError):
        batch_size(spec, 4)




def test_an_out_file_that_cannot_be_written_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        printer("--out-file", str(tmp_path / "no" / "such" / "dir")).show({"m": 1})
    assert info.value.code == 1
    assert "cannot write" in capsys.readouterr().err


class FakeMaster:
    """A master that acknowledges every publication at once and has each minion return
    ``delay`` seconds later (test.ping returns True for the minions in ``up``)."""

    node = "master"

    def __init__(self, up: list[str], delay: float = 0.0) -> None:
        self.up, self.delay = up, delay
        self.published: list[tuple[float, Any, str]] = []
        self.queue: list[tuple[float, dict[str, Any]]] = []
        self.batching: list[dict[str, Any]] = []
        self.counter = 0

    def request(self, share: str, *, send_timeout: float = 5.0, **fields: Any) -> str:
        from raetsalt import protocol as p

        self.counter += 1
        req = f"r{self.counter}"
        now = time.monotonic()
        tgt, fun = fields["tgt"], fields["fun"]
        minions = [m for m in self.up] if tgt == "*" else [m for m in tgt if m in self.up]
        self.published.append((now, tgt, fun))
        self.batching.append({k: fields[k] for k in ("batch", "jid") if k in fields})
        jid = fields.get("jid") or f"2026{self.counter:016d}"  # a batch's: the one given
        self.queue.append((now, p.lane_reply(None, "cl", p.SHARE_PUB_ACK, req=req,
                                             jid=jid, minions=minions,
                                             missing=[], not_connected=[])))
        for minion in minions:
            ret = {"return": True if fun == "test.ping" else minion, "retcode": 0}
            self.queue.append((now + (0 if fun == "test.ping" else self.delay),
                               p.lane_reply(None, "cl", p.SHARE_JOB_RET, req=req,
                                            returns=[[minion, ret]])))
        return req

    def receive(self, timeout: float | None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + (timeout or 0)
        while True:
            now = time.monotonic()
            ready = [body for when, body in self.queue if when <= now]
            if ready or now >= deadline:
                self.queue = [(w, b) for w, b in self.queue if w > now]
                return ready
            time.sleep(min(0.005, deadline - now))  # a fake socket's wait


def test_batch_keeps_n_running_and_waits_before_reusing_a_slot(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from raetsalt.cli._batch import run_batch

    master = FakeMaster(["m1", "m2", "m3", "m4"], delay=0.05)
    args = args_of("*", "test.echo", "-b", "2", "--batch-wait", "0.2", "--out", "json",
                   "--out-indent", "-1")
    code = run_batch(master, args, salt_cli.command_from(args.words, args), 5.0, {},
                     printer("--out", "json", "--out-indent", "-1"))
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("Executing")] == [
        "Executing run on ['m1', 'm2']", "Executing run on ['m3', 'm4']"]
    [(_, _, ping), (first, _, _), (second, tgt, _)] = master.published
    assert ping == "test.ping" and tgt == ["m3", "m4"]
    # both slots free 0.2 s after their minions returned (0.05 s after publication)
    assert second - first >= 0.25
    # Salt 3008's blocks: the retcode and the jid of the minion's job beside its return
    docs = [json.loads(line) for line in out if line.startswith("{")]
    assert [list(doc)[:2] for doc in docs] == [["retcode", "jid"]] * 4
    # As Salt's batch: one job for the whole run, the first sub-batch's jid.
    assert master.batching == [{}, {"batch": True}, {"jid": "20260000000000000002"}]
    assert {doc["jid"] for doc in docs} == {"20260000000000000002"}
    assert sorted((list(doc)[2], doc[list(doc)[2]], doc["retcode"]) for doc in docs) == [
        ("m1", "m1", 0), ("m2", "m2", 0), ("m3", "m3", 0), ("m4", "m4", 0)]


def test_batch_names_the_minions_that_did_not_answer_the_ping(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from raetsalt.cli._batch import run_batch

    master = FakeMaster(["m1"])
    args = args_of("-L", "m1,m2", "test.echo", "-b", "1")
    command = salt_cli.command_from(args.words, args)

    def ping_with_m2_silent(share: str, **fields: Any) -> str:
        req = FakeMaster.request(master, share, **fields)
        if fields["fun"] == "test.ping":
            ack = next(b for _, b in master.queue if b.get("req") == req and "minions" in b)
            ack["minions"] = ["m1", "m2"]
        return req

    master.request = ping_with_m2_silent  # type: ignore[method-assign]
    # m1 ran it; m2 never did: exit 1 (Salt exits 0)
    assert run_batch(master, args, command, 0.3, {}, printer()) == 1
    out = capsys.readouterr().out
    assert out.startswith("Minion m2 did not respond. No job will be sent.\n")
    assert "Executing run on ['m1']" in out


def test_highstate_settings_come_from_the_config_then_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_common(parser)
    config = {"__salt": {"state_output": "mixed", "state_verbose": False,
                         "state_output_pct": "yes"}}  # (a wrong kind: Salt's default)
    plain = Printer(parser.parse_args([]), "test", config)
    assert (plain.highstate.state_output, plain.highstate.state_verbose) == ("mixed", False)
    assert plain.highstate.state_output_pct is False
    given = Printer(parser.parse_args(["--state-output=terse", "--state_verbose", "true"]),
                    "test", config)
    assert (given.highstate.state_output, given.highstate.state_verbose) == ("terse", True)
    assert Printer(parser.parse_args([]), "test").highstate.state_output == "full"
