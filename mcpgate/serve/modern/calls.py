"""A client request carried by a pooled child (Call), and what the child sends for it on its way to the client.

Progress and log messages go to the call's stream, in the child's order, before its result. While the call is
parked (its HTTP reply was an InputRequiredResult and the child goes on working) they are kept, bounded like a
stream, and the retry that resumes the call gets them first on its own stream, progress under the retry's own
progress token (a client may give each request its own: the official SDK uses the request id), then the result.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpgate.core import jsonrpc, mrtr, wire
from mcpgate.core.jsonrpc import Id, Notification, Request
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.observe.audit import Started
from mcpgate.serve.sessions.stream import Stream

_minted = itertools.count(1)  # unique in the worker: a minted id is never reused, so a late answer finds nothing


def mint(kind: str = "") -> str:
    return f"mcpgate-{kind}{next(_minted)}"


class Asked(Protocol):
    """A call's continuation, once it asked its client for input, as the call's own side uses it (modern/bridge.py)."""

    @property
    def parked(self) -> bool: ...

    def finished(self, data: bytes) -> None: ...


class Carrier(Protocol):
    """The child a call runs on, as the call's client side uses it (modern/pooled_child.py)."""

    @property
    def label(self) -> str: ...

    def cancel(self, call: Call, reason: str) -> None: ...


@dataclass(eq=False, slots=True)
class Call:
    """One client request in flight on a child (or parked, answered with input_required, awaiting a retry)."""

    client_id: Id
    minted: str
    method: str
    name: str | None  # params.name or params.uri: a retry must name the same
    stream: Stream
    principal: str
    capabilities: dict[str, Any]
    log_level: str | None
    client_token: Id | None = None
    minted_token: str | None = None
    bridged: bool = False  # an MRTR method on a legacy child (its input requests are bridged or refused)
    continuation: Asked | None = None  # once it asked its client for input (modern/bridge.py)
    finished: bool = False  # answered by the child, cancelled or abandoned
    # what the child sent for the call while it was parked (progress, log messages), for the retry's stream
    waiting: deque[Notification] = field(default_factory=deque)
    waiting_bytes: int = 0
    input_responses: dict[str, Any] | None = None  # answers the request carried ahead (its continuation's, once asked)
    child: Carrier | None = None  # where it runs (set by start_call)
    error_code: int | None = None  # the code of the child's error answer, when it was one
    sent: float = field(default_factory=time.monotonic)  # when it was made (MCPGATE_REQUEST_TIMEOUT)
    tools: ToolFilter | None = None  # a tools/list call's filter: its result loses the hidden tools
    task_id: str | None = None  # a task method's: the client's task id (modern/tasks.py), its answer's taskId
    audit: Started | None = None  # its audit line so far, while the audit log is on (mcpgate/observe/audit.py)

    @property
    def parked(self) -> bool:
        """Its HTTP reply was an input_required result: the child still works on it (or has answered: held)."""
        return self.continuation is not None and self.continuation.parked


def new_call(
    request: Request,
    principal: str,
    capabilities: dict[str, Any],
    stream: Any,
    *,
    bridged: bool = False,
    input_responses: dict[str, Any] | None = None,
    tools: ToolFilter | None = None,
) -> Call:
    """A Call for a client request (its id, name, log level and progress token read once, here)."""
    params = request.params
    name = level = token = None
    if isinstance(params, dict):
        name = mrtr.call_name(request.method, params)
        meta = params.get("_meta")
        if isinstance(meta, dict):
            level, token = meta.get(wire.META_LOG_LEVEL), meta.get("progressToken")
    return Call(
        request.id,
        mint(),
        request.method,
        name if isinstance(name, str) else None,
        stream,
        principal,
        capabilities,
        level if isinstance(level, str) else None,
        token if token is not None and jsonrpc.is_valid_id(token) else None,  # as jsonrpc.progress_token
        bridged=bridged,
        input_responses=input_responses,
        tools=tools,
    )


def to_client(call: Call, message: Notification) -> bool:
    """A notification the child sent for `call`: on the call's stream now or, while the call is parked, kept for
    the retry's stream. False when keeping it dropped the oldest one kept (past the stream's bounds)."""
    if not call.parked:
        data = for_client(call, message)
        if data is not None:
            call.stream.deliver(data)
        return True
    size, limits, kept = _size(message), call.stream.limits, True
    while call.waiting and (len(call.waiting) >= limits.messages or call.waiting_bytes + size > limits.bytes):
        call.waiting_bytes -= _size(call.waiting.popleft())
        kept = False
    call.waiting.append(message)
    call.waiting_bytes += size
    return kept


def for_client(call: Call, message: Notification) -> bytes | None:
    """A notification of the child's as the call's client gets it: progress under the client's own token (None
    when the request the call answers now asked for none)."""
    if message.method != "notifications/progress":
        return jsonrpc.raw_bytes(message)
    if call.client_token is None:
        return None
    params = message.params if isinstance(message.params, dict) else {}
    out = {"jsonrpc": "2.0", "method": message.method, "params": {**params, "progressToken": call.client_token}}
    return jsonrpc.encode(out)


def resume(call: Call, request: Request, stream: Stream) -> None:
    """A retry carries the parked call on: its stream gets what the child sent meanwhile (progress under the
    retry's own token), then (the caller's part) the call's result if it came."""
    call.client_id, call.stream = request.id, stream
    call.client_token = jsonrpc.progress_token(request)
    while call.waiting:
        data = for_client(call, call.waiting.popleft())
        if data is not None:
            stream.deliver(data)
    call.waiting_bytes = 0


def _size(message: Notification) -> int:
    return len(message.raw) if message.raw is not None else len(jsonrpc.encode(message.obj))
