"""Salt's command-line argument rules: ``k=v`` is a keyword argument, values are YAML.

``raetsalt '*' test.arg 1 two x=[1,2] 'y={a: 1}'`` gives ``args = [1, 'two']`` and
``kwargs = {'x': [1, 2], 'y': {'a': 1}}``, as Salt does.  A value that itself contains
``=`` needs the explicit ``name=`` form; an argument whose left side is not a valid name
(``'a b=c'``, ``'=x'``) stays positional.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_KWARG = re.compile(r"^([^\d\W][\w.-]*)=(?!=)(.*)\Z", re.DOTALL)


def yamlify(value: Any) -> Any:
    """Type a CLI string the way Salt does: YAML scalars, lists and mappings are loaded;
    anything YAML would mangle (comments, plain text it cannot parse) stays a string."""
    if not isinstance(value, str):
        return value
    if value.strip() != value or "#" in value or not value:
        return value
    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    if isinstance(loaded, str):
        return value  # keep the user's exact text (YAML may strip quotes or fold it)
    if isinstance(loaded, int | float | bool | list | dict) or loaded is None:
        return loaded
    return value  # dates and other YAML types stay text, as in Salt


def parse_cli_args(raw: list[str] | tuple[str, ...]) -> tuple[list[Any], dict[str, Any]]:
    """Split command-line words into positional and keyword arguments, typed as YAML."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for word in raw:
        match = _KWARG.match(word) if isinstance(word, str) else None
        if match:
            kwargs[match.group(1)] = yamlify(match.group(2))
        else:
            args.append(yamlify(word))
    return args, kwargs
