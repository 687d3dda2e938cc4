#!/usr/bin/env python
"""Generate raetsalt/config_salt_keys.py: the config keys Salt knows, from Salt itself.

Run with the project venv (which has the ``salt`` extra):

    .venv/bin/python tests/data/make_salt_keys.py > raetsalt/config_salt_keys.py

The list is the union of Salt's ``VALID_OPTS`` and the keys of its master and minion
defaults (``DEFAULT_MASTER_OPTS``, ``DEFAULT_MINION_OPTS``), plus the few keys Salt's
documentation gives for the master and minion files that Salt reads without declaring
them (``EXTRA_KEYS`` below).  raetsalt reads the generated module at run time and never
imports Salt for it; ``tests/test_config_salt_keys.py`` checks the file still matches the
installed Salt.
"""

from __future__ import annotations

import sys
import textwrap

# Documented master/minion keys that Salt reads with opts.get() (or opts[...]) but does
# not declare: its minion docs (conf_minion) and the code that reads them
# (salt/minion.py, salt/beacons, salt/modules/pillar.py, salt/utils/decorators,
# salt/metaproxy).
EXTRA_KEYS = ("mine_functions", "mine_interval", "grains_dirs", "returner_dirs", "beacons",
              "use_superseded", "pillar_raise_on_missing", "module_executors", "proxy")


def known_keys() -> tuple[str, list[str]]:
    """(Salt's version, the sorted keys)."""
    import salt.config
    import salt.version

    keys = set(salt.config.VALID_OPTS)
    keys |= set(salt.config.DEFAULT_MASTER_OPTS) | set(salt.config.DEFAULT_MINION_OPTS)
    keys |= set(EXTRA_KEYS)
    return str(salt.version.__version__), sorted(k for k in keys if isinstance(k, str))


def module_text(version: str, keys: list[str]) -> str:
    body = textwrap.fill(
        " ".join(repr(k) + "," for k in keys), width=96, initial_indent="    ",
        subsequent_indent="    ", break_on_hyphens=False, break_long_words=False,
    )
    return (
        '"""The config keys Salt knows (master and minion), so that a Salt config loads.\n'
        "\n"
        "Generated from Salt's own defaults by tests/data/make_salt_keys.py; do not edit.\n"
        "A key here that raetsalt does not use is ignored with one warning; a key in\n"
        'neither this list nor raetsalt\'s schema is an error.\n"""\n\n'
        f'SALT_VERSION = "{version}"\n\n'
        "SALT_KEYS: frozenset[str] = frozenset((\n"
        f"{body}\n"
        "))\n"
    )


def main() -> int:
    version, keys = known_keys()
    sys.stdout.write(module_text(version, keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
