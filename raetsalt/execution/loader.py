"""Finding and calling execution functions.

Convention for your own modules (the minion's ``module_dirs``): every ``NAME.py`` file in
those directories is a module ``NAME`` (or the value of its ``__virtualname__``); every
public function in it (defined there, name not starting with ``_``) becomes ``NAME.func``
and its docstring is what ``sys.doc`` shows.  A function that needs to know about the
minion declares a keyword-only parameter ``ctx`` and receives a ``Context`` (config,
grains, the job id, event firing).  Your modules override built-in ones of the same name,
as in Salt.  A module that fails to import is skipped: a warning names the file and the
error, ``Loader.errors`` keeps it, ``sys.list_modules`` lists it as not loaded, and calling
one of its functions answers as Salt does (``'NAME' __virtual__ returned False: <error>``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import pkgutil
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from raetsalt.errors import RaetSaltError

log = logging.getLogger(__name__)


_INSTANT = "__raetsalt_instant__"

F = TypeVar("F", bound=Callable[..., Any])


def instant(func: F) -> F:
    """Mark an execution function as instant: it answers from its arguments alone, at
    once, with no I/O and no side effect (``test.ping``).  The minion runs such a job in
    its own process rather than forking a job process for it (when no returner is asked
    for): the answer is the same, without a fork per job."""
    setattr(func, _INSTANT, True)
    return func


class UnknownFunction(RaetSaltError):
    """The function is not available on this minion (Salt: "'x.y' is not available.")."""


class InvalidArguments(RaetSaltError):
    """The arguments do not fit the function's signature."""


class CommandExecutionError(RaetSaltError):
    """A function's expected failure (Salt's): the return is ``'ERROR: <message>'`` with
    retcode 1, without a traceback."""


@dataclass
class Context:
    """What a running execution function may know and do besides its arguments."""

    opts: dict[str, Any]
    grains: dict[str, Any]
    jid: str = ""
    loader: Loader | None = None
    fire_event: Callable[[str, Any], bool] = lambda tag, data: False
    """Fire on the minion's own bus."""
    fire_master: Callable[[str, Any], bool] = lambda tag, data: False
    """Fire on the master's bus (forwarded over the road)."""
    jobs: Callable[[], list[dict[str, Any]]] = lambda: []
    """The jobs running on this minion (``saltutil.running``)."""
    kill_job: Callable[[str], bool] = lambda jid: False
    save_grains: Callable[[Mapping[str, Any]], None] = lambda grains: None
    """Persist grains set by ``grains.setval``."""
    master_client: Callable[[], Any] | None = None
    """Opens a ``raetsalt.drivers.laneclient.CommandClient`` to this minion's daemon, which
    relays ``publish``/``runner`` requests to the master (``publish.*``); None when
    there is no master (``raetsalt-call --local``)."""
    retcode: int = 0
    """A function sets this to report failure without raising (Salt's retcode)."""
    extras: dict[str, Any] = field(default_factory=dict)


class Loader:
    """The execution functions of one minion."""

    def __init__(self, module_dirs: Iterable[str | Path] = ()) -> None:
        self.functions: dict[str, Callable[..., Any]] = {}
        self.errors: dict[str, str] = {}
        """File -> why it could not be imported."""
        self.missing: dict[str, str] = {}
        """Module name -> why it is not loaded (the exception's text, as Salt keeps it)."""
        from raetsalt.execution import modules as builtin

        for info in sorted(pkgutil.iter_modules(builtin.__path__), key=lambda i: i.name):
            self._register(importlib.import_module(f"{builtin.__name__}.{info.name}"), info.name)
        for directory in module_dirs:
            for path in sorted(Path(directory).glob("*.py")):
                self._load_file(path)

    def _load_file(self, path: Path) -> None:
        name = f"raetsalt_ext_{path.stem}"
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError("not a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - a user's broken module must not stop the minion
            sys.modules.pop(name, None)
            self.errors[str(path)] = f"{type(exc).__name__}: {exc}"
            self.missing[path.stem] = str(exc)
            log.warning("custom module %s not loaded: %s", path, self.errors[str(path)])
            return
        self.missing.pop(path.stem, None)
        self._register(module, path.stem)

    def _register(self, module: ModuleType, name: str) -> None:
        virtual = getattr(module, "__virtualname__", name)
        for key in [k for k in self.functions if k.startswith(virtual + ".")]:
            del self.functions[key]  # a user module replaces the built-in one entirely
        for name, obj in vars(module).items():
            if (
                inspect.isfunction(obj)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                self.functions[f"{virtual}.{name}"] = obj

    def is_instant(self, fun: str) -> bool:
        """``fun`` is a loaded function marked ``instant`` (a module of the minion's own
        that replaces a built-in one loses the built-in marks)."""
        return getattr(self.functions.get(fun), _INSTANT, False) is True

    def modules(self) -> list[str]:
        return sorted({name.split(".", 1)[0] for name in self.functions})

    def call(self, fun: str, args: list[Any], kwargs: dict[str, Any], ctx: Context) -> Any:
        """Call ``fun``; raises ``UnknownFunction`` or ``InvalidArguments``, and lets the
        function's own exceptions through (the caller turns them into a failed return)."""
        func = self.functions.get(fun)
        if func is None:
            module = fun.split(".", 1)[0]
            if module in self.missing and module not in self.modules():
                raise UnknownFunction(
                    f"'{module}' __virtual__ returned False: {self.missing[module]}")
            raise UnknownFunction(f"'{fun}' is not available.")
        signature = inspect.signature(func)
        params = signature.parameters
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
        call_kwargs = {
            k: v for k, v in kwargs.items() if takes_kwargs or not k.startswith("__pub_")
        }
        if "ctx" in params:
            call_kwargs["ctx"] = ctx
        try:
            signature.bind(*args, **call_kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"Passed invalid arguments to {fun}: {exc}") from None
        return func(*args, **call_kwargs)
