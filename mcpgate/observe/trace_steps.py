"""A traced request's steps and its end, as observe/tracing.py hands them out: the steps' span names, a step timed by
a `with` block (tracing.step; the request path times its own with tracing.now, appended to Trace.steps), and a
streamed body whose close ends the request's spans (tracing.finish)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mcpgate.core.jsonrpc import Request

GUARD, SESSION, POOL, MRTR = "mcpgate.guard", "mcpgate.session", "mcpgate.pool", "mcpgate.mrtr"  # steps' names
_time = time.monotonic  # tracing.now's clock


class Nothing:
    """No step: tracing off, or the request known unsampled."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


NOTHING = Nothing()


class Step:
    """A step timed by a `with` block (tracing.step): what the request path does with tracing.now and Trace.steps."""

    __slots__ = ("began", "name", "trace")

    def __init__(self, trace: Any, name: str) -> None:
        self.trace, self.name, self.began = trace, name, 0.0

    def __enter__(self) -> None:
        self.began = _time()

    def __exit__(self, *_: object) -> None:
        self.trace.took(self.name, self.began)


def step_name(name: str, message: Request | None) -> str:
    """A step's span name: "mcpgate.mrtr" instead of `name` for a `message` that is an MRTR round (a retry carrying
    requestState)."""
    if message is not None and isinstance(message.params, dict) and message.params.get("requestState") is not None:
        return MRTR
    return name


class Ending:
    """A streamed body whose close ends the request's spans."""

    def __init__(self, body: Iterable[bytes], end: Callable[[], None]) -> None:
        self.body, self.end = body, end

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.end()
