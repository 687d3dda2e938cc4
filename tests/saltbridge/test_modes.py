"""Which functions go to Salt's loader."""

from __future__ import annotations

import pytest

from raetsalt.saltbridge.modes import runs_in_salt, uses_salt

NATIVE = {"test.ping", "cmd.run", "grains.items", "publish.publish", "saltutil.running",
          "sys.doc", "saltutil.sync_grains", "saltutil.refresh_grains"}


@pytest.mark.parametrize(("fun", "mode", "salt"), [
    ("test.ping", "auto", False), ("state.apply", "auto", True), ("mymod.hello", "auto", True),
    ("test.ping,state.apply", "auto", True), ("test.ping,cmd.run", "auto", False),
    ("test.ping", "salt", True), ("publish.publish", "salt", False),
    ("event.fire_master", "salt", False), ("saltutil.running", "salt", False),
    ("saltutil.sync_all", "salt", True), ("publish.publish,event.fire", "salt", False),
    ("state.apply", "native", False), ("sys.doc", "auto", True),
    ("saltutil.sync_grains", "auto", True), ("saltutil.refresh_grains", "auto", True),
    ("sys.doc", "native", False),
])
def test_routing(fun: str, mode: str, salt: bool) -> None:
    assert runs_in_salt(fun, mode, NATIVE) is salt


def test_modes_use_salt() -> None:
    assert uses_salt("salt", False) and uses_salt("auto", True)
    assert not uses_salt("auto", False) and not uses_salt("native", True)


def _native() -> dict[str, object]:
    from raetsalt.execution.loader import Loader

    return dict(Loader().functions)


def _kw(**kwargs: object) -> dict[str, object]:
    return {"__kwarg__": True, **kwargs}


@pytest.mark.parametrize(("fun", "arg", "salt"), [
    ("cmd.run", ["id -un"], False),
    ("cmd.run", ["id -un", _kw(cwd="/tmp", python_shell=True)], False),
    ("cmd.run", ["id -un", _kw(runas="nobody")], True),
    ("cmd.run", ["cat", _kw(stdin="x")], True),
    ("cmd.run", ["ls", "/tmp", "input"], True),  # Salt's third positional is stdin
    ("cmd.run", ["ls", _kw(ignore_retcode=True, output_loglevel="quiet", umask="077")], True),
    ("grains.items", [], False),
    ("grains.items", [_kw(sanitize=True)], True),
    ("test.echo", ["hi"], False),
    ("test.arg", [1, _kw(anything=2)], False),
    ("test.version", [], True),
    ("test.ping,cmd.run", [[], ["id", _kw(runas="nobody")]], True),
    ("test.ping,cmd.run", [[], ["id"]], False),
    ("publish.publish", ["*", "test.ping", _kw(nonsense=1)], False),  # pinned
])
def test_a_native_function_runs_only_calls_it_takes_as_salts_would(
        fun: str, arg: list[object], salt: bool) -> None:
    assert runs_in_salt(fun, "auto", _native(), arg) is salt
    assert runs_in_salt(fun, "native", _native(), arg) is False


def test_positional_orders_match_salts() -> None:
    """Oracle: every built-in function's positional parameters follow Salt's own as far
    as ``POSITIONAL_AS_SALT`` says (and all the way for the others); every keyword the
    built-in takes is one Salt's takes."""
    import importlib
    import inspect

    from raetsalt.saltbridge.modes import POSITIONAL_AS_SALT, pinned

    pytest.importorskip("salt.modules.cmdmod")
    files = {"cmd": "cmdmod", "sys": "sysmod"}
    named = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for fun, func in _native().items():
        if pinned(fun):
            continue  # never Salt's
        module, name = fun.split(".", 1)
        salts = getattr(importlib.import_module(f"salt.modules.{files.get(module, module)}"),
                        name)
        ours = [p.name for p in inspect.signature(func).parameters.values() if p.kind in named]
        theirs = [p.name for p in inspect.signature(salts).parameters.values()
                  if p.kind in named]
        common = 0
        while common < min(len(ours), len(theirs)) and ours[common] == theirs[common]:
            common += 1
        if common < len(ours):
            assert POSITIONAL_AS_SALT.get(fun) == common, fun
        else:
            assert fun not in POSITIONAL_AS_SALT, fun
        extra = set(ours) - set(inspect.signature(salts).parameters)
        assert not extra, (fun, extra)
