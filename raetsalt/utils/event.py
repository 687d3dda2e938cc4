"""``salt.utils.event`` under its Salt name: everything lives in ``raetsalt.event``."""

from raetsalt.event import MasterEvent, MinionEvent, SaltEvent, get_event, tagify

__all__ = ["MasterEvent", "MinionEvent", "SaltEvent", "get_event", "tagify"]
