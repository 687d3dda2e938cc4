"""``raetsalt --subset N``: run on N random minions of the target that have the function,
as Salt's ``cmd_subset`` picks them (it asks the target for ``sys.list_functions``)."""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from ._auth import MasterClient
from ._publish import Command, publish


def pick_subset(client: MasterClient, args: argparse.Namespace, command: Command,
                timeout: float, auth: dict[str, Any], size: int) -> list[str]:
    """At most ``size`` minions, in random order, that list every function of the
    command; empty when none does (or nothing matched)."""
    listing = publish(client, command.tgt, args.tgt_type or "glob", "sys.list_functions",
                      [], args, timeout, auth)
    if not listing.minions or not listing.jid:
        return []
    answers = list(listing.returns(time.monotonic() + timeout, timeout))
    random.shuffle(answers)
    wanted = [f.strip() for f in command.fun.split(",")]
    chosen: list[str] = []
    for minion, ret in answers:
        functions = ret.get("return")
        if isinstance(functions, list | tuple | dict) and all(f in functions for f in wanted):
            chosen.append(minion)
        if len(chosen) >= size:
            break
    return chosen
