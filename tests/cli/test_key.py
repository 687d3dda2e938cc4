"""raetsalt-key: salt-key's texts, formats and exit codes, plus the documented improvements."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from raetsalt.cli import key as keycli
from raetsalt.config import load_node_config
from raetsalt.crypto import KeyPair, Signer
from raetsalt.keep.records import Acceptance, AutoMode, LocalRecord, fingerprint
from raetsalt.keep.store import FileKeep
from raetsalt.paths import keep_dir

SCRIPT = Path(sys.executable).with_name("raetsalt-key")


def _pair() -> tuple[str, str]:
    return Signer.generate().verify_key.hex(), KeyPair.generate().public.hex()


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    confdir = tmp_path / "conf"
    confdir.mkdir()
    (confdir / "master").write_text(f"root_dir: {tmp_path / 'root'}\n")
    return confdir


@pytest.fixture
def keep(conf: Path) -> FileKeep:
    """web1, web2, db1 unaccepted; acc1 accepted with a denied second key; rej1 rejected."""
    k = FileKeep(keep_dir(load_node_config(conf, "master")), durable=False)
    for role in ("web1", "web2", "db1", "acc1", "rej1"):
        k.status_role(role, *_pair(), AutoMode.NEVER)
    k.accept_role("acc1")
    k.reject_role("rej1")
    # a rebuilt acc1 joins with new keys: the keep records them as denied
    assert k.status_role("acc1", *_pair(), AutoMode.NEVER) is Acceptance.REJECTED
    return k


def run(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    conf: Path | None,
    *args: str,
    stdin: str | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    argv = (["-c", str(conf)] if conf is not None else []) + list(args)
    code = keycli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def state(k: FileKeep) -> dict[str, list[str]]:
    roles = k.list_roles()
    return {
        "acc": [r.role for r in roles if r.acceptance is Acceptance.ACCEPTED],
        "pre": [r.role for r in roles if r.acceptance is Acceptance.PENDING],
        "rej": [r.role for r in roles if r.acceptance is Acceptance.REJECTED],
        "den": sorted(k.list_denied()),
    }


# --------------------------------------------------------------------------- listing

LISTING = """\
Accepted Keys:
acc1
Denied Keys:
acc1
Unaccepted Keys:
db1
web1
web2
Rejected Keys:
rej1
"""


def test_list_all_default_text(capsys, monkeypatch, conf, keep):
    for flags in ((), ("-L",), ("-l", "all"), ("--list", "all")):
        code, out, err = run(capsys, monkeypatch, conf, *flags)
        assert (code, out, err) == (0, LISTING, "")


def test_list_all_json_is_salts_dict(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "json")
    assert code == 0
    assert list(json.loads(out).items()) == [
        ("minions_pre", ["db1", "web1", "web2"]),
        ("minions_rejected", ["rej1"]),
        ("minions", ["acc1"]),
        ("minions_denied", ["acc1"]),
    ]
    assert out.startswith('{\n    "minions_pre": [\n        "db1",')


def test_list_yaml_nested_txt(capsys, monkeypatch, conf, keep):
    _, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "yaml")
    assert yaml.safe_load(out)["minions_denied"] == ["acc1"]
    assert out.startswith("minions:\n- acc1\nminions_denied:\n- acc1\n")
    _, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "nested")
    assert out.startswith("minions:\n    - acc1\nminions_denied:\n    - acc1\nminions_pre:\n")
    _, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "txt")
    assert out == (
        "minions_pre: ['db1', 'web1', 'web2']\nminions_rejected: ['rej1']\n"
        "minions: ['acc1']\nminions_denied: ['acc1']\n"
    )


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("acc", "Accepted Keys:\nacc1\n"),
        ("accepted", "Accepted Keys:\nacc1\n"),
        ("un", "Unaccepted Keys:\ndb1\nweb1\nweb2\n"),
        ("unaccepted", "Unaccepted Keys:\ndb1\nweb1\nweb2\n"),
        ("pre", "Unaccepted Keys:\ndb1\nweb1\nweb2\n"),
        ("rej", "Rejected Keys:\nrej1\n"),
        ("rejected", "Rejected Keys:\nrej1\n"),
        ("den", "Denied Keys:\nacc1\n"),
        ("denied", "Denied Keys:\nacc1\n"),
    ],
)
def test_list_one_state(capsys, monkeypatch, conf, keep, arg, expected):
    assert run(capsys, monkeypatch, conf, "-l", arg) == (0, expected, "")


def test_empty_sections_still_print_and_colour_only_when_asked(capsys, monkeypatch, conf):
    code, out, _ = run(capsys, monkeypatch, conf, "-L")
    assert (code, out) == (0, "Accepted Keys:\nDenied Keys:\nUnaccepted Keys:\nRejected Keys:\n")
    _, out, _ = run(capsys, monkeypatch, conf, "-l", "acc", "--force-color")
    assert out == "\033[0;1;32mAccepted Keys:\033[0;0m\n"


def test_bad_list_argument_is_a_usage_error(capsys, monkeypatch, conf, keep):
    code, out, err = run(capsys, monkeypatch, conf, "-l", "foo")
    assert code == 64 and out == ""
    assert "'foo' is not a valid argument to '--list'" in err


def test_two_actions_are_a_usage_error(capsys, monkeypatch, conf, keep):
    code, _, err = run(capsys, monkeypatch, conf, "-a", "web1", "-d", "web2")
    assert code == 64 and "not allowed with" in err
    assert state(keep)["pre"] == ["db1", "web1", "web2"]


# --------------------------------------------------------------------------- accept / reject


def test_accept_glob_with_yes(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-a", "web*", "-y")
    assert code == 0
    assert out == (
        "The following keys are going to be accepted:\nUnaccepted Keys:\nweb1\nweb2\n"
        "Key for minion web1 accepted.\nKey for minion web2 accepted.\n"
    )
    assert state(keep)["acc"] == ["acc1", "web1", "web2"]


def test_accept_all_and_comma_list(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-a", "db1,web2", "-y")
    assert code == 0 and "Key for minion db1 accepted.\nKey for minion web2 accepted.\n" in out
    code, out, _ = run(capsys, monkeypatch, conf, "-A", "-y")
    assert code == 0 and out.endswith("Key for minion web1 accepted.\n")
    # -A leaves rejected and denied keys alone, as salt-key does
    assert state(keep) == {"acc": ["acc1", "db1", "web1", "web2"], "pre": [], "rej": ["rej1"],
                           "den": ["acc1"]}


def test_prompt_answered_no_changes_nothing(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-a", "web1", stdin="n\n")
    assert code == 0
    assert out == (
        "The following keys are going to be accepted:\nUnaccepted Keys:\nweb1\nProceed? [n/Y] "
    )
    assert "web1" in state(keep)["pre"]


def test_prompt_default_is_yes_for_accept(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-a", "web1", stdin="\n")
    assert code == 0 and out.endswith("Proceed? [n/Y] Key for minion web1 accepted.\n")
    assert "web1" in state(keep)["acc"]


def test_prompt_default_is_no_for_delete(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-d", "web1", stdin="\n")
    assert code == 0 and out.endswith("Proceed? [N/y] ")
    assert "web1" in state(keep)["pre"]
    code, out, _ = run(capsys, monkeypatch, conf, "-d", "web1", stdin="y\n")
    assert code == 0 and out.endswith("Key for minion web1 deleted.\n")
    assert keep.load_role("web1") is None


def test_prompt_without_stdin_is_not_a_yes(capsys, monkeypatch, conf, keep):
    code, _, err = run(capsys, monkeypatch, conf, "-a", "web1", stdin="")
    assert code == 1 and "use -y" in err
    assert "web1" in state(keep)["pre"]


def test_no_match_messages(capsys, monkeypatch, conf, keep):
    assert run(capsys, monkeypatch, conf, "-a", "zzz") == (
        0, "The key glob 'zzz' does not match any unaccepted keys.\n", "")
    _, out, _ = run(capsys, monkeypatch, conf, "-a", "zzz", "--include-rejected",
                    "--include-denied")
    assert out == "The key glob 'zzz' does not match any unaccepted, rejected or denied keys.\n"
    _, out, _ = run(capsys, monkeypatch, conf, "-r", "acc1")
    assert out == "The key glob 'acc1' does not match any unaccepted keys.\n"
    _, out, _ = run(capsys, monkeypatch, conf, "-d", "zzz")
    assert out == ("The key glob 'zzz' does not match any unaccepted, accepted, rejected or "
                   "denied keys.\n")


def test_reject_and_include_flags(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-r", "web1", "-y")
    assert code == 0 and out.endswith("Key for minion web1 rejected.\n")
    # accepting a rejected key needs --include-rejected
    _, out, _ = run(capsys, monkeypatch, conf, "-a", "web1", "-y")
    assert "does not match" in out and "web1" in state(keep)["rej"]
    _, out, _ = run(capsys, monkeypatch, conf, "-a", "web1", "--include-rejected", "-y")
    assert out.endswith("Key for minion web1 accepted.\n") and "web1" in state(keep)["acc"]
    # rejecting an accepted key needs --include-accepted (or the old --include-all)
    _, out, _ = run(capsys, monkeypatch, conf, "-r", "web1", "--include-all", "-y")
    assert out.endswith("Key for minion web1 rejected.\n") and "web1" in state(keep)["rej"]


def test_reject_all(capsys, monkeypatch, conf, keep):
    code, _, _ = run(capsys, monkeypatch, conf, "-R", "-y")
    assert code == 0
    assert state(keep) == {"acc": ["acc1"], "pre": [], "rej": ["db1", "rej1", "web1", "web2"],
                           "den": ["acc1"]}


# --------------------------------------------------------------------------- denied keys


def test_delete_removes_every_state_and_prints_each_id_once(capsys, monkeypatch, conf, keep):
    code, out, _ = run(capsys, monkeypatch, conf, "-d", "acc1", "-y")
    assert code == 0
    assert out == (
        "The following keys are going to be deleted:\nAccepted Keys:\nacc1\n"
        "Denied Keys:\nacc1\nKey for minion acc1 deleted.\n"
    )
    assert keep.load_role("acc1") is None and "acc1" not in keep.list_denied()


def test_delete_only_the_denied_key(capsys, monkeypatch, conf, keep):
    accepted = keep.load_role("acc1")
    code, out, _ = run(capsys, monkeypatch, conf, "-d", "acc1", "--state", "denied", "-y")
    assert code == 0
    assert out == (
        "The following keys are going to be deleted:\nDenied Keys:\nacc1\n"
        "Key for minion acc1 deleted.\n"
    )
    assert keep.list_denied() == {} and keep.load_role("acc1") == accepted


def test_accept_denied_key_of_rebuilt_minion(capsys, monkeypatch, conf, keep):
    (denied,) = keep.list_denied()["acc1"]
    # plain -a leaves accepted and denied keys alone
    _, out, _ = run(capsys, monkeypatch, conf, "-a", "acc1", "-y")
    assert "does not match any unaccepted keys" in out
    code, out, _ = run(capsys, monkeypatch, conf, "-a", "acc1", "--include-denied", "-y")
    assert code == 0 and out.endswith("Key for minion acc1 accepted.\n")
    record = keep.load_role("acc1")
    assert record is not None and (record.verhex, record.pubhex) == denied
    assert record.acceptance is Acceptance.ACCEPTED and keep.list_denied() == {}


def test_reject_denied_key(capsys, monkeypatch, conf, keep):
    (denied,) = keep.list_denied()["acc1"]
    code, _, _ = run(capsys, monkeypatch, conf, "-r", "acc1", "--state", "den", "-y")
    assert code == 0
    record = keep.load_role("acc1")
    assert record is not None and record.acceptance is Acceptance.REJECTED
    assert (record.verhex, record.pubhex) == denied and keep.list_denied() == {}


def test_accept_refuses_an_id_with_two_candidate_keys(capsys, monkeypatch, conf, keep):
    keep.status_role("web1", *_pair(), AutoMode.NEVER)  # web1: unaccepted + denied
    code, out, err = run(capsys, monkeypatch, conf, "-a", "web1", "--include-denied", "-y")
    assert code == 1 and "2 matching keys (denied, unaccepted)" in err and "accepted." not in out
    assert "web1" in state(keep)["pre"] and "web1" in state(keep)["den"]


def test_state_option_checks(capsys, monkeypatch, conf, keep):
    code, _, err = run(capsys, monkeypatch, conf, "-a", "web1", "--state", "acc")
    assert code == 64 and "cannot be accepted" in err
    code, _, err = run(capsys, monkeypatch, conf, "-d", "web1", "--state", "bogus")
    assert code == 64 and "'bogus' is not a valid argument to '--state'" in err
    code, _, _ = run(capsys, monkeypatch, conf, "-l", "acc", "--state", "den")
    assert code == 64


def test_changed_key_between_listing_and_change_is_left_alone(capsys, monkeypatch, conf, keep):
    # Simulate the master (or another operator) replacing web1 while the question is open.
    def answer(prompt: str) -> str:
        keep.delete_role("web1")
        keep.status_role("web1", *_pair(), AutoMode.NEVER)
        return "y"

    monkeypatch.setattr("builtins.input", answer)
    code, out, err = run(capsys, monkeypatch, conf, "-a", "web1")
    assert code == 1 and "changed since it was listed" in err and "accepted." not in out
    assert "web1" in state(keep)["pre"]


# --------------------------------------------------------------------------- print / finger


def test_finger_one_and_all(capsys, monkeypatch, conf, keep):
    signer = Signer.generate()
    keep.save_local(LocalRecord("master1", "master1", True, 0, signer.seed.hex(),
                                KeyPair.generate().secret.hex(), ("127.0.0.1", 4506), 2))
    acc = keep.load_role("acc1")
    assert acc is not None
    ((den_ver, _),) = keep.list_denied()["acc1"]
    code, out, _ = run(capsys, monkeypatch, conf, "-f", "acc1")
    assert code == 0
    assert out == (
        f"Accepted Keys:\nacc1:  {fingerprint(acc.verhex)}\n"
        f"Denied Keys:\nacc1:  {fingerprint(den_ver)}\n"
    )
    fp = fingerprint(acc.verhex)
    assert len(fp) == 95 and fp.count(":") == 31  # sha256, colon hex, as salt-key
    code, out, _ = run(capsys, monkeypatch, conf, "-F")
    lines = out.splitlines()
    assert lines[:2] == ["Local Keys:", f"master1:  {fingerprint(signer.verify_key.hex())}"]
    assert lines[2:] [0] == "Accepted Keys:" and "Rejected Keys:" in lines
    assert sum(line.startswith(("web", "db")) for line in lines) == 3
    _, out, _ = run(capsys, monkeypatch, conf, "-F", "--out", "json")
    data = json.loads(out)
    assert list(data) == ["minions_pre", "minions_rejected", "minions", "minions_denied", "local"]
    assert data["minions"] == {"acc1": fp}


def test_no_finger_match_prints_nothing(capsys, monkeypatch, conf, keep):
    assert run(capsys, monkeypatch, conf, "-f", "zzz") == (0, "", "")


def test_actions_by_fingerprint(capsys, monkeypatch, conf, keep):
    web2 = keep.load_role("web2")
    assert web2 is not None
    fp = fingerprint(web2.verhex).upper()  # any case
    code, out, _ = run(capsys, monkeypatch, conf, "-a", fp, "-y")
    assert code == 0 and out.endswith("Key for minion web2 accepted.\n")
    assert state(keep)["acc"] == ["acc1", "web2"]
    # the fingerprint of the denied key picks that key only
    ((den_ver, _),) = keep.list_denied()["acc1"]
    code, _, _ = run(capsys, monkeypatch, conf, "-d", "zz" + fingerprint(den_ver)[2:])
    assert code == 64  # colons say "fingerprint", and this one is not hex
    code, out, _ = run(capsys, monkeypatch, conf, "-d", fingerprint(den_ver), "-y")
    assert code == 0 and keep.list_denied() == {} and "acc1" in state(keep)["acc"]


def test_print_public_keys(capsys, monkeypatch, conf, keep):
    rec = keep.load_role("web1")
    assert rec is not None
    code, out, _ = run(capsys, monkeypatch, conf, "-p", "web1")
    assert (code, out) == (0, f"Unaccepted Keys:\nweb1:  pub: {rec.pubhex}\nverify: {rec.verhex}\n")
    _, out, _ = run(capsys, monkeypatch, conf, "-P", "--out", "json")
    assert json.loads(out)["minions_rejected"]["rej1"].startswith("pub: ")


# --------------------------------------------------------------------------- gen-keys, config


def test_gen_keys(capsys, monkeypatch, tmp_path):
    where = tmp_path / "gen"
    code, out, _ = run(capsys, monkeypatch, None, "--gen-keys", "m1", "--gen-keys-dir",
                       str(where))
    assert code == 0
    private = yaml.safe_load((where / "m1.pem").read_text())
    public = yaml.safe_load((where / "m1.pub").read_text())
    assert (where / "m1.pem").stat().st_mode & 0o777 == 0o600
    signer = Signer(bytes.fromhex(private["sighex"]))
    assert public["verhex"] == signer.verify_key.hex()
    assert public["pubhex"] == KeyPair(bytes.fromhex(private["prihex"])).public.hex()
    assert out == f"Local Keys:\nm1.pub:  {fingerprint(public['verhex'])}\n"
    code, _, err = run(capsys, monkeypatch, None, "--gen-keys", "m1", "--gen-keys-dir",
                       str(where))
    assert code == 1 and "already exists" in err
    assert yaml.safe_load((where / "m1.pem").read_text()) == private


def test_bad_config_dir_and_bad_config(capsys, monkeypatch, tmp_path):
    code, out, err = run(capsys, monkeypatch, tmp_path / "nope", "-L")
    assert (code, out) == (1, "") and err.count("\n") == 1 and "does not exist" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "master").write_text("pki_dirr: /x\n")
    code, out, err = run(capsys, monkeypatch, bad, "-L")
    assert (code, out) == (1, "") and err.count("\n") == 1 and "pki_dirr" in err


def test_console_script(conf, keep):
    env = dict(os.environ, RAETSALT_CONFIG_DIR=str(conf))
    done = subprocess.run([str(SCRIPT), "-L"], capture_output=True, text=True, env=env,
                          timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, LISTING)  # default -c from the environment
    done = subprocess.run([str(SCRIPT), "-c", str(conf), "-a", "web1"], input="y\n",
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.endswith("Key for minion web1 accepted.\n")
    done = subprocess.run([str(SCRIPT), "--bogus"], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 64 and "unrecognized arguments: --bogus" in done.stderr


def test_delete_all_and_quiet(capsys, monkeypatch, conf, keep):
    code, out, err = run(capsys, monkeypatch, conf, "-D", "-y", "-q")
    assert (code, out, err) == (0, "", "")
    assert state(keep) == {"acc": [], "pre": [], "rej": [], "den": []}


# --------------------------------------------------------------------------- corrupt files


def _replace(path: Path, text: str) -> None:
    """Put ``text`` in place of ``path`` as editors and tools do: a new file renamed over
    it (the key index notices that; an in-place rewrite is not seen: docs/keys.md)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_key_file_replaced_behind_the_tools_back_is_listed_as_it_now_is(
    capsys, monkeypatch, conf, keep
):
    code, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "json")
    before = json.loads(out)
    assert "web1" in before["minions_pre"] and (keep.dirpath / "keys.index.json").exists()
    path = keep.path_of("role", "web1")
    _replace(path, path.read_text().replace('"pending"', '"rejected"'))
    code, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "json")
    after = json.loads(out)
    assert "web1" in after["minions_rejected"] and "web1" not in after["minions_pre"]
    # A file removed behind its back, too.
    path.unlink()
    code, out, _ = run(capsys, monkeypatch, conf, "-L", "--out", "json")
    assert "web1" not in json.loads(out)["minions_rejected"]


def test_one_corrupt_key_file_is_named_once_and_the_others_listed(
    capsys, monkeypatch, conf, keep
):
    bad = keep.path_of("role", "web2")
    _replace(bad, "{ this is not json")
    code, out, err = run(capsys, monkeypatch, conf, "-L")
    assert code == 0
    assert "web1" in out and "db1" in out and "web2" not in out
    assert err.count(str(bad)) == 1 and "not valid JSON" in err
    # The operator repairs it by deleting the id: the file goes, the others stay.
    code, out, err = run(capsys, monkeypatch, conf, "-d", "web2", "-y")
    assert code == 0 and "Key for minion web2 deleted." in out
    assert not bad.exists()
    code, out, err = run(capsys, monkeypatch, conf, "-L")
    assert (code, err) == (0, "")
