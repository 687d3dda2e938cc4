"""Compile one minion's pillar from the master's ``pillar_roots`` (runs in the master's
pillar worker process, ``raetsalt.saltbridge.worker``).

With ``salt`` importable on the master, Salt's own ``salt.pillar.Pillar`` does it: every
renderer (jinja, yaml, gpg...), ``include``, top-file matching and merging exactly as a
Salt master does; the loader it needs is built once per worker.  Without ``salt``,
``NativePillar`` reads the same layout with YAML only (no templating): each saltenv's
``top.sls``, matched with raetsalt's targeting (``glob`` by default, ``- match: grain``
/ ``pcre`` / ``list`` / ``compound`` / ``grain_pcre`` / ``ipcidr``), the matched sls files
(``a.b`` is ``a/b.sls`` or ``a/b/init.sls``) with their ``include`` lists, merged
recursively in order.  Problems go into the pillar's ``_errors`` list, as in Salt.

A minion's ``pillar_override`` (``state.apply pillar='{...}'``) is merged on top; the
result goes only to that minion.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import yaml

from raetsalt.errors import TargetError
from raetsalt.targeting import match_self

from .paths import PathRefused, clean_relpath

log = logging.getLogger(__name__)

MAX_SLS_BYTES = 4 << 20
"""Largest pillar sls or top file the native compiler reads."""
_MATCH_TYPES = {"glob", "pcre", "list", "grain", "grain_pcre", "compound", "ipcidr"}


class PillarCompiler(Protocol):
    def compile(self, minion_id: str, grains: Mapping[str, Any], pillarenv: str | None,
                override: Mapping[str, Any] | None) -> dict[str, Any]: ...


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive merge (Salt's ``smart``/``recurse`` for pillar): mappings merge, any
    other value of ``extra`` replaces the one in ``base``."""
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


def make_compiler(pillar_roots: Mapping[str, Sequence[str]], opts: Mapping[str, Any]
                  ) -> PillarCompiler:
    """Salt's compiler when ``salt`` imports, else the YAML-only one."""
    try:
        return SaltPillar(pillar_roots, opts)
    except ImportError:
        log.info("salt is not importable: pillar is compiled as plain YAML")
        return NativePillar(pillar_roots, opts.get("nodegroups") or {})


class SaltPillar:
    """``salt.pillar.Pillar`` with master opts built from raetsalt's."""

    def __init__(self, pillar_roots: Mapping[str, Sequence[str]], opts: Mapping[str, Any]
                 ) -> None:
        import salt.config
        import salt.loader
        import salt.pillar

        cachedir = os.path.join(str(opts["cachedir"]), "salt")
        given = opts.get("__salt")
        overrides = dict(given) if isinstance(given, dict) else {}  # ext_pillar...
        overrides.update({
            "id": opts.get("id"), "root_dir": "/", "cachedir": cachedir,
            "pki_dir": os.path.join(cachedir, "pki"), "sock_dir": os.path.join(cachedir, "sock"),
            "extension_modules": os.path.join(cachedir, "extmods"),
            "log_file": opts.get("log_file"), "file_client": "local",
            "pillar_roots": {env: list(dirs) for env, dirs in pillar_roots.items()},
            "file_roots": dict(opts.get("file_roots") or {}),
            "nodegroups": dict(opts.get("nodegroups") or {}),
            "renderer": opts.get("renderer", "jinja|yaml"),
            "minion_data_cache": False, "pillar_cache": False,
        })
        self._pillar = salt.pillar
        self.opts = salt.config.apply_master_config(overrides,
                                                   salt.config.DEFAULT_MASTER_OPTS.copy())
        self.functions: Any = None

    def compile(self, minion_id: str, grains: Mapping[str, Any], pillarenv: str | None,
                override: Mapping[str, Any] | None) -> dict[str, Any]:
        opts = dict(self.opts, grains=dict(grains), pillarenv=pillarenv)
        pillar = self._pillar.Pillar(opts, dict(grains), minion_id, "base",
                                     functions=self.functions,
                                     pillar_override=dict(override or {}),
                                     pillarenv=pillarenv)
        self.functions = pillar.functions  # the loader is built once, then reused
        return dict(pillar.compile_pillar())


class NativePillar:
    """Pillar without Salt: YAML top files and sls files (see the module docstring)."""

    def __init__(self, pillar_roots: Mapping[str, Sequence[str]],
                 nodegroups: Mapping[str, Any]) -> None:
        self.roots = {env: list(dirs) for env, dirs in pillar_roots.items()}
        self.nodegroups = nodegroups

    def compile(self, minion_id: str, grains: Mapping[str, Any], pillarenv: str | None,
                override: Mapping[str, Any] | None) -> dict[str, Any]:
        errors: list[str] = []
        pillar: dict[str, Any] = {}
        for env, names in self._tops(minion_id, grains, pillarenv, errors).items():
            done: set[str] = set()
            for name in names:
                self._render(env, name, pillar, done, errors)
        if override:
            merge(pillar, override)
        if errors:
            pillar["_errors"] = errors
        return pillar

    def _tops(self, minion_id: str, grains: Mapping[str, Any], pillarenv: str | None,
              errors: list[str]) -> dict[str, list[str]]:
        chosen: dict[str, list[str]] = {}
        envs = [pillarenv] if pillarenv else sorted(self.roots, key=lambda e: e != "base")
        for env in envs:
            top = self._load(env, "top.sls", errors)
            if not isinstance(top, Mapping):
                continue
            for sls_env, targets in top.items():
                if (pillarenv and sls_env != pillarenv) or not isinstance(targets, Mapping):
                    continue
                for tgt, items in targets.items():
                    if isinstance(items, list) and self._matches(
                            str(tgt), items, minion_id, grains, errors):
                        names = chosen.setdefault(str(sls_env), [])
                        names.extend(i for i in items if isinstance(i, str) and i not in names)
        return chosen

    def _matches(self, tgt: str, items: list[Any], minion_id: str, grains: Mapping[str, Any],
                 errors: list[str]) -> bool:
        kind = "glob"
        for item in items:
            if isinstance(item, Mapping) and "match" in item:
                kind = str(item["match"])
        if kind not in _MATCH_TYPES:
            errors.append(f"top.sls: match type {kind!r} is not supported without salt")
            return False
        try:
            return match_self(tgt, kind, minion_id, grains, self.nodegroups)
        except TargetError as exc:
            errors.append(f"top.sls: target {tgt!r}: {exc}")
            return False

    def _render(self, env: str, name: str, pillar: dict[str, Any], done: set[str],
                errors: list[str]) -> None:
        if name in done:
            return
        done.add(name)
        base = name.replace(".", "/")
        data = self._load(env, f"{base}.sls", errors)
        if data is None:
            data = self._load(env, f"{base}/init.sls", errors)
        if data is None:
            errors.append(f"Specified SLS '{name}' in environment '{env}' is not available "
                          "on the salt master")
            return
        if not isinstance(data, Mapping):
            errors.append(f"SLS '{name}' in environment '{env}' is not a mapping")
            return
        data = dict(data)
        for included in data.pop("include", None) or []:
            if isinstance(included, str):
                self._render(env, included, pillar, done, errors)
        merge(pillar, data)

    def _load(self, env: str, rel: str, errors: list[str]) -> Any:
        """The YAML document at ``rel`` in the first root of ``env`` that has it; None if
        none has it.  A file that cannot be read or parsed is noted in ``errors``."""
        try:
            rel = clean_relpath(rel)
        except PathRefused as exc:
            errors.append(str(exc))
            return None
        for root in self.roots.get(env, []):
            path = os.path.join(root, rel)
            if not os.path.isfile(path):
                continue
            try:
                if os.path.getsize(path) > MAX_SLS_BYTES:
                    raise ValueError(f"larger than {MAX_SLS_BYTES} bytes")
                with open(path, encoding="utf-8") as handle:
                    return yaml.safe_load(handle) or {}
            except (OSError, ValueError, yaml.YAMLError) as exc:
                errors.append(f"Rendering SLS '{rel}' in environment '{env}' failed: {exc}")
                return {}
        return None
