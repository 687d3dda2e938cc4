"""Remote execution decided without I/O: the master's and the minion's job services
(``master``, ``minion``), peer relaying (``peer``), the runners (``runners``), jids
(``jids``) and what the services need from outside as small interfaces (``ports``:
``Roster``, ``JobStore``, ``GrainsStore``, ``RunnerContext``).  The messages they speak
are the command protocol (``raetsalt.protocol``), which the CLIs, the ACLs and the
execution modules share.

Nothing here opens a socket or a file, forks or reads a clock (``tests/test_layers.py``
checks it): time comes in as ``now`` or an injected ``utcnow``, and the answers are
actions (``ToMinion``, ``ToClient``, ``Fire``, ``Spawn``, ``ToMaster``...) that the
daemon's adapters in ``raetsalt.daemon`` carry out (``master_adapter``,
``minion_adapter``, ``executor``, ``jobcache``, ``datacache``, ``roster``); the CLIs'
client is ``raetsalt.drivers.laneclient``."""
