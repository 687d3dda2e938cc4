"""The lane: yards of one node talking over Unix-domain datagram sockets (sans-IO)."""

from raetsalt.lane.engine import Lane, MessageReceived, PageDropped, YardReaped
from raetsalt.lane.page import DropReason, PackKind

__all__ = ["DropReason", "Lane", "MessageReceived", "PackKind", "PageDropped", "YardReaped"]
