"""The highstate outputter against Salt 3008's own (``salt.output``) as the oracle."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raetsalt.highstate import HighstateOptions, render
from raetsalt.output import render as render_output

FILE_ID = "file_|-/tmp/motd_|-/tmp/motd_|-managed"
CMD_ID = "cmd_|-show_|-cat /tmp/motd_|-run"

APPLIED = {
    FILE_ID: {"__id__": "/tmp/motd", "__run_num__": 0, "__sls__": "web", "name": "/tmp/motd",
              "changes": {"diff": "New file", "mode": "0644"}, "result": True,
              "comment": "File /tmp/motd updated", "duration": 28.934,
              "start_time": "21:20:20.812346"},
    CMD_ID: {"__id__": "show", "__run_num__": 1, "__sls__": "web", "name": "cat /tmp/motd",
             "changes": {"pid": 11161, "retcode": 0, "stderr": "", "stdout": "hello\nworld"},
             "result": True, "comment": 'Command "cat /tmp/motd" run', "duration": 16.376,
             "start_time": "21:20:20.842550"},
}
TESTED = {
    FILE_ID: {**APPLIED[FILE_ID], "changes": {}, "result": True,
              "comment": "The file /tmp/motd is in the correct state"},
    CMD_ID: {**APPLIED[CMD_ID], "changes": {}, "result": None,
             "comment": 'Command "cat /tmp/motd" would have been executed'},
}
FAILED = {
    "pkg_|-nope_|-nope_|-installed": {
        "__id__": "nope", "__run_num__": 0, "__sls__": "bad", "name": "nope", "changes": {},
        "result": False, "comment": "line one\nline two", "duration": 1200.5,
        "start_time": "10:00:00.000000",
        "warnings": ["'foo' is an invalid keyword argument for 'pkg.installed'. " * 3]},
    "test_|-ok_|-ok_|-succeed_with_changes": {
        "__id__": "ok", "__run_num__": 1, "__sls__": "bad", "name": "ok",
        "changes": {"testing": {"old": "Unchanged", "new": "Something pretended to change"}},
        "result": True, "comment": ["a", "b"], "duration": "3 ms",
        "start_time": "10:00:01.000000"},
}

CASES: dict[str, Any] = {
    "applied": {"web1": APPLIED},
    "test_true": {"web1": TESTED},
    "failed_with_warnings": {"db1": FAILED},
    "two_minions": {"web1": APPLIED, "web2": TESTED},
    "compile_errors": {"web1": ["No matching sls found for 'nope' in env 'base'",
                                "Rendering SLS 'base:x' failed: mapping values"]},
    "string": {"web1": "a plain\nstring return"},
    "integer": {"web1": 3},
    "empty": {"web1": {}},
    "no_order": {"web1": {"x_|-a_|-a_|-b": {"result": True, "comment": "c", "changes": {},
                                             "name": "a"}}},
}


def _salt_highstate(data: Any, **options: Any) -> str:
    salt_output = pytest.importorskip("salt.output")
    import salt.config

    opts = copy.deepcopy(salt.config.DEFAULT_MASTER_OPTS)
    opts.update(color=False, **options)
    return str(salt_output.out_format(copy.deepcopy(data), "highstate", opts))


@pytest.mark.parametrize("name", sorted(CASES))
def test_like_salt(name: str) -> None:
    data = CASES[name]
    assert render(copy.deepcopy(data)) == _salt_highstate(data)


@pytest.mark.parametrize("mode", ["terse", "mixed", "changes", "full_id", "terse_id"])
def test_state_output_modes_like_salt(mode: str) -> None:
    data = {"web1": {**APPLIED, **FAILED}}
    mine = render(copy.deepcopy(data), options=HighstateOptions(state_output=mode))
    assert mine == _salt_highstate(data, state_output=mode)


def test_quiet_and_percent_options_like_salt() -> None:
    data = {"web1": {**TESTED, **FAILED}}
    options = HighstateOptions(state_verbose=False, state_output_profile=False,
                               state_output_pct=True)
    assert render(copy.deepcopy(data), options=options) == _salt_highstate(
        data, state_verbose=False, state_output_profile=False, state_output_pct=True)


def test_registered_as_outputter_and_summary_text() -> None:
    text = render_output({"web1": APPLIED}, "highstate")
    assert text.startswith("web1:\n----------\n          ID: /tmp/motd\n")
    assert "Summary for web1\n------------\nSucceeded: 2 (changed=2)\nFailed:    0\n" in text
    assert text.endswith("Total states run:     2\nTotal run time:  45.310 ms")


def test_colour_codes_are_salts() -> None:
    text = render({"web1": FAILED}, color=True)
    assert "\x1b[0;31m----------\x1b[0;0m" in text  # a failed state is red
    assert text.startswith("\x1b[0;31mweb1:\x1b[0;0m")
