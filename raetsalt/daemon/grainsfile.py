"""A minion's grains as it starts: its core grains, the static grains ``grains.setval``
saved, and the config's ``grains``; and how ``grains.setval`` saves them (Salt's layout:
``<conf_dir>/grains``, YAML)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml

from raetsalt.execution.grains import core_grains


def static_grains_path(opts: Mapping[str, Any]) -> str:
    """Where ``grains.setval`` keeps grains: ``<conf_dir>/grains`` as in Salt (or
    ``<cachedir>/grains`` when there is no config directory)."""
    return os.path.join(opts.get("conf_dir") or opts["cachedir"], "grains")


def load_grains(opts: Mapping[str, Any]) -> dict[str, Any]:
    """Core grains, overlaid with the saved static grains, then the config's ``grains``
    (which win, as in Salt)."""
    grains = core_grains(str(opts.get("id", "")), master=opts.get("master"))
    try:
        with open(static_grains_path(opts), encoding="utf-8") as handle:
            saved = yaml.safe_load(handle)
        if isinstance(saved, dict):
            grains.update(saved)
    except (OSError, yaml.YAMLError):
        pass
    grains.update(opts.get("grains") or {})
    return grains


def save_static_grains(opts: Mapping[str, Any], values: Mapping[str, Any]) -> None:
    path = static_grains_path(opts)
    saved: dict[str, Any] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            loaded = yaml.safe_load(handle)
        if isinstance(loaded, dict):
            saved = loaded
    except (OSError, yaml.YAMLError):
        pass
    saved.update(values)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        yaml.safe_dump(saved, handle, default_flow_style=False)
    os.replace(tmp, path)
