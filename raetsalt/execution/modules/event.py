"""Fire events from a job: on the minion's bus, or on the master's."""

from __future__ import annotations

from typing import Any

from raetsalt.execution.loader import Context


def fire(data: Any, tag: str, *, ctx: Context) -> bool:
    """Fire ``data`` with ``tag`` on the minion's own event bus."""
    return ctx.fire_event(tag, data)


def fire_master(
    data: Any, tag: str, preload: dict[str, Any] | None = None, *, ctx: Context
) -> bool:
    """Fire ``data`` with ``tag`` on the master's event bus (``preload`` is merged into
    the event data first, as in Salt)."""
    payload = dict(preload or {})
    payload.update(data if isinstance(data, dict) else {"data": data})
    return ctx.fire_master(tag, payload)


def send(
    tag: str,
    data: dict[str, Any] | None = None,
    with_grains: bool = False,
    *,
    ctx: Context,
    **kwargs: Any,
) -> bool:
    """Send an event to the master's bus with ``tag``; ``data`` and extra keyword
    arguments become the event data (``with_grains`` adds the minion's grains)."""
    payload = dict(data or {})
    payload.update({k: v for k, v in kwargs.items() if not k.startswith("__")})
    if with_grains:
        payload["grains"] = dict(ctx.grains)
    return ctx.fire_master(tag, payload)
