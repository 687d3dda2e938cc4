"""``--return``, ``--return_config`` and ``--return_kwargs`` (Salt's flags) for ``raetsalt``.

The returners named get each minion's return after the job ran, on the minion
(``raetsalt.execution.returners``); the master still collects the returns as always.
``--return_kwargs`` is YAML (or JSON) for a mapping, as Salt reads it.  ``--tag TAG`` is a
raetsalt shorthand for ``--return_kwargs '{"tag": TAG}'`` (the ``master_bus`` returner's
tag), so ``raetsalt '*' --return=master_bus --tag=monitoring cmd.run_all ...`` works.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from raetsalt.execution.returners import MAX_KWARGS_BYTES, MAX_NAME, ret_kwargs_untrusted


def add_returner_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--return", dest="returner", default="", metavar="RETURNER",
                        help="also give the returns to these returners (comma-separated), "
                             "on the minions")
    parser.add_argument("--return_config", default="", metavar="RETURNER_CONF",
                        help="the returners' configuration profile")
    parser.add_argument("--return_kwargs", default="", metavar="RETURNER_KWARGS",
                        help="returner options, a YAML or JSON mapping")
    parser.add_argument("--tag", default="", metavar="TAG",
                        help="the master_bus returner's tag (raetsalt's shorthand for "
                             "--return_kwargs '{\"tag\": TAG}')")


def returner_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The publication's ``ret``/``ret_config``/``ret_kwargs``; raises ``ValueError`` with
    the reason for a value the minions would not take."""
    fields: dict[str, Any] = {}
    returner = str(getattr(args, "returner", "") or "")
    if returner:
        if any(len(name.strip()) > MAX_NAME for name in returner.split(",")):
            raise ValueError(f"--return: a returner name is longer than {MAX_NAME} characters")
        fields["ret"] = returner
    config = str(getattr(args, "return_config", "") or "")
    if config:
        fields["ret_config"] = config
    kwargs: dict[str, Any] = {}
    text = str(getattr(args, "return_kwargs", "") or "")
    if text.strip():
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"--return_kwargs is not YAML: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("--return_kwargs must be a mapping, e.g. '{\"tag\": \"monitoring\"}'")
        kwargs.update(value)
    tag = str(getattr(args, "tag", "") or "")
    if tag:
        kwargs["tag"] = tag
    if kwargs:
        checked = ret_kwargs_untrusted(kwargs)
        if checked != kwargs:
            raise ValueError(f"--return_kwargs must have string keys and be at most "
                             f"{MAX_KWARGS_BYTES} bytes as JSON")
        fields["ret_kwargs"] = checked
    return fields
