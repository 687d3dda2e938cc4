"""``raetsalt-call --local`` through Salt's loader: Salt's masterless mode.

Functions that a minion would run through Salt's loader (``execution_mode``,
``raetsalt.saltbridge.modes``) run here in the calling process, with
``file_client: local``: ``salt://`` is the minion's own ``file_roots`` and the pillar is
compiled from its own ``pillar_roots``, as ``salt-call --local`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .modes import runs_in_salt, salt_importable, uses_salt


def salt_call_local(opts: Mapping[str, Any], fun: str, arg: list[Any], jid: str
                    ) -> dict[str, Any] | None:
    """The outcome (``JobOutcome`` wire shape) of ``fun`` run through Salt's loader here,
    or None when it runs natively."""
    from raetsalt.execution.loader import Loader

    mode = str(opts.get("execution_mode", "auto"))
    if not uses_salt(mode, salt_importable()) or not runs_in_salt(fun, mode,
                                                                   Loader().functions, arg):
        return None
    from .saltjob import CONFIG_KEYS, SaltRuntime

    config = {key: opts.get(key) for key in CONFIG_KEYS}
    config["file_client"] = "local"
    config["__cli"] = "salt-call"
    runtime = SaltRuntime(config)
    spec = {"jid": jid, "fun": fun, "arg": arg, "tgt": "salt-call", "tgt_type": "glob",
            "user": "", "ret": "", "kind": "call"}
    return runtime.run({"spec": spec, "grains": runtime.grains(),
                        "pillar": runtime.local_pillar()})
