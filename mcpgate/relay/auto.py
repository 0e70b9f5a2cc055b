"""The auto-selecting transport: Streamable HTTP first, HTTP+SSE when the server is older.

`AutoTransport` starts with Streamable HTTP and switches to HTTP+SSE at the same
URL when the initialize is refused the way a 2024-11-05 server refuses it (see
transport.should_fall_back); `--transport` can also pin one of the two.
"""

from __future__ import annotations

import logging

from mcpgate.config.declarations import declared
from mcpgate.config.relay_settings import RelaySettings
from mcpgate.core import jsonrpc
from mcpgate.relay import errors
from mcpgate.relay.http_client import HttpClient
from mcpgate.relay.legacy_sse import LegacySseTransport
from mcpgate.relay.streamable import StreamableTransport
from mcpgate.relay.transport import OneWay, Sink, Transport

log = logging.getLogger("mcpgate.relay")

# The --transport choices, as RelaySettings declares them.
MODES = next(setting.choices for setting in declared(RelaySettings) if setting.name == "transport")


class AutoTransport:
    """Streamable HTTP first; HTTP+SSE when the first initialize says the server is older."""

    def __init__(self, url: str, http: HttpClient, sink: Sink, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown transport {mode!r}")
        self.url, self.http, self.sink, self.mode = url, http, sink, mode
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
        legacy = LegacySseTransport(self.url, self.http, self.sink)
        try:
            reply = legacy.request(req)
        except errors.RelayError as exc:
            legacy.close()
            self.active = StreamableTransport(self.url, self.http, self.sink, probe=True)
            exc.message = f"{refused.message}; the HTTP+SSE fallback failed too: {exc.message}"
            raise
        self.active, self._decided = legacy, True
        return reply

    def send_oneway(self, message: OneWay) -> None:
        self.active.send_oneway(message)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        return self.active.cancel_grace(req)

    def close(self) -> None:
        self.active.close()
