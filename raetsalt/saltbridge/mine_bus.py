"""Salt's mine module on a raetsalt minion: how its writes reach the master.

Design.  Salt's own ``salt.modules.mine`` runs unchanged in the zygote's job processes
(``mine.*`` always goes to Salt's loader when the loader is in use, so ``mine.send`` can
run any Salt function).  It reads with ``_mine_get`` through Salt's request channel,
which is already raetsalt's (``raetsalt.saltbridge.channel``: the load goes over the
road as ``salt_req``).  It writes differently: ``_mine``, ``_mine_delete`` and
``_mine_flush`` are fired on the minion's own bus under the tag ``_minion_mine``, and
Salt's minion daemon forwards them to the master and forgets the answer, so
``mine.send`` returns True whatever became of the data.  Here the job's bus
(``saltjob._MinionBus``) hands that tag to ``send`` instead: the load goes to the
master through the same channel, in the job process, and the function returns what the
master answered (True once stored); a refusal or an unreachable master raises Salt's
``SaltClientError``, so ``mine.send`` fails with the reason rather than answering True
for data that was not stored.  Where Salt's loader is not in use, raetsalt's native
``mine`` module (``raetsalt.execution.modules.mine``) sends the same loads.  The
master's side: ``raetsalt.services.mine``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import channel

MINE_TAG = "_minion_mine"
"""The tag Salt's mine module fires its writes under."""


def send(opts: Mapping[str, Any], load: Any) -> Any:
    """Send a mine write ``load`` (Salt's ``{cmd, id, data, clear}`` and kin) to the
    master; its answer, or Salt's ``SaltClientError``/``SaltReqTimeoutError``."""
    import salt.exceptions

    if not isinstance(load, dict) or load.get("cmd") not in ("_mine", "_mine_delete",
                                                             "_mine_flush"):
        raise salt.exceptions.SaltClientError("not a mine load")
    body = {k: v for k, v in load.items() if k != "tok"}
    return channel.RaetReqChannel(dict(opts)).send(body)
