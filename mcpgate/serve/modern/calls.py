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
from typing import Any, Protocol

from mcpgate.core import jsonrpc, wire
from mcpgate.core.jsonrpc import Id, Notification, Request
from mcpgate.core.modern import NAME_FIELD, request_meta
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.observe.audit import Started
from mcpgate.serve.sessions.stream import Stream

_minted = itertools.count(1)  # unique in the worker: a minted id is never reused, so a late answer finds nothing
_next_minted = _minted.__next__
_now = time.monotonic
_LOG_LEVEL = wire.META_LOG_LEVEL
_UNREAD: Any = object()  # new_call's `meta` when its caller has not read it


def mint(kind: str = "") -> str:
    return f"mcpgate-{kind}{_next_minted()}"


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


class Call:
    """One client request in flight on a child (or parked, answered with input_required, awaiting a retry).

    A plain class with slots, made by new_call alone, which sets every member (made for every call: a dataclass's
    generated __init__ with keyword arguments and default factories took about twice the instructions, and an
    __init__ of its own a frame and twelve arguments more)."""

    __slots__ = (
        "audit",
        "bridged",
        "capabilities",
        "child",
        "client_id",
        "client_token",
        "continuation",
        "error_code",
        "finished",
        "input_responses",
        "log_level",
        "method",
        "minted",
        "minted_token",
        "name",
        "principal",
        "sent",
        "stream",
        "task_id",
        "tools",
        "waiting",
        "waiting_bytes",
    )

    # every member, as new_call sets it
    client_id: Id
    minted: str  # the id the child gets in the client's stead
    method: str
    name: str | None  # params.name or params.uri: a retry must name the same
    stream: Stream
    principal: str
    capabilities: dict[str, Any]
    log_level: str | None
    client_token: Id | None
    minted_token: str | None  # the progress token the child gets in the client's stead (set as the call starts)
    bridged: bool  # an MRTR method on a legacy child (its input requests are bridged or refused)
    continuation: Asked | None  # once it asked its client for input (modern/bridge.py)
    finished: bool  # answered by the child, cancelled or abandoned
    # what the child sent for the call while it was parked (progress, log messages), for the retry's stream (made
    # when the first one is kept)
    waiting: deque[Notification] | None
    waiting_bytes: int
    input_responses: dict[str, Any] | None  # answers the request carried ahead (its continuation's)
    child: Carrier | None  # where it runs (set by start_call)
    error_code: int | None  # the code of the child's error answer, when it was one
    sent: float  # when it was made (MCPGATE_REQUEST_TIMEOUT)
    tools: ToolFilter | None  # a tools/list call's filter: its result loses the hidden tools
    task_id: str | None  # a task method's: the client's task id (modern/tasks.py), its answer's taskId
    audit: Started | None  # its audit line so far, while the audit log is on (mcpgate/observe/audit.py)

    @property
    def parked(self) -> bool:
        """Its HTTP reply was an input_required result: the child still works on it (or has answered: held)."""
        return self.continuation is not None and self.continuation.parked


def new_call(
    request: Request,
    principal: str,
    capabilities: dict[str, Any],
    stream: Any,
    meta: Any = _UNREAD,
    bridged: bool = False,
    input_responses: dict[str, Any] | None = None,
    tools: ToolFilter | None = None,
) -> Call:
    """A Call for a client request (its id, name, log level and progress token read once, here). `meta`: the
    request's params._meta, given by a caller that read it (core/modern.request_meta's, read here when not given)."""
    params = request.params
    method = request.method
    field = NAME_FIELD.get(method)  # as mrtr.call_name
    name = params.get(field) if field is not None and (type(params) is dict or isinstance(params, dict)) else None
    if meta is _UNREAD:
        meta = request_meta(request)
    level, token = (meta.get(_LOG_LEVEL), meta.get("progressToken")) if meta is not None else (None, None)
    if token is not None and not jsonrpc.is_valid_id(token):  # as jsonrpc.progress_token
        token = None
    call = _new(Call)
    call.client_id = request.id
    call.minted = f"mcpgate-{_next_minted()}"  # as mint()
    call.method = method
    call.name = name if type(name) is str or isinstance(name, str) else None
    call.stream = stream
    call.principal = principal
    call.capabilities = capabilities
    call.log_level = level if type(level) is str or isinstance(level, str) else None
    call.client_token = token
    call.minted_token = None
    call.bridged = bridged
    call.continuation = None
    call.finished = False
    call.waiting = None
    call.waiting_bytes = 0
    call.input_responses = input_responses
    call.child = None
    call.error_code = None
    call.sent = _now()
    call.tools = tools
    call.task_id = None
    call.audit = None
    return call


_new = object.__new__  # a bare Call (new_call sets every member)


def to_client(call: Call, message: Notification) -> bool:
    """A notification the child sent for `call`: on the call's stream now or, while the call is parked, kept for
    the retry's stream. False when keeping it dropped the oldest one kept (past the stream's bounds)."""
    if not call.parked:
        data = for_client(call, message)
        if data is not None:
            call.stream.deliver(data)
        return True
    size, limits, kept = _size(message), call.stream.limits, True
    waiting = call.waiting
    if waiting is None:
        waiting = call.waiting = deque()
    while waiting and (len(waiting) >= limits.messages or call.waiting_bytes + size > limits.bytes):
        call.waiting_bytes -= _size(waiting.popleft())
        kept = False
    waiting.append(message)
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
    waiting = call.waiting
    while waiting:
        data = for_client(call, waiting.popleft())
        if data is not None:
            stream.deliver(data)
    call.waiting_bytes = 0


def _size(message: Notification) -> int:
    return len(message.raw) if message.raw is not None else len(jsonrpc.encode(message.obj))
