"""What the pump needs from an upstream transport, and the auto-selecting one.

A transport answers `request()` with the upstream's Response (or raises a
RelayError), sends one-way messages with `send_oneway()`, and hands every other
message the upstream sends (notifications, server requests, responses nobody is
waiting for) to the sink. `AutoTransport` starts with Streamable HTTP and
switches to HTTP+SSE at the same URL when the initialize is refused the way a
2024-11-05 server refuses it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, Union

from gevent.event import AsyncResult

from mcpgate.core import jsonrpc
from mcpgate.relay import errors
from mcpgate.relay.http_client import HttpClient

log = logging.getLogger("mcpgate.relay")

Upstream = Union[jsonrpc.Request, jsonrpc.Notification, jsonrpc.Response]
Sink = Callable[[Upstream], None]
OneWay = Union[jsonrpc.Notification, jsonrpc.Response]

MODES = ("auto", "streamable-http", "sse")


class Transport(Protocol):
    def request(self, req: jsonrpc.Request) -> jsonrpc.Response: ...

    def send_oneway(self, message: OneWay) -> None: ...

    def close(self) -> None: ...


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
    return isinstance(message, jsonrpc.Response) and message.id is not None \
        and jsonrpc.id_key(message.id) == jsonrpc.id_key(req_id)


def should_fall_back(status: int, body: bytes) -> bool:
    """The back-compatibility rule: 400/404/405 to an initialize POST, unless the body is a JSON-RPC error."""
    return status in (400, 404, 405) and not errors.is_jsonrpc_error(body)


class AutoTransport:
    """Streamable HTTP first; HTTP+SSE when the first initialize says the server is older."""

    def __init__(self, url: str, http: HttpClient, sink: Sink, mode: str) -> None:
        from mcpgate.relay.legacy_sse import LegacySseTransport
        from mcpgate.relay.streamable import StreamableTransport

        if mode not in MODES:
            raise ValueError(f"unknown transport {mode!r}")
        self.url, self.http, self.sink, self.mode = url, http, sink, mode
        self._legacy_cls = LegacySseTransport
        self._streamable_cls = StreamableTransport
        self.active: Transport
        if mode == "sse":
            self.active = LegacySseTransport(url, http, sink)
        else:
            self.active = StreamableTransport(url, http, sink, probe=(mode == "auto"))
        self._decided = mode != "auto"

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        if self._decided or req.method != "initialize":
            return self.active.request(req)
        try:
            reply = self.active.request(req)
        except errors.FallbackToSse as refused:
            return self._fall_back(req, refused)
        self._decided = True
        log.info("upstream speaks Streamable HTTP")
        return reply

    def _fall_back(self, req: jsonrpc.Request, refused: errors.FallbackToSse) -> jsonrpc.Response:
        log.info("%s; falling back to HTTP+SSE at %s", refused.message, errors.redact(self.url))
        self.active.close()
        legacy = self._legacy_cls(self.url, self.http, self.sink)
        try:
            reply = legacy.request(req)
        except errors.RelayError as exc:
            legacy.close()
            self.active = self._streamable_cls(self.url, self.http, self.sink, probe=True)
            exc.message = f"{refused.message}; the HTTP+SSE fallback failed too: {exc.message}"
            raise
        self.active, self._decided = legacy, True
        return reply

    def send_oneway(self, message: OneWay) -> None:
        self.active.send_oneway(message)

    def close(self) -> None:
        self.active.close()
