"""Salt's command-line argument rules (k=v kwargs, YAML-typed values), without Salt installed;
test_args_oracle.py compares the same rules with Salt itself."""

from __future__ import annotations

from typing import Any

import pytest

from raetsalt.execution.args import parse_input, yamlify


@pytest.mark.parametrize(
    ("words", "args", "kwargs"),
    [
        ([], [], {}),
        (["1", "two", "3.5"], [1, "two", 3.5], {}),
        (["true", "False", "null", "~"], [True, False, None, None], {}),
        (["[1, 2]", "{a: 1}"], [[1, 2], {"a": 1}], {}),
        (["x=1", "y=[a, b]", "z={k: v}"], [], {"x": 1, "y": ["a", "b"], "z": {"k": "v"}}),
        (["name=a=b"], [], {"name": "a=b"}),  # a value may contain '='
        (["a b=c"], ["a b=c"], {}),  # not a name on the left: positional
        (["=x", "1=2"], ["=x", "1=2"], {}),
        (["k==v"], ["k==v"], {}),  # '==' is a comparison, not an assignment
        (["foo,1020,1020"], ["foo,1020,1020"], {}),  # no comma splitting (Salt 3008)
        (["x.y=1", "a-b=2"], [], {"x.y": 1, "a-b": 2}),
        (["text # comment"], ["text # comment"], {}),
        (["[1] # comment"], [[1]], {}),
        (["'123'", '"x"'], ["123", "x"], {}),  # YAML quotes are removed, as in Salt
        (["2024-01-01"], ["2024-01-01"], {}),  # dates stay strings
        (["  padded", "a= b"], ["padded"], {"a": "b"}),
        (["017", "-017", "0x10"], [17, -15, 16], {}),  # Salt's leading-zero rule
        (["1_2_3", "foo: bar", "- foo"], ["1_2_3", "foo: bar", "- foo"], {}),
        (["x=None", "None", "none"], [None, "none"], {"x": None}),
        (["12345678901234567890"], ["12345678901234567890"], {}),  # a jid stays text
        (["{a: 1, a: 2}"], ["{a: 1, a: 2}"], {}),  # duplicate keys: not a mapping
        (["cmd=ls -l /tmp"], [], {"cmd": "ls -l /tmp"}),
        (["[unclosed"], ["[unclosed"], {}),
    ],
)
def test_parse_input(words: list[str], args: list[Any], kwargs: dict[str, Any]) -> None:
    assert parse_input(words) == (args, kwargs)


def test_non_strings_pass_through() -> None:
    assert yamlify(5) == 5 and yamlify([1]) == [1]


@pytest.mark.parametrize("word", ["[" * 40000, "[" * 40000 + "]" * 40000, "- " * 40000,
                                  "? " * 40000, "{a: " * 40000])
def test_nesting_that_would_crash_libyaml_stays_text(word: str) -> None:
    # libyaml overflows the C stack some 30,000 levels deep (Salt's CLI dies there)
    assert parse_input([word]) == ([word], {})


def test_deep_but_reasonable_nesting_is_still_typed() -> None:
    value = parse_input(["[" * 500 + "]" * 500])[0][0]
    for _ in range(499):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []
