"""Command-line argument typing compared with Salt 3008 itself (``salt.utils.args``).

Salt is the oracle: for every word, ``parse_input`` (with ``yamlify_arg``) run in this
process must give exactly what ``raetsalt.execution.args.parse_input`` gives, type for
type (compared by ``repr``, so that 1, 1.0 and True differ and NaN equals NaN).
Skipped only when Salt cannot be imported (the ``salt`` extra is not installed).
``RAETSALT_ORACLE_EXAMPLES=N`` runs N generated cases instead of the default.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raetsalt.execution.args import parse_input

MAX_EXAMPLES = int(os.environ.get("RAETSALT_ORACLE_EXAMPLES", "1500"))

salt_args = pytest.importorskip("salt.utils.args", reason="Salt (the oracle) is not installed")


def salt_says(words: list[str], no_parse: tuple[str, ...] = ()) -> str:
    return repr(salt_args.parse_input(list(words), condition=True, no_parse=no_parse))


def we_say(words: list[str], no_parse: tuple[str, ...] = ()) -> str:
    args, kwargs = parse_input(words, no_parse)
    packed: list[Any] = list(args)
    if kwargs:
        packed.append({"__kwarg__": True, **kwargs})
    return repr(packed)


# Every case a user reported, and the YAML corners around them.
CASES = [
    "'123'", '"123"', "1_2_3", "foo: bar", "a= b", "x=None", "x=null", "12345678901234567890",
    "-1234567890123456789", "123456789012345678901", "017", "-017", "+017", "00", "08",
    "0x1f", "0b101", "0o17", "- foo", "-", "None", "none", "null", "~", "yes", "on", "off",
    "True", "tRue", "2024-01-01", "2001-12-14t21:59:43.10-05:00", "12:30:00", "1:30", "1e3",
    "1.0e+3", ".inf", "-.inf", ".nan", "1_000.5", "+1_000", "{a: 1}", " {a: 1}", "{a: 1, a: 2}",
    "{<<: {a: 1}, a: 2}", "{<<: [{a: 1}, {a: 2}]}", "[1, 2]", "[1, 2] # c", "a # b", "#", "# x",
    "|", "!", ">", "?", ": a", "[]", "{}", "[1,", "a: [1", "!!binary aGk=", "!!set {a}",
    "!!str 12", "!!float 1", "!!int abc", "!!python/unicode abc", "!!omap [a: 1]",
    "[!!omap [a: 1]]", "&a 1", "*a", "[&a 1, *a]", "@x", "`x", "%x", "---", "...", "--- 1",
    "1 ...", "", "   ", "a\tb", "a\nb", "a=b\n", "a=\nb", "k==v", "=x", "1=2", "a b=c",
    "x.y=1", "a-b=2", "é=1", "_x=1", "cmd=ls -l /tmp", "name=a=b", "foo,1020,1020",
    "'a' b", '"\\u00e9"', "!!timestamp 2024-01-01", "[2024-01-01]", "{d: 2024-01-01}",
    # merge lists as Salt's own loader reads them, whatever PyYAML's version
    "{<<: [{a: 1}, {b: 2}]}", "{<<: [{a: 1}, {b: 2}], b: 3}", "{<<: [1]}", "{<<: 1}",
    "{<<: {<<: {x: 1}, y: 2}, z: 3}", "{<<: [{a: 1}, {<<: {c: 1}}], c: 3}",
]


@pytest.mark.parametrize("word", CASES)
def test_each_case_as_salt(word: str) -> None:
    assert we_say([word]) == salt_says([word])
    assert we_say([f"kw={word}"]) == salt_says([f"kw={word}"])


def test_issue_examples_have_salts_types() -> None:
    args, kwargs = parse_input(["'123'", "1_2_3", "foo: bar", "a= b", "x=None",
                                "12345678901234567890", "017", "- foo"])
    assert args == ["123", "1_2_3", "foo: bar", "12345678901234567890", 17, "- foo"]
    assert kwargs == {"a": "b", "x": None}


def test_no_parse_keeps_the_text() -> None:
    words = ["a=1", "b=[x]", "c=2"]
    assert we_say(words, ("a", "b")) == salt_says(words, ("a", "b"))
    assert parse_input(words, ("a", "b")) == ([], {"a": "1", "b": "[x]", "c": 2})


def test_published_kwarg_mappings_as_salt() -> None:
    values: list[Any] = [{"__kwarg__": True, "k": 1}, {"__kwarg__": False, "j": 2}, {"m": 3}, 7]
    ours = parse_input(values)
    assert ours == ([{"j": 2}, {"m": 3}, 7], {"k": 1})
    assert values[0] == {"__kwarg__": True, "k": 1}  # the caller's mapping is not changed


# Characters that mean something to YAML or to the k=v rule, plus plain ones.
_ALPHABET = "ab_Z09-+.:,#'\"[]{}!&*|>?%@` =~\\/\t\né"
_TOKENS = [
    "0", "1", "017", "0x", "0b1", "1_0", ".5", "e3", "true", "no", "null", "None", "~",
    "2024-01-01", "12:30", "[", "]", "{", "}", ", ", ": ", "- ", "# ", "'", '"', "!!str ",
    "!!int ", "&a ", "*a", "<<: ", "k=", "a", " ", "...", "---", ".inf", ".nan",
]
words = st.one_of(
    st.text(alphabet=_ALPHABET, max_size=12),
    st.lists(st.sampled_from(_TOKENS), max_size=6).map("".join),
)


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(words, max_size=4))
def test_generated_words_as_salt(generated: list[str]) -> None:
    assert we_say(generated) == salt_says(generated)
