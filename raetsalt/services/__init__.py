"""Remote execution on the daemons: the master's and the minion's job services (sans-IO),
the runners, the forking job executor and the command protocol the CLIs speak
(``raetsalt.services.protocol``)."""
