"""The lane: yards of one node talking over Unix-domain datagram sockets (sans-IO)."""

from raetsalt.lane.engine import Lane, PageDropped, YardMessage, YardReaped
from raetsalt.lane.page import PackKind, PageDropReason

__all__ = ["PageDropReason", "Lane", "YardMessage", "PackKind", "PageDropped", "YardReaped"]
