"""The process entry of the master's Salt-surfaces child (``raetsalt.daemon.saltbus``
starts ``python -c`` with this module's ``main``): the child's work, with Salt's
``RunnerClient``/``WheelClient`` calls on Salt's local request channel served by
``raetsalt.api.lowcalls`` (the REST API's authorization, wheel and master link)."""

from __future__ import annotations

from raetsalt.api.lowcalls import LowCalls
from raetsalt.daemon import saltbus


def main() -> int:
    return saltbus.main(LowCalls)
