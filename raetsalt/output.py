"""Salt's outputters as pure functions: data in, text out.

``render(data, fmt)`` produces what Salt's outputter of the same name prints, without the
final newline (the caller prints the text with one).  For ``test.ping`` returned by
``local``::

    nested  local:\\n    True
    json    {\\n    "local": true\\n}
    yaml    local: true
    txt     local: True
    raw     {'local': True}
    pprint  {'local': True}

Where Salt would fail or print nothing for a value it does not know (a set, an object),
the outputters here print ``str()`` of it (nested, txt), its ``repr`` (json, as Salt's
``default=repr``) or its ``repr`` as a YAML string (yaml).  Choosing the outputter and
``--static`` collection are the caller's business.
"""

from __future__ import annotations

import json
import pprint
from collections.abc import Callable, Mapping
from numbers import Number
from typing import Any

import yaml

from raetsalt import highstate
from raetsalt.errors import LocalError

__all__ = ["OUTPUTTERS", "render"]

# ANSI codes Salt's colour table uses for the nested outputter.
_ANSI = {
    "LIGHT_YELLOW": "\033[1;33m",
    "YELLOW": "\033[0;33m",
    "GREEN": "\033[0;32m",
    "CYAN": "\033[0;36m",
    "RED": "\033[0;31m",
    "ENDC": "\033[0m",
}
_PLAIN = {name: "" for name in _ANSI}


class _Nested:
    """Salt's nested layout.

    A mapping prints each key (sorted when the keys sort) as ``key:`` with its value four
    spaces further in; a mapping below the top level is introduced by ``----------``.
    Lists print ``- item``; a list item that is itself a list or mapping is introduced by
    ``|_`` and shifted two spaces.  Scalars print with ``str`` (numbers with ``repr``).
    """

    def __init__(self, *, color: bool, retcode: int) -> None:
        self.c = _ANSI if color else _PLAIN
        # A failed return shows its structure in red, as Salt does.
        self.failed = retcode != 0

    def line(self, indent: int, color: str, text: str, prefix: str = "", suffix: str = "") -> str:
        return f"{' ' * indent}{color}{prefix}{text}{self.c['ENDC']}{suffix}"

    def emit(self, value: Any, indent: int, prefix: str, out: list[str]) -> None:
        c = self.c
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                out.append(self.line(indent, c["YELLOW"], repr(bytes(value)), prefix))
                return
        if value is None or isinstance(value, bool):
            out.append(self.line(indent, c["LIGHT_YELLOW"], str(value), prefix))
        elif isinstance(value, Number):
            out.append(self.line(indent, c["LIGHT_YELLOW"], repr(value), prefix))
        elif isinstance(value, str):
            # Continuation lines are aligned under the first line's text, not its prefix.
            for number, text in enumerate(value.splitlines()):
                lead = prefix if number == 0 else " " * len(prefix)
                out.append(self.line(indent, c["GREEN"], text, lead))
        elif isinstance(value, (list, tuple)):
            color = c["RED"] if self.failed else c["GREEN"]
            for item in value:
                if isinstance(item, (list, tuple, Mapping)):
                    out.append(self.line(indent, color, "|_"))
                    self.emit(item, indent + 2, "" if isinstance(item, Mapping) else "- ", out)
                else:
                    self.emit(item, indent, "- ", out)
        elif isinstance(value, Mapping):
            color = c["RED"] if self.failed else c["CYAN"]
            if indent:
                out.append(self.line(indent, color, "----------"))
            try:
                keys = sorted(value)
            except TypeError:
                keys = list(value)
            for key in keys:
                out.append(self.line(indent, color, str(key), prefix, ":"))
                self.emit(value[key], indent + 4, "", out)
        else:
            out.append(self.line(indent, c["YELLOW"], str(value), prefix))


def _nested(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    out: list[str] = []
    _Nested(color=color, retcode=retcode).emit(data, indent or 0, "", out)
    return "\n".join(out)


def _json(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    # Salt: indent 4 unless told; a negative indent puts everything on one line.
    width = 4 if indent is None else (indent if indent >= 0 else None)
    return json.dumps(data, default=repr, indent=width, ensure_ascii=False)


class _YamlDumper(yaml.SafeDumper):
    """SafeDumper that writes anything it cannot represent as its ``repr`` string."""


def _represent_other(dumper: yaml.SafeDumper, value: Any) -> yaml.Node:
    return dumper.represent_str(repr(value))


def _represent_tuple(dumper: yaml.SafeDumper, value: tuple[Any, ...]) -> yaml.Node:
    return dumper.represent_list(list(value))


_YamlDumper.add_representer(tuple, _represent_tuple)
_YamlDumper.add_multi_representer(object, _represent_other)


def _yaml(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    # Block style, sorted keys, unicode kept: what Salt's yaml outputter asks PyYAML for.
    text: str = yaml.dump(
        data,
        Dumper=_YamlDumper,
        default_flow_style=False,
        allow_unicode=True,
        indent=indent if indent and indent > 1 else None,
    )
    # A bare scalar document ends with "...", which Salt prints too; only the newline
    # is dropped here.
    return text.rstrip("\n")


def _txt(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    # One "key: line" per line of each string value; other values as str() on one line.
    if not isinstance(data, Mapping):
        return str(data)
    lines: list[str] = []
    for key, value in data.items():
        if isinstance(value, str):
            lines.extend(f"{key}: {text}" for text in value.splitlines())
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def _raw(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    # Salt's raw prints a string as it is and anything else as str(), which for
    # containers is their Python repr.
    return data if isinstance(data, str) else str(data)


def _pprint(data: Any, *, color: bool, indent: int | None, retcode: int) -> str:
    return pprint.pformat(data, indent=indent if indent and indent > 0 else 1)


_Renderer = Callable[..., str]

_RENDERERS: dict[str, _Renderer] = {
    "nested": _nested,
    "json": _json,
    "yaml": _yaml,
    "txt": _txt,
    "raw": _raw,
    "pprint": _pprint,
    "highstate": highstate.render,
}

OUTPUTTERS: tuple[str, ...] = tuple(_RENDERERS)


def render(
    data: Any,
    fmt: str = "nested",
    *,
    color: bool = False,
    indent: int | None = None,
    retcode: int = 0,
) -> str:
    """Format ``data`` with Salt's ``fmt`` outputter; no trailing newline.

    ``color`` only affects ``nested`` (Salt's colours: cyan keys, green strings, yellow
    scalars; red throughout when ``retcode`` is not 0).  ``indent`` is ``--out-indent``:
    the JSON indent (default 4, negative for one line), the YAML indent, the base indent
    of ``nested`` and the ``pprint`` indent.  An unknown ``fmt`` raises ``LocalError``.
    """
    try:
        renderer = _RENDERERS[fmt]
    except KeyError:
        raise LocalError(
            f"unknown outputter {fmt!r}; choose one of {', '.join(OUTPUTTERS)}"
        ) from None
    return renderer(data, color=color, indent=indent, retcode=retcode)
