"""YAML read the way Salt reads it: for command-line arguments and config files.

Salt loads both with its own safe loader, which differs from PyYAML's ``safe_load`` in
ways that change what a user's text means:

* timestamps (``2024-01-01``, ``2001-12-14t21:59:43.10-05:00``) stay strings;
* an integer written with leading zeros is decimal: ``017`` is 17, ``00`` is 0 (YAML
  1.1 would read octal 15).  ``0x``/``0b`` keep their base, and a sign turns the rule
  off, so ``-017`` is still octal -15, as in Salt;
* a key given twice in one mapping is an error, and a merge key (``<<``) never brings in
  a key the mapping sets itself; a key that two mappings of one merge list both bring
  is given twice (an error), and a merge list's mappings come in reverse order;
* ``!!python/unicode x`` is the string ``x``.

libyaml's parser is used when PyYAML has it, as Salt does: the pure-Python parser
disagrees with it on some malformed input, and the oracle tests compare with Salt.
libyaml overflows the C stack (the process dies) on nesting some 30,000 levels deep
(``[[[[...``, ``- - - ...``); ``load`` refuses text that could nest more than
``MAX_DEPTH`` levels before libyaml sees it (Salt crashes there).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.constructor import ConstructorError

__all__ = ["MAX_DEPTH", "SaltLoader", "load"]

MAX_DEPTH = 1000
"""Deepest nesting ``load`` accepts (an upper bound is computed from the text)."""
_INDICATORS = re.compile(r"(?:[-?:](?:[ \t]+|$))+")

_INT_TAG = "tag:yaml.org,2002:int"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_VALUE_TAG = "tag:yaml.org,2002:value"
_STR_TAG = "tag:yaml.org,2002:str"

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SaltLoader(_Base):  # type: ignore[misc]  # PyYAML ships no type stubs
    """A safe loader with Salt's reading rules (see the module docstring)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise ConstructorError(
                None, None, f"expected a mapping, found {node.id}", node.start_mark
            )
        self.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise ConstructorError(
                    None, None, "a mapping key must be a scalar", key_node.start_mark
                ) from None
            if key in result:
                raise ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            result[key] = self.construct_object(value_node, deep=deep)
        return result

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Salt's merge rules, whatever PyYAML's version does (6.0.4 started dropping
        # repeated keys among the merged mappings): the pairs of every merged mapping
        # come first, those of a merge list in reverse order, each list keeping its
        # repeats (a key merged from two mappings is a duplicate, refused below); a
        # merged pair whose key the mapping sets itself is left out.
        merged: list[tuple[yaml.Node, yaml.Node]] = []
        own: list[tuple[yaml.Node, yaml.Node]] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                if key_node.tag == _VALUE_TAG:
                    key_node.tag = _STR_TAG
                own.append((key_node, value_node))
            elif isinstance(value_node, yaml.MappingNode):
                self.flatten_mapping(value_node)
                merged.extend(value_node.value)
            elif isinstance(value_node, yaml.SequenceNode):
                parts: list[list[tuple[yaml.Node, yaml.Node]]] = []
                for part in value_node.value:
                    if not isinstance(part, yaml.MappingNode):
                        raise ConstructorError(
                            "while constructing a mapping", node.start_mark,
                            f"expected a mapping for merging, found {part.id}",
                            part.start_mark)
                    self.flatten_mapping(part)
                    parts.append(part.value)
                for pairs in reversed(parts):
                    merged.extend(pairs)
            else:
                raise ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"expected a mapping or a list of mappings to merge, found {value_node.id}",
                    value_node.start_mark)
        if merged:
            set_here = [key.value for key, _ in own]
            own = [pair for pair in merged if pair[0].value not in set_here] + own
        node.value = own

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = node.value
        if len(text) > 1 and text.startswith("0") and not text.startswith(("0b", "0x")):
            node = yaml.ScalarNode(node.tag, text.lstrip("0") or "0", node.start_mark,
                                   node.end_mark, node.style)
        value: int = super().construct_yaml_int(node)
        return value

    def construct_plain_text(self, node: yaml.Node) -> str:
        """Timestamps and ``!!python/unicode``: the scalar's text as written."""
        if not isinstance(node, yaml.ScalarNode):
            raise ConstructorError(None, None, f"expected a scalar, found {node.id}",
                                   node.start_mark)
        text: str = node.value
        return text


SaltLoader.add_constructor(_INT_TAG, SaltLoader.construct_yaml_int)
SaltLoader.add_constructor("tag:yaml.org,2002:timestamp", SaltLoader.construct_plain_text)
SaltLoader.add_constructor("tag:yaml.org,2002:python/unicode", SaltLoader.construct_plain_text)


def nesting_bound(text: str) -> int:
    """An upper bound of how deep ``text`` can nest: its deepest bracket level, plus the
    longest run of block indicators (``- - - x``) and the deepest indentation of a line."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    runs = indent = 0
    for line in text.splitlines():
        body = line.lstrip(" ")
        indent = max(indent, len(line) - len(body))
        found = _INDICATORS.match(body)
        if found:
            runs = max(runs, found.group().count("-") + found.group().count("?")
                       + found.group().count(":"))
    return deepest + runs + indent


def load(text: str) -> Any:
    """One YAML document read with Salt's rules; raises ``yaml.YAMLError`` on bad input,
    also for text that may nest deeper than ``MAX_DEPTH``."""
    if nesting_bound(text) > MAX_DEPTH:
        raise yaml.YAMLError(f"nested more than {MAX_DEPTH} levels deep")
    return yaml.load(text, Loader=SaltLoader)  # noqa: S506 - a SafeLoader subclass
