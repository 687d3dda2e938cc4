"""Remote execution decided without I/O: the master's and the minion's job services
(``master``, ``minion``), peer relaying (``peer``), the runners (``runners``), jids
(``jids``), the command protocol the CLIs speak (``protocol``) and what the services need
from outside as small interfaces (``ports``: ``Roster``, ``JobStore``, ``GrainsStore``,
``RunnerContext``).

Nothing here opens a socket or a file, forks or reads a clock (``tests/test_layers.py``
checks it): time comes in as ``now`` or an injected ``utcnow``, and the answers are
actions (``ToMinion``, ``ToClient``, ``Fire``, ``Spawn``, ``ToMaster``...) that the
daemon's adapters in ``raetsalt.daemon`` carry out (``jobs``, ``executor``, ``jobcache``,
``datacache``, ``roster``); the CLIs' client is ``raetsalt.cli.client``."""
