"""Installation paths, as Salt's ``salt.syspaths`` names them.

``CONFIG_DIR`` is where the CLIs and ``raetsalt.config`` users look for ``master`` and
``minion`` by default; ``RAETSALT_CONFIG_DIR`` in the environment overrides it.
"""

from __future__ import annotations

import os

CONFIG_DIR: str = os.environ.get("RAETSALT_CONFIG_DIR", "/etc/raetsalt")
