"""A traced request's steps and its end, as observe/tracing.py hands them out: the steps' span names, a step timed by
a `with` block (tracing.step; the request path times its own with tracing.now, appended to the request's list),
the steps read from that list (`steps_of`), a streamed body whose close ends the request's spans (tracing.finish),
and whether an answer may mark the request's span (`marks`)."""

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
    """A step timed by a `with` block (tracing.step): what the request path does with tracing.now and the request's
    list."""

    __slots__ = ("began", "name", "trace")

    def __init__(self, trace: Any, name: str) -> None:
        self.trace, self.name, self.began = trace, name, 0.0

    def __enter__(self) -> None:
        self.began = _time()

    def __exit__(self, *_: object) -> None:
        self.trace.append((self.name, self.began, _time()))


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


def steps_of(trace: list[Any]) -> list[tuple[str, float, float]]:
    """A request list's steps: the guard's (its end, a time, right after the start) and those appended as
    (name, start, end)."""
    steps = [(GUARD, trace[0], trace[2])] if len(trace) > 2 and type(trace[2]) is float else []
    steps += [item for item in trace[2:] if type(item) is tuple and len(item) == 3 and type(item[0]) is str]
    return steps


def marks(body: bytes) -> bool:
    """Whether an answer may hold an error or a tool error (`Trace.marked` reads it then): "error" and "isError"
    alike found in one search, no arguments parsed; tools/call's usual answer (one "isError", false, and no
    "error") holds none."""
    parts = body.split(b'rror"')
    return len(parts) > 1 and (len(parts) > 2 or parts[0][-4:] != b'"isE' or parts[1][:6] != b":false")
