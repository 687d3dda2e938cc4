"""Salt's argument rules: ``name=value`` is a keyword argument, every value is typed as YAML.

``raetsalt '*' test.arg 1 two x=[1,2] 'y={a: 1}'`` gives ``args = [1, 'two']`` and
``kwargs = {'x': [1, 2], 'y': {'a': 1}}``, exactly as Salt 3008's ``parse_input`` and
``yamlify_arg`` do (``tests/execution/test_args_oracle.py`` compares with Salt itself).
The rules, in the order they apply to one word:

* ``name=value`` where ``name`` is an identifier (``[^\\d\\W][\\w.-]*``) and the ``=`` is
  not ``==`` is a keyword argument; ``a b=c``, ``=x``, ``1=2`` and ``k==v`` are
  positional.  A value that contains ``=`` needs the explicit ``name=`` form;
* a value that is blank, ``---`` or ``...``, only digits and underscores (``1_000``), or
  holds a tab, CR or newline stays the exact text typed;
* with a ``#`` in it, the YAML value is taken only when it is not text (``[1, 2] # x`` is
  a list, ``a # b`` stays ``'a # b'``);
* ``None`` is None; otherwise the YAML value (read with ``raetsalt.saltyaml``: ``017``
  is 17, dates stay text) is taken when it is a number, a boolean, null or a string
  (``'123'`` with its quotes is the string ``123``; `` b`` is ``b``), a list only when the
  text starts with ``[`` and a mapping only when it starts with ``{`` (``foo: bar`` and
  ``- foo`` stay text); anything else, or text YAML cannot read, stays as typed;
* a positional integer of 20 digits is a job id and goes as text.

``no_parse`` names keyword arguments whose values are never typed (Salt's
``--no-parse``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from raetsalt import saltyaml
from raetsalt.protocol import KWARG_MARK

__all__ = ["parse_input", "yamlify"]

_KWARG = re.compile(r"^([^\d\W][\w.-]*)=(?!=)(.*)$")
_KEPT_AS_TYPED = ("", "---", "...")
_DIGITS_AND_UNDERSCORES = frozenset("0123456789_")
_JID_LENGTH = 20


def yamlify(value: Any) -> Any:
    """Type one command-line value as Salt does (see the module docstring)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text in _KEPT_AS_TYPED:
        return value
    if "_" in text and _DIGITS_AND_UNDERSCORES.issuperset(text):
        return value  # YAML would read 1_000 as 1000
    if any(c in value for c in "\t\r\n"):
        return value
    try:
        return _typed(value)
    except Exception:  # noqa: BLE001 - whatever YAML makes of it, the text is kept
        return value


def _typed(value: str) -> Any:
    if "#" in value:
        # YAML would read the rest of the line as a comment: take the value only when
        # that cannot have lost text.
        loaded = saltyaml.load(value)
        return value if loaded is None or isinstance(loaded, str) else loaded
    loaded = None if value == "None" else saltyaml.load(value)
    if isinstance(loaded, dict):
        return loaded if value.startswith("{") else value
    if isinstance(loaded, list):
        return loaded if value.startswith("[") else value
    if loaded is None:
        return value if value == "!" else None
    if isinstance(loaded, int | float | str):  # bool is an int
        return value if loaded == "" and value in ("|", "!") else loaded
    return value  # other YAML types (bytes, sets) are not arguments


def parse_input(
    values: Iterable[Any], no_parse: Collection[str] = ()
) -> tuple[list[Any], dict[str, Any]]:
    """Split arguments into positional and keyword ones, typing strings as YAML.

    ``values`` are command-line words, or a publication's ``arg`` list, where a mapping
    marked ``__kwarg__: True`` carries keyword arguments and other values pass as they are.
    """
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for value in values:
        if isinstance(value, str):
            match = _KWARG.match(value)
            if match:
                name, text = match.groups()
                kwargs[name] = text if name in no_parse else yamlify(text)
            else:
                args.append(yamlify(value))
        elif isinstance(value, dict) and KWARG_MARK in value:
            rest = {k: v for k, v in value.items() if k != KWARG_MARK}
            if value[KWARG_MARK] is True:
                kwargs.update(rest)
            else:
                args.append(rest)
        else:
            args.append(value)
    return [_jid_as_text(a) for a in args], kwargs


def _jid_as_text(value: Any) -> Any:
    """A positional integer whose decimal form is 20 characters long (a job id) goes as
    text, so that ``jobs.lookup_jid 20240101120000123456`` finds the job."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
        if len(text) == _JID_LENGTH:
            return text
    return value
