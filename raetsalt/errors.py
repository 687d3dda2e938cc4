"""The one exception tree of raetsalt.

``LocalError`` means the caller misused an API; ``RemoteError`` means a peer (or a file,
or a user's input) broke the rules.  Everything that parses bytes from the network raises
only ``BadPacket``; the engine catches exactly that, drops the datagram and counts it.
"""

from __future__ import annotations

from enum import StrEnum

import nacl.exceptions


class RaetSaltError(Exception):
    """Root of every error raetsalt raises on purpose."""


class LocalError(RaetSaltError):
    """The caller used an API in a way it does not allow (wrong state, bad argument)."""


class RemoteError(RaetSaltError):
    """A peer sent something that breaks the protocol."""


class BadPacket(RemoteError):
    """A received datagram is malformed, forged or otherwise unusable.

    ``trigger`` names why, for counters and tests: a member of the dropping layer's reason
    enum (``raetsalt.drops.DropReason`` on the road, ``raetsalt.lane.page.DropReason`` on
    the lane).
    """

    def __init__(self, message: str, trigger: StrEnum) -> None:
        super().__init__(message)
        self.trigger: StrEnum = trigger


class CryptoError(RemoteError, nacl.exceptions.CryptoError):
    """A box did not open or a signature did not verify."""


class KeepError(RaetSaltError):
    """The on-disk keep is unreadable, corrupt or cannot be written."""


class QuotaExceeded(KeepError):
    """A minion's return is over one of the master's quotas (``raetsalt.services.quota``):
    dropped, not stored; the message says which."""


class ConfigError(RaetSaltError):
    """A configuration file or option is invalid; the message names file and key."""


class TargetError(LocalError, ValueError):
    """A target expression is malformed or uses an unsupported matcher."""


class DaemonUnavailable(LocalError):
    """The daemon's manor yard cannot be reached (not running, or no permission)."""


class DaemonNotRunning(DaemonUnavailable):
    """Nothing serves the daemon's manor socket: the daemon is not running."""
