"""Outputters: exact texts for test.ping (as Salt prints them) and the nested layout, without
Salt installed; test_output_oracle.py compares every outputter with Salt itself."""

from __future__ import annotations

import json
from collections import OrderedDict

import pytest
import yaml

from raetsalt.errors import LocalError
from raetsalt.output import OUTPUTTERS, render

PING = {"local": True}


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("nested", "local:\n    True"),
        ("json", '{\n    "local": true\n}'),
        ("yaml", "local: true"),
        ("txt", "local: True"),
        ("raw", "{'local': True}"),
        ("pprint", "{'local': True}"),
    ],
)
def test_test_ping_exact(fmt: str, text: str) -> None:
    assert render(PING, fmt) == text


def test_default_is_nested() -> None:
    assert render(PING) == "local:\n    True"


def test_unknown_outputter() -> None:
    with pytest.raises(LocalError, match="unknown outputter 'quiet'; choose one of nested, json"):
        render(PING, "quiet")
    assert set(OUTPUTTERS) == {"nested", "json", "yaml", "txt", "raw", "pprint", "highstate"}


NESTED_DATA = {
    "web1": {
        "list": ["Hello", "World"],
        "bar": "baz",
        "dictionary": {"def": 456, "abc": 123},
        "none": None,
        "float": 1.5,
        "empty": {},
        "lines": "one\ntwo",
        "mixed": [1, {"k": "v"}, [2, 3]],
    }
}

NESTED_TEXT = """\
web1:
    ----------
    bar:
        baz
    dictionary:
        ----------
        abc:
            123
        def:
            456
    empty:
        ----------
    float:
        1.5
    lines:
        one
        two
    list:
        - Hello
        - World
    mixed:
        - 1
        |_
          ----------
          k:
              v
        |_
          - 2
          - 3
    none:
        None"""


def test_nested_layout() -> None:
    assert render(NESTED_DATA, "nested") == NESTED_TEXT


def test_nested_multiline_string_in_list_aligns_under_text() -> None:
    assert render({"m": ["a\nb"]}) == "m:\n    - a\n      b"


def test_nested_empty_string_and_list_print_nothing() -> None:
    assert render({"m": "", "n": []}) == "m:\nn:"


def test_nested_unsortable_keys_sort_as_text() -> None:
    assert (
        render({"m": {"x": "b", 2: "a"}})
        == "m:\n    ----------\n    2:\n        a\n    x:\n        b"
    )


def test_nested_ordered_dict_keeps_its_order_and_unknown_objects_print_nothing() -> None:
    assert render(OrderedDict([("b", 1), ("a", 2)])) == "b:\n    1\na:\n    2"
    assert render({"m": frozenset()}) == "m:"


def test_nested_bytes() -> None:
    assert render({"m": b"text"}) == "m:\n    text"
    assert render({"m": b"\xff"}) == "m:"


def test_nested_ignores_out_indent() -> None:
    assert render(PING, indent=2) == render(PING) == "local:\n    True"


def test_nested_color() -> None:
    text = render({"m": {"a": 1, "s": "x", "l": ["y"]}}, color=True)
    assert text == (
        "\x1b[0;36mm\x1b[0;0m:\n"
        "    \x1b[0;36m----------\x1b[0;0m\n"
        "    \x1b[0;36ma\x1b[0;0m:\n"
        "        \x1b[0;1;33m1\x1b[0;0m\n"
        "    \x1b[0;36ml\x1b[0;0m:\n"
        "        \x1b[0;32m- y\x1b[0;0m\n"
        "    \x1b[0;36ms\x1b[0;0m:\n"
        "        \x1b[0;32mx\x1b[0;0m"
    )


def test_nested_escape_characters_in_text_are_neutralised() -> None:
    assert render({"m": "\x1b[2Jboom"}) == "m:\n    ?[2Jboom"


def test_nested_color_failed_retcode_is_red() -> None:
    text = render({"m": {"a": [[1]]}}, color=True, retcode=1)
    assert "\x1b[0;36m" not in text
    assert "\x1b[0;31m----------" in text and "\x1b[0;31m|_" in text


def test_color_only_changes_nested() -> None:
    for fmt in ("json", "yaml", "txt", "raw"):
        assert render(NESTED_DATA, fmt, color=True) == render(NESTED_DATA, fmt)


def test_trailing_white_space_is_stripped() -> None:
    assert render({"m": "text  \n\n"}) == "m:\n    text"
    assert render("x \n", "raw") == "x"


def test_json_keeps_order_and_unicode_and_reprs_unknown() -> None:
    text = render({"b": 1, "a": "é", "s": {1}}, "json")
    assert text == '{\n    "b": 1,\n    "a": "é",\n    "s": "{1}"\n}'
    assert render({b"k": 1}, "json") == "{}"  # a key JSON cannot have


def test_json_indent() -> None:
    assert render({"a": [1]}, "json", indent=-1) == '{"a": [1]}'
    assert render({"a": [1]}, "json", indent=0) == '{\n"a": [\n1\n]\n}'
    assert render({"a": [1]}, "json", indent=2) == '{\n  "a": [\n    1\n  ]\n}'


def test_yaml_block_sorted_roundtrip() -> None:
    text = render(NESTED_DATA, "yaml")
    assert text.splitlines()[:4] == ["web1:", "  bar: baz", "  dictionary:", "    abc: 123"]
    assert yaml.safe_load(text) == NESTED_DATA


def test_yaml_unknown_object_and_tuple() -> None:
    class Thing:
        def __repr__(self) -> str:
            return "<thing>"

    assert render({"a": Thing(), "t": (1, 2)}, "yaml") == "a: NULL\nt:\n- 1\n- 2"


def test_yaml_negative_indent_is_flow_style_and_bare_values_are_bare() -> None:
    assert render({"a": [1, {"b": "c"}]}, "yaml", indent=-1) == "{a: [1, {b: c}]}"
    assert render(True, "yaml") == "true"  # no document end marker (libyaml, as Salt)
    assert render("x", "raw") == "x"


def test_txt_lines() -> None:
    data = {"m1": "line1\nline2", "m2": {"a": 1}, "m3": ["x"], "m4": ""}
    assert render(data, "txt") == "m1: line1\nm1: line2\nm2: {'a': 1}\nm3: ['x']"
    assert render("plain", "txt") == "plain"
    assert render([1], "txt") == "[1]"


def test_raw() -> None:
    assert render({"m": {"a": [1, "b"]}}, "raw") == "{'m': {'a': [1, 'b']}}"
    assert render("text", "raw") == "text"


def test_pprint_wraps_long_data() -> None:
    data = {f"minion{i}": True for i in range(10)}
    text = render(data, "pprint")
    assert "\n" in text and eval(text) == data  # noqa: S307 - our own literal


def test_json_is_parseable_for_nested_data() -> None:
    assert json.loads(render(NESTED_DATA, "json")) == NESTED_DATA
