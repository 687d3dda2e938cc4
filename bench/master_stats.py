"""``raetsalt-master`` with its road's counters written to a file every second (for
``bench_many_minions.py --stats``: busy answers, recalls, redone handshakes, drops).

    .venv/bin/python bench/master_stats.py STATS_FILE -c CONFIG_DIR [daemon options]
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import raetsalt.engine.road as road_module
from raetsalt.cli.master import main

ROADS: list[Any] = []
_init = road_module.Road.__init__


def _recording_init(self: Any, *args: Any, **kwargs: Any) -> None:
    _init(self, *args, **kwargs)
    ROADS.append(self)


def _write(path: str) -> None:
    while True:
        time.sleep(1.0)  # a sampling period, not synchronisation
        counters = {k: v for road in ROADS for k, v in dict(road.stats).items()}
        counters["at"] = time.time()
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(counters, handle)
        os.replace(tmp, path)


if __name__ == "__main__":
    road_module.Road.__init__ = _recording_init  # type: ignore[method-assign]
    threading.Thread(target=_write, args=(sys.argv[1],), daemon=True).start()
    sys.exit(main(sys.argv[2:]))
