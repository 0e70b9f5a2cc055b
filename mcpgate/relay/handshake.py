"""The host's MCP handshake, kept so that a new upstream session can be started in its name.

Both transports lose their upstream session now and then (a Streamable HTTP 404,
a dropped HTTP+SSE stream). The host never sees that: the transport replays the
host's own `initialize` (and then its `notifications/initialized`, or the
standard one when the host has not sent it yet) on the new session. This module
keeps the two messages and decides whether the replayed initialize worked.
"""

from __future__ import annotations

from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.relay import errors

INITIALIZED_METHOD = "notifications/initialized"
DEFAULT_INITIALIZED: dict[str, Any] = {"jsonrpc": "2.0", "method": INITIALIZED_METHOD}


def is_initialized(message: jsonrpc.Message) -> bool:
    return isinstance(message, jsonrpc.Notification) and message.method == INITIALIZED_METHOD


class Handshake:
    """The last `initialize` and `notifications/initialized` the host sent upstream."""

    def __init__(self) -> None:
        self._initialize: dict[str, Any] | None = None
        self._initialized: dict[str, Any] | None = None

    @property
    def known(self) -> bool:
        """Whether the host has sent an initialize (so there is something to replay)."""
        return self._initialize is not None

    def remember(self, message: jsonrpc.Message) -> None:
        """Keep the message when it is the host's initialize or initialized; ignore anything else."""
        if isinstance(message, jsonrpc.Request) and message.method == "initialize":
            self._initialize = message.obj
        elif is_initialized(message):
            assert isinstance(message, jsonrpc.Notification)
            self._initialized = message.obj

    def initialize(self, req_id: jsonrpc.Id | None = None) -> jsonrpc.Request:
        """The host's initialize to send again: with its own id, or with req_id when given."""
        if self._initialize is None:
            raise errors.RelayError("no initialize to replay: the host has not sent one")
        obj = self._initialize if req_id is None else dict(self._initialize, id=req_id)
        request = jsonrpc.classify(obj)
        assert isinstance(request, jsonrpc.Request)
        return request

    def initialized(self) -> bytes:
        """The host's initialized notification (the standard one if it has sent none yet), encoded."""
        return jsonrpc.encode(self._initialized or DEFAULT_INITIALIZED)


def check_replayed(reply: jsonrpc.Response) -> None:
    """RelayError("the replayed initialize failed: ...") when the upstream answered it with an error."""
    if reply.is_error:
        raise errors.RelayError(f"the replayed initialize failed: {reply.obj['error'].get('message', '')}")
