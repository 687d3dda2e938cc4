"""Aliases that let scripts written for ``salt.utils`` run with ``raetsalt.utils``."""
