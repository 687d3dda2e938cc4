"""Outputters compared byte for byte with Salt 3008 itself (``salt.output``).

For each outputter, colour setting, ``--out-indent`` and retcode, ``render`` must give
exactly what Salt's ``try_printout`` gives in this process for the same data (Salt's
empty answer, None, is our empty text).  The data are what a return can hold after the
wire: None, booleans, integers, floats (NaN and infinities too), text (several lines,
escape characters, non-ASCII, trailing blanks), bytes, lists and mappings.  Skipped only
when Salt cannot be imported.  ``RAETSALT_ORACLE_EXAMPLES=N`` runs N generated returns.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.output import OUTPUTTERS, render

salt_output = pytest.importorskip("salt.output", reason="Salt (the oracle) is not installed")
salt_config = pytest.importorskip("salt.config")

MAX_EXAMPLES = int(os.environ.get("RAETSALT_ORACLE_EXAMPLES", "600"))
FORMATS = ("nested", "json", "yaml", "txt", "raw", "pprint")
INDENTS = (None, -1, 0, 1, 2, 4, 9, 12)


def salt_prints(data: Any, fmt: str, *, color: bool, indent: int | None, retcode: int) -> str:
    # The options Salt's CLI passes: its colour decision, and output_indent only when
    # --out-indent was given (Salt's parser leaves unset options out of the config).
    opts = dict(salt_config.DEFAULT_MASTER_OPTS)
    opts["color"] = color
    if indent is not None:
        opts["output_indent"] = indent
    text = salt_output.try_printout(data, fmt, opts, _retcode=retcode)
    return "" if text is None else text


RETURN = {
    "web1": {
        "list": ["Hello", "World", 1, 2.5, None, True, [], {}],
        "bar": "baz",
        "dictionary": {"def": 456, "abc": 123, "nested": {"deep": [[1, [2]], {"k": "v"}]}},
        "none": None,
        "float": 1.5,
        "empty": {},
        "lines": "one\ntwo\n\nfour  \n",
        "escape": "\x1b[31mred\x1b[0m",
        "unicode": "é ☃ 日本",
        "bytes": b"text",
        "badbytes": b"\xff\xfe",
        "big": 2**70,
        "negative": -3,
        "inf": float("inf"),
        "long": "word " * 40,
        "quotes": "it's \"quoted\": yes",
        "yamlish": ["- a", "k: v", "null", "017", "", " lead", "trail "],
    },
    "web2": "Minion did not return. [No response]",
    "db1": False,
}

SAMPLES: list[Any] = [
    RETURN,
    {"local": True},
    {"local": None},
    {"local": ""},
    {"local": []},
    {"local": {}},
    {"m": {"x": "b", 2: "a", None: 1}},  # keys that do not sort together
    {"m": {1: "one", 10: "ten", 2: "two"}},
    {"m": [[1, 2], [3, [4]], {"a": [5]}]},
    "bare text\n",
    "",
    42,
    None,
    [1, "two", {"three": 3}],
    {b"k": 1},
    {"m": "tab\there", "n": "cr\rhere"},
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("color", [False, True])
@pytest.mark.parametrize("indent", INDENTS)
def test_samples_as_salt(fmt: str, color: bool, indent: int | None) -> None:
    for retcode in (0, 1):
        for data in SAMPLES:
            ours = render(data, fmt, color=color, indent=indent, retcode=retcode)
            assert ours == salt_prints(data, fmt, color=color, indent=indent, retcode=retcode), (
                data
            )


def test_the_names_salt_knows() -> None:
    assert set(FORMATS) <= set(OUTPUTTERS)
    assert render({"a": "b"}, "text") == salt_prints({"a": "b"}, "text", color=False,
                                                     indent=None, retcode=0)


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.text(alphabet=" \t\n\r\x1b:-#'\"{}[]|>&*!%@`,?abc01é", max_size=20),
    st.binary(max_size=8),
)
_keys = st.one_of(st.text(max_size=8), st.integers(min_value=-100, max_value=100))
_data = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(_keys, inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.dictionaries(st.text(min_size=1, max_size=8), _data, min_size=1, max_size=3),
    fmt=st.sampled_from(FORMATS),
    color=st.booleans(),
    indent=st.sampled_from(INDENTS),
    retcode=st.sampled_from((0, 1, 2)),
)
def test_generated_returns_as_salt(
    data: dict[str, Any], fmt: str, color: bool, indent: int | None, retcode: int
) -> None:
    ours = render(data, fmt, color=color, indent=indent, retcode=retcode)
    assert ours == salt_prints(data, fmt, color=color, indent=indent, retcode=retcode)


@pytest.mark.parametrize("nested_indent", [0, 2, 14])
def test_nested_indent_as_salt(nested_indent: int) -> None:
    """What the highstate outputter asks of nested (Salt passes ``nested_indent``)."""
    opts = dict(salt_config.DEFAULT_MASTER_OPTS)
    opts["color"] = True
    for data in SAMPLES:
        salts = salt_output.try_printout(data, "nested", opts, nested_indent=nested_indent)
        assert render(data, "nested", color=True, nested_indent=nested_indent) == (salts or "")
