"""The loader and the built-in execution modules."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from raetsalt import __version__
from raetsalt.execution.loader import (
    CommandExecutionError,
    Context,
    InvalidArguments,
    Loader,
    UnknownFunction,
)


@pytest.fixture(scope="module")
def loader() -> Loader:
    return Loader()


def ctx(loader: Loader, **grains: Any) -> Context:
    return Context(
        opts={"id": "m1"},
        grains={"id": "m1", "os": "Debian", "roles": ["web", "db"], "a": {"b": {"c": 1}}, **grains},
        loader=loader,
    )


def call(
    loader: Loader, fun: str, *args: Any, context: Context | None = None, **kwargs: Any
) -> Any:
    return loader.call(fun, list(args), kwargs, context or ctx(loader))


def test_required_functions_exist(loader: Loader) -> None:
    required = """test.ping test.version test.echo test.sleep test.arg test.kwarg test.fib
    test.exception cmd.run cmd.run_all cmd.retcode grains.items grains.item grains.get grains.ls
    grains.setval sys.list_functions sys.list_modules sys.doc event.fire event.fire_master
    event.send saltutil.find_job saltutil.running saltutil.kill_job""".split()
    missing = [f for f in required if f not in loader.functions]
    assert not missing


def test_test_module(loader: Loader) -> None:
    assert call(loader, "test.ping") is True
    assert call(loader, "test.version") == __version__
    assert call(loader, "test.echo", "hi") == "hi"
    assert call(loader, "test.arg", 1, "a", x=2, __pub_fun="test.arg") == {
        "args": [1, "a"],
        "kwargs": {"x": 2, "__pub_fun": "test.arg"},
    }
    assert call(loader, "test.kwarg", a=1) == {"a": 1}
    assert call(loader, "test.fib", 10)[0] == 55
    with pytest.raises(Exception, match="boom"):
        call(loader, "test.exception", "boom")


def test_unknown_function_and_bad_arguments(loader: Loader) -> None:
    with pytest.raises(UnknownFunction, match="'nope.x' is not available."):
        call(loader, "nope.x")
    with pytest.raises(InvalidArguments, match="test.echo"):
        call(loader, "test.echo")
    # __pub_ data is dropped for functions without **kwargs instead of breaking them
    assert call(loader, "test.echo", "x", __pub_jid="1") == "x"


def test_cmd_module_sets_retcode(loader: Loader, tmp_path: Path) -> None:
    context = ctx(loader)
    assert call(loader, "cmd.run", "echo out; echo err >&2", context=context) == "out\nerr"
    assert context.retcode == 0
    result = call(loader, "cmd.run_all", "exit 3", context=context)
    assert result["retcode"] == 3 and result["stdout"] == "" and context.retcode == 3
    assert call(loader, "cmd.retcode", "exit 4") == 4
    assert call(loader, "cmd.run", "pwd", cwd=str(tmp_path)) == str(tmp_path)
    assert call(loader, "cmd.run", "echo $X", env={"X": "y"}) == "y"


@pytest.mark.parametrize(
    ("args", "kwargs", "fragment"),
    [
        ((["id"],), {}, "cmd must be a non-empty string, not list"),
        (("",), {}, "cmd must be a non-empty string"),
        (("echo x",), {"python_shell": "False"}, "python_shell must be True or False, not str"),
        (("echo x",), {"python_shell": 0}, "python_shell must be True or False"),
        (("echo x",), {"cwd": ["/"]}, "cwd must be a path string"),
        (("echo x",), {"env": "PATH=/tmp"}, "env must be a mapping"),
        (("echo x",), {"env": {"PATH": ["/tmp"]}}, "env entries must map names to text"),
        (("echo x",), {"env": {"X": "a\0b"}}, "NUL"),
        (("echo x",), {"timeout": "5"}, "timeout must be a positive number"),
        (("echo x",), {"timeout": -1}, "timeout must be a positive number"),
        (("echo 'x",), {"python_shell": False}, "cannot split"),
    ],
)
def test_cmd_arguments_are_never_coerced(loader: Loader, args: tuple[Any, ...],
                                         kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(CommandExecutionError, match=fragment):
        call(loader, "cmd.run", *args, **kwargs)


@pytest.mark.parametrize("name", ["runas", "shell", "stdin", "umask", "__pub_user"])
def test_cmd_keyword_arguments_raetsalt_lacks_are_refused(loader: Loader, name: str) -> None:
    if name.startswith("__pub_"):  # the loader drops the master's __pub_* for **kwargs-less
        assert call(loader, "cmd.run", "echo ok", **{name: "x"}) == "ok"
        return
    with pytest.raises(InvalidArguments):
        call(loader, "cmd.run", "echo ok", **{name: "root"})


def test_cmd_without_a_shell_splits_like_a_shell(loader: Loader) -> None:
    assert call(loader, "cmd.run", "echo 'a  b'", python_shell=False) == "a  b"
    assert call(loader, "cmd.run", "echo a; id", python_shell=False) == "a; id"


def test_grains_module(loader: Loader) -> None:
    saved: list[dict[str, Any]] = []
    context = ctx(loader)
    context.save_grains = lambda g: saved.append(dict(g))
    assert call(loader, "grains.item", "os", "nope", context=context) == {
        "os": "Debian",
        "nope": "",
    }
    assert call(loader, "grains.get", "a:b:c", context=context) == 1
    assert call(loader, "grains.get", "roles:1", context=context) == "db"
    assert call(loader, "grains.get", "a:x", "dflt", context=context) == "dflt"
    assert call(loader, "grains.ls", context=context) == ["a", "id", "os", "roles"]
    assert call(loader, "grains.setval", "color", "blue", context=context) == {"color": "blue"}
    assert context.grains["color"] == "blue" and saved == [{"color": "blue"}]


def test_sys_module(loader: Loader) -> None:
    assert "test" in call(loader, "sys.list_modules") and "cmd" in call(loader, "sys.list_modules")
    assert call(loader, "sys.list_functions", "grains") == [
        "grains.get",
        "grains.item",
        "grains.items",
        "grains.ls",
        "grains.setval",
    ]
    docs = call(loader, "sys.doc", "test.ping")
    assert list(docs) == ["test.ping"] and "True" in docs["test.ping"]


def test_event_and_saltutil_modules(loader: Loader) -> None:
    fired: list[tuple[str, Any]] = []
    context = ctx(loader)
    context.fire_event = lambda tag, data: fired.append(("local", tag, data)) or True  # type: ignore[func-returns-value]
    context.fire_master = lambda tag, data: fired.append(("master", tag, data)) or True  # type: ignore[func-returns-value]
    context.jobs = lambda: [{"jid": "20260101", "fun": "test.sleep"}]
    assert call(loader, "event.fire", {"a": 1}, "my/tag", context=context)
    assert call(loader, "event.fire_master", {"b": 2}, "up/tag", context=context)
    assert call(loader, "event.send", "s/tag", {"c": 3}, extra=4, context=context)
    assert fired == [
        ("local", "my/tag", {"a": 1}),
        ("master", "up/tag", {"b": 2}),
        ("master", "s/tag", {"c": 3, "extra": 4}),
    ]
    assert call(loader, "saltutil.find_job", "20260101", context=context)["fun"] == "test.sleep"
    assert call(loader, "saltutil.find_job", "1", context=context) == {}


def test_user_modules_from_module_dirs(tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text(
        textwrap.dedent('''
        def world(name="world", *, ctx):
            """Greet someone from this minion."""
            return f"hello {name} from {ctx.opts['id']}"
        def _private():
            return 1
    ''')
    )
    (tmp_path / "mytest.py").write_text(
        '__virtualname__ = "test"\ndef ping():\n    return "custom"\n'
    )
    (tmp_path / "broken.py").write_text("this is not python\n")
    loader = Loader([tmp_path])
    assert call(loader, "hello.world", "you") == "hello you from m1"
    assert "hello._private" not in loader.functions
    assert call(loader, "test.ping") == "custom" and "test.echo" not in loader.functions
    assert any("broken.py" in path for path in loader.errors)
    assert not loader.is_instant("test.ping")  # a replaced module loses the marks


def test_instant_functions(loader: Loader) -> None:
    """Only marked functions run in the minion's own process (no job process)."""
    assert [f for f in sorted(loader.functions) if loader.is_instant(f)] == [
        "test.echo", "test.ping", "test.version"]
    assert not loader.is_instant("test.ping,test.echo")
    assert not loader.is_instant("nope.nothing")




def test_a_module_that_fails_to_import_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "broken.py").write_text("import nonexistent_mod\ndef f():\n    return 1\n")
    loader = Loader([tmp_path])
    assert f"custom module {tmp_path / 'broken.py'} not loaded: ModuleNotFoundError: " \
        "No module named 'nonexistent_mod'" in caplog.text
    modules = call(loader, "sys.list_modules")
    assert "broken (not loaded: No module named 'nonexistent_mod')" in modules
    assert "test" in modules
    # calling it says why, in Salt's words
    with pytest.raises(UnknownFunction, match="^'broken' __virtual__ returned False: No module "
                                              "named 'nonexistent_mod'$"):
        loader.call("broken.f", [], {}, Context(opts={}, grains={}))
    with pytest.raises(UnknownFunction, match="^'nope.f' is not available.$"):
        loader.call("nope.f", [], {}, Context(opts={}, grains={}))
