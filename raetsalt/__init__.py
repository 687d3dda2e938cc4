"""raetsalt: RAET (Reliable Asynchronous Event Transport) and a Salt-style system on it.

The protocol core (``wire``, ``crypto``, ``keep``, ``engine``) is sans-IO: bytes and
``now`` in, bytes, events and timers out.  Only ``raetsalt.drivers`` touches sockets and
clocks, and only ``raetsalt.flo`` touches ioflo.
"""

# ioflo 2.0.3 subclasses collections.abc.MutableSet after a bare ``import collections``;
# from Python 3.10 on that submodule is no longer imported at start-up.  Importing it here,
# before anything can import ioflo, is the one fix the whole project needs.
import collections.abc  # noqa: F401

__version__ = "0.1.0"
