"""Functions to check that a minion answers and that arguments arrive as sent."""

from __future__ import annotations

import time
from typing import Any

from raetsalt import __version__
from raetsalt.execution.loader import instant


@instant
def ping() -> bool:
    """Return True: the minion received the job and answered."""
    return True


@instant
def version() -> str:
    """Return the raetsalt version running on the minion."""
    return __version__


@instant
def echo(text: Any) -> Any:
    """Return ``text`` unchanged."""
    return text


def sleep(length: float) -> bool:
    """Sleep ``length`` seconds, then return True (other jobs keep running meanwhile)."""
    time.sleep(float(length))
    return True


def arg(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Return the positional and keyword arguments as received (with the job's
    ``__pub_*`` data, as Salt shows it)."""
    return {"args": list(args), "kwargs": kwargs}


def kwarg(**kwargs: Any) -> dict[str, Any]:
    """Return the keyword arguments as received."""
    return kwargs


def fib(num: int) -> list[Any]:
    """Return ``[the num-th Fibonacci number, seconds it took]``."""
    num = int(num)
    if num < 0:
        raise ValueError("Negative number is not allowed!")
    start = time.perf_counter()
    prev, curr = 0, 1
    if num < 2:
        return [num, time.perf_counter() - start]
    for _ in range(num - 1):
        prev, curr = curr, prev + curr
    return [curr, time.perf_counter() - start]


def exception(message: str = "Test exception") -> None:
    """Raise an exception with ``message`` (to test how failures are reported)."""
    raise Exception(message)  # noqa: TRY002 - the point is a plain exception
