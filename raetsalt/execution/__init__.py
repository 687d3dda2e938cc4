"""Execution modules: the functions a minion runs for a job (``test.ping``, ``cmd.run``...).

``loader.Loader`` finds them (built-in ones in ``raetsalt/execution/modules`` and the
user's in the minion's ``module_dirs``) and calls them with Salt-style arguments
(``args.parse_input``).  The only code in raetsalt with side effects on the host.
"""
