"""What the master's and minion's inboxes share: lists of node events, one per serving
step of the flow, each emptied by its step."""

from __future__ import annotations


class StepInbox:
    """Base of a ``@dataclass(slots=True)`` whose fields are the steps' lists."""

    __slots__ = ()

    def drop_unserved(self) -> dict[str, int]:
        """Empty the lists no step emptied since the last pass (a flow without the step
        that serves them): how many were dropped, by list."""
        dropped: dict[str, int] = {}
        names: tuple[str, ...] = type(self).__slots__  # the dataclass's fields
        for name in names:
            queue = getattr(self, name)
            if queue:
                dropped[name] = len(queue)
                queue.clear()
        return dropped
