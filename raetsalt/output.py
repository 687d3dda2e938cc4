"""Salt's outputters as pure functions: data in, the exact text Salt prints out.

``render(data, fmt)`` gives, byte for byte, what Salt 3008's outputter of that name
prints for ``data`` (``tests/test_output_oracle.py`` compares with Salt itself), without
the final newline: the caller prints it with one, and prints nothing at all when the text
is empty (as Salt does).  For ``test.ping`` returned by ``local``::

    nested  local:\\n    True
    json    {\\n    "local": true\\n}
    yaml    local: true
    txt     local: True
    raw     {'local': True}
    pprint  {'local': True}

What each one does with the options:

* ``color`` (Salt: on when stdout is a terminal, or ``--force-color``) only changes
  ``nested``: Salt's colour codes, cyan keys, green text, bright yellow scalars, red
  structure when ``retcode`` is not 0.  Escape characters inside text values print as
  ``?`` so that a minion cannot drive the terminal;
* ``indent`` is ``--out-indent`` (None when not given): the JSON indent (default 4, a
  negative one puts the document on one line), the YAML indent (a negative one gives
  YAML's flow style on one line), the ``pprint`` indent.  ``nested`` ignores it, as in
  Salt's CLI;
* the text ends without trailing white space (Salt strips it).

Values Salt cannot show are treated as Salt treats them: ``nested`` prints nothing for
undecodable bytes or unknown objects, ``json`` writes their ``repr`` (and ``{}`` when a
key cannot be JSON), ``yaml`` writes ``NULL``.

Outputters of other modules join the table in ``_TABLE`` as ``"module:function"`` text
imported on first use (as ``highstate``, so that module may use ``nested`` from here
without an import circle); such a function takes ``(data, OutputOptions)`` and returns
the text (or None for nothing).
"""

from __future__ import annotations

import importlib
import json
import pprint
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Number
from typing import Any

import yaml

from raetsalt.errors import LocalError

__all__ = ["OUTPUTTERS", "OutputOptions", "colors", "outputter", "render"]


@dataclass(frozen=True, slots=True)
class OutputOptions:
    """What the command line says about output (see the module docstring)."""

    color: bool = False
    indent: int | None = None
    retcode: int = 0
    nested_indent: int = 0
    """Where ``nested`` starts (Salt's ``nested_indent``; the highstate outputter nests
    changes at 14); never from the command line."""
    highstate: Any = None
    """The highstate outputter's settings (``raetsalt.highstate.HighstateOptions``; None:
    Salt's defaults)."""


Outputter = Callable[[Any, OutputOptions], str | None]

# Salt's colour codes (salt.utils.color): "0;" resets first, "1;" is bold/bright.
_COLORS: dict[str, str] = {
    "RED": "\033[0;31m",
    "GREEN": "\033[0;32m",
    "YELLOW": "\033[0;33m",
    "CYAN": "\033[0;36m",
    "LIGHT_RED": "\033[0;1;31m",
    "LIGHT_GREEN": "\033[0;1;32m",
    "LIGHT_YELLOW": "\033[0;1;33m",
    "LIGHT_CYAN": "\033[0;1;36m",
    "ENDC": "\033[0;0m",
}
_NO_COLORS: dict[str, str] = {name: "" for name in _COLORS}


def colors(enabled: bool) -> Mapping[str, str]:
    """Salt's colour table by name (RED, GREEN, ..., ENDC); all empty when disabled."""
    return _COLORS if enabled else _NO_COLORS


# --------------------------------------------------------------------------- nested


class _Nested:
    """Salt's nested layout.

    A mapping prints each key (sorted; keys that do not sort are compared as text) as
    ``key:`` with its value four spaces further in; a mapping below the top level is
    introduced by ``----------``.  A list prints ``- item``; an item that is itself a
    list or mapping is introduced by ``|_`` and shifted two spaces.  Text prints line by
    line, None and booleans with ``str``, other numbers with ``repr``.
    """

    def __init__(self, options: OutputOptions) -> None:
        self.c = colors(options.color)
        self.failed = options.retcode != 0

    def line(self, indent: int, color: str, text: object, prefix: str = "",
             suffix: str = "") -> str:
        return f"{' ' * indent}{color}{prefix}{text}{self.c['ENDC']}{suffix}"

    def emit(self, value: Any, indent: int, prefix: str, out: list[str]) -> None:
        c = self.c
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return  # Salt prints nothing for it
        if value is None or value is True or value is False:
            out.append(self.line(indent, c["LIGHT_YELLOW"], value, prefix))
        elif isinstance(value, Number):
            out.append(self.line(indent, c["LIGHT_YELLOW"], repr(value), prefix))
        elif isinstance(value, str):
            for number, text in enumerate(value.splitlines()):
                lead = prefix if number == 0 else " " * len(prefix)
                out.append(self.line(indent, c["GREEN"], text.replace("\033", "?"), lead))
        elif isinstance(value, list | tuple):
            color = c["RED"] if self.failed else c["GREEN"]
            for item in value:
                if isinstance(item, list | tuple | Mapping):
                    out.append(self.line(indent, color, "|_"))
                    self.emit(item, indent + 2, "" if isinstance(item, Mapping) else "- ", out)
                else:
                    self.emit(item, indent, "- ", out)
        elif isinstance(value, Mapping):
            color = c["RED"] if self.failed else c["CYAN"]
            if indent:
                out.append(self.line(indent, color, "----------"))
            for key, item in _sorted_items(value):
                out.append(self.line(indent, color, key, prefix, ":"))
                self.emit(item, indent + 4, "", out)
        # anything else: Salt prints nothing


def _sorted_items(value: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    if isinstance(value, OrderedDict):
        return list(value.items())
    try:
        return [(key, value[key]) for key in sorted(value)]
    except TypeError:
        as_text = {str(key): item for key, item in value.items()}
        return sorted(as_text.items())


def _nested(data: Any, options: OutputOptions) -> str:
    out: list[str] = []
    _Nested(options).emit(data, options.nested_indent, "", out)
    return "\n".join(out)


# --------------------------------------------------------------------------- json, yaml


def _json(data: Any, options: OutputOptions) -> str:
    indent = options.indent
    width = 4 if indent is None else (indent if indent >= 0 else None)
    try:
        return json.dumps(data, default=repr, indent=width, ensure_ascii=False)
    except TypeError:  # a key JSON cannot have (bytes, a tuple): Salt prints {}
        return "{}"


_DumperBase: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _YamlDumper(_DumperBase):
    """Salt's YAML dumper: libyaml's emitter when there is one; what the safe dumper
    cannot represent is written as ``NULL``."""


def _represent_unknown(dumper: Any, value: Any) -> Any:
    return dumper.represent_scalar("tag:yaml.org,2002:null", "NULL")


def _represent_ordered(dumper: Any, value: OrderedDict[Any, Any]) -> Any:
    return dumper.represent_dict(list(value.items()))


_YamlDumper.add_representer(None, _represent_unknown)
_YamlDumper.add_representer(OrderedDict, _represent_ordered)


def _yaml(data: Any, options: OutputOptions) -> str | None:
    indent = options.indent
    if indent is None:
        style: dict[str, Any] = {"default_flow_style": False}
    elif indent >= 0:
        style = {"default_flow_style": False, "indent": indent}
    else:
        style = {"default_flow_style": True, "indent": 0}
    try:
        text: str = yaml.dump(data, Dumper=_YamlDumper, allow_unicode=True, **style)
    except Exception:  # noqa: BLE001 - Salt prints nothing when the dump fails
        return None
    return text


# --------------------------------------------------------------------------- txt, raw, pprint


def _txt(data: Any, options: OutputOptions) -> str:
    # One "key: line" per line of each value that has lines; others on one line.
    if hasattr(data, "keys"):
        lines: list[str] = []
        for key in data:
            value = data[key]
            if isinstance(value, str | bytes | bytearray):
                lines.extend(f"{key}: {line!s}" for line in value.splitlines())
            else:
                lines.append(f"{key}: {value}")
        return "".join(line + "\n" for line in lines)
    if isinstance(data, str):
        return data + "\n"
    return pprint.pformat(data) + "\n"


def _raw(data: Any, options: OutputOptions) -> str:
    return data if isinstance(data, str) else str(data)


def _pprint(data: Any, options: OutputOptions) -> str:
    if isinstance(data, Exception):
        data = str(data)
    if options.indent is not None and options.indent >= 0:
        return pprint.pformat(data, indent=options.indent)
    return pprint.pformat(data)


# --------------------------------------------------------------------------- the table

_TABLE: dict[str, Outputter | str] = {
    "nested": _nested,
    "json": _json,
    "yaml": _yaml,
    "txt": _txt,
    "raw": _raw,
    "pprint": _pprint,
    # imported on first use: highstate renders its changes with ``nested`` from here
    "highstate": "raetsalt.highstate:outputter",
}

OUTPUTTERS: tuple[str, ...] = tuple(_TABLE)
"""The names ``--out`` accepts (Salt's ``text`` is taken as ``txt``)."""

ALIASES: dict[str, str] = {"text": "txt"}


def outputter(fmt: str) -> Outputter:
    """The outputter called ``fmt``; ``LocalError`` for a name that is not in the table."""
    name = ALIASES.get(fmt, fmt)
    entry = _TABLE.get(name)
    if entry is None:
        raise LocalError(f"unknown outputter {fmt!r}; choose one of {', '.join(OUTPUTTERS)}")
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        function: Outputter = getattr(importlib.import_module(module), attribute)
        _TABLE[name] = entry = function
    return entry


def render(
    data: Any,
    fmt: str = "nested",
    *,
    color: bool = False,
    indent: int | None = None,
    retcode: int = 0,
    nested_indent: int = 0,
    highstate: Any = None,
) -> str:
    """Format ``data`` with Salt's ``fmt`` outputter: the text Salt prints, without the
    final newline; empty when Salt prints nothing.

    As Salt does, an outputter that fails on the data (KeyError, AttributeError,
    TypeError) is replaced by ``nested``, and that by ``raw``.  An unknown ``fmt`` raises
    ``LocalError`` (the CLIs fall back to nested with a warning, as Salt does).
    """
    options = OutputOptions(color=color, indent=indent, retcode=retcode,
                            nested_indent=nested_indent, highstate=highstate)
    first = outputter(fmt)
    for candidate in (first, _nested, _raw):
        try:
            text = candidate(data, options)
        except (KeyError, AttributeError, TypeError):
            continue
        return "" if text is None else text.rstrip()
    return ""
