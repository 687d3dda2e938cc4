"""Salt functions whose other end raetsalt does not serve, and their one-line answer.

A Salt function that needs something a raetsalt minion or master does not run (a
runner or a wheel function run on the minion's host) would otherwise hang until its
own time-out or end in a traceback, or answer ``True`` for work that was not done.
``unserved(fun)`` names the feature instead; the job fails at once with
``ERROR executing '<fun>': <the feature> ...`` (retcode 1), before Salt's function runs.
"""

from __future__ import annotations

UNSERVED = {
    "saltutil.runner": "runners are not run on raetsalt minions: use raetsalt-run on "
                       "the master, or publish.runner (peer_run)",
    "saltutil.wheel": "wheel functions are not run on raetsalt minions: use raetsalt-key "
                      "on the master",
}
"""Function -> what is not served."""
UNSERVED_MODULES: dict[str, str] = {}
"""Module -> what is not served (every function of the module)."""


def unserved(fun: str) -> str | None:
    """Why ``fun`` cannot work on a raetsalt minion, or None when it can."""
    return UNSERVED.get(fun) or UNSERVED_MODULES.get(fun.split(".", 1)[0])
