"""The transport base: what the pump needs from an upstream transport, and what transports share.

A transport answers `request()` with the upstream's Response (or raises a
RelayError), sends one-way messages with `send_oneway()`, and hands every other
message the upstream sends (notifications, server requests, responses nobody is
waiting for) to the sink. `cancel_grace()` says how long a cancelled request's
reply stream may still carry other messages worth reading. This module knows no concrete transport: they build on
it (relay/streamable.py, relay/legacy_sse.py), and relay/auto.py picks one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from gevent.event import AsyncResult

from mcpgate.core import jsonrpc
from mcpgate.relay import errors

log = logging.getLogger("mcpgate.relay")

Upstream = jsonrpc.Request | jsonrpc.Notification | jsonrpc.Response
Sink = Callable[[Upstream], None]
OneWay = jsonrpc.Notification | jsonrpc.Response


class Transport(Protocol):
    def request(self, req: jsonrpc.Request) -> jsonrpc.Response: ...

    def send_oneway(self, message: OneWay) -> None: ...

    def close(self) -> None: ...

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        """Seconds the pump keeps reading a cancelled request's reply stream (its response and progress
        dropped, every other message forwarded) before closing it; 0 closes it at once."""
        ...


class EndedTransport:
    """What an ended relay holds instead of its transport (closed by then): nothing goes upstream any more, and
    the transport's sink (the relay's bound method) no longer makes a reference cycle with the relay."""

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        raise errors.ShuttingDown("relay has shut down")

    def send_oneway(self, message: OneWay) -> None:
        return None

    def close(self) -> None:
        return None

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        return 0.0


def decode_upstream(data: bytes) -> list[Upstream]:
    """The JSON-RPC messages in one upstream payload (a JSON body or an SSE event's data)."""
    return upstream_messages(jsonrpc.parse(data))


def upstream_messages(parsed: jsonrpc.Message) -> list[Upstream]:
    """The JSON-RPC messages in a parsed upstream payload; invalid ones are logged and dropped."""
    items = parsed.items if isinstance(parsed, jsonrpc.Batch) else [parsed]
    out: list[Upstream] = []
    for item in items:
        if isinstance(item, (jsonrpc.Request, jsonrpc.Notification, jsonrpc.Response)):
            out.append(item)
        else:
            reason = item.reason if isinstance(item, jsonrpc.Invalid) else "nested batch"
            log.warning("dropped an invalid message from upstream: %s", reason)
    return out


def json_reply(req: jsonrpc.Request, body: bytes, route: Callable[[Upstream], None]) -> jsonrpc.Response:
    """The response to `req` in a JSON reply body; every other message the body holds goes to `route`.
    InvalidUpstream when the body is not JSON or holds no response to it."""
    parsed = jsonrpc.parse(body)
    if isinstance(parsed, jsonrpc.Invalid) and parsed.code == jsonrpc.PARSE_ERROR:
        raise errors.InvalidUpstream(f"upstream sent invalid JSON in reply to {req.method}: {errors.excerpt(body)}")
    reply = None
    for message in upstream_messages(parsed):
        if reply is None and isinstance(message, jsonrpc.Response) and is_reply_to(message, req.id):
            reply = message
        else:
            route(message)
    if reply is None:
        excerpt = errors.excerpt(body)
        raise errors.InvalidUpstream(f"upstream's JSON reply was not a response to {req.method}: {excerpt}")
    return reply


class ReplyWaiters:
    """Requests waiting, by id, for a reply that may arrive on another stream than their own."""

    def __init__(self) -> None:
        self._waiting: dict[jsonrpc.IdKey, AsyncResult] = {}

    @contextmanager
    def expect(self, req_id: jsonrpc.Id) -> Iterator[AsyncResult]:
        """A result that deliver() sets when the reply to req_id arrives; registered for the block only."""
        key = jsonrpc.id_key(req_id)
        waiter = AsyncResult()
        self._waiting[key] = waiter
        try:
            yield waiter
        finally:
            if self._waiting.get(key) is waiter:
                del self._waiting[key]

    def deliver(self, message: Upstream) -> bool:
        """Hand a response to the request waiting for it; False when nobody waits for this message."""
        if isinstance(message, jsonrpc.Response) and message.id is not None:
            waiter = self._waiting.get(jsonrpc.id_key(message.id))
            if waiter is not None and not waiter.ready():
                waiter.set(message)
                return True
        return False

    def fail_all(self, error: Callable[[], Exception]) -> None:
        """Every waiting request gets an error: its reply will not come."""
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.ready():
                waiter.set_exception(error())


def is_reply_to(message: Upstream, req_id: jsonrpc.Id) -> bool:
    return (
        isinstance(message, jsonrpc.Response)
        and message.id is not None
        and jsonrpc.id_key(message.id) == jsonrpc.id_key(req_id)
    )


def should_fall_back(status: int, body: bytes) -> bool:
    """The back-compatibility rule: 405 to an initialize POST (a Streamable HTTP endpoint takes POST, so this URL
    is not one, whatever the body says), or 400/404 unless the body is a JSON-RPC error (a Streamable HTTP server
    refusing this initialize)."""
    if status == 405:
        return True
    return status in (400, 404) and not errors.is_jsonrpc_error(body)
