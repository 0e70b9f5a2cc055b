"""What each MCP endpoint request counts, while metrics are on (serve/metrics.py serves them at /metrics).

    Observed(app, figures)        WSGI middleware around the Endpoint, feeding the Metrics' figures
    Figures                       the per-request figures, plain numbers read at scrape time
    method_label(environ)         a request's bounded method label

Per MCP endpoint request (one the Endpoint routed to a server: it names it in the request's context before calling
the handler), `Observed` counts the request (server, method, status), its seconds, the bytes read from its body
and the bytes of its reply as they are sent (an SSE stream's too, chunk by chunk, and its seconds when it closes),
and how many SSE replies are open. `method` is an MCP method the specification defines (else "other"; "batch",
"response", "invalid", the HTTP method of a GET/DELETE, the Mcp-Method header of a request refused before its
body was read, else "unknown"): labels stay bounded.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from mcpgate.core import wire
from mcpgate.core.jsonrpc import Batch, Invalid, Notification, Request
from mcpgate.core.jsonrpc import Response as RpcResponse
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import StartResponse

METHOD_HEADER = "HTTP_" + wire.METHOD.upper().replace("-", "_")  # Mcp-Method in a WSGI environ
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The request and notification methods of the specification's revisions (2024-11-05 to 2026-07-28).
METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "subscriptions/listen",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "tasks/get",
        "tasks/result",
        "tasks/list",
        "tasks/cancel",
        "notifications/initialized",
        "notifications/cancelled",
        "notifications/progress",
        "notifications/message",
        "notifications/roots/list_changed",
        "notifications/resources/updated",
        "notifications/resources/list_changed",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/elicitation/complete",
        "notifications/tasks/status",
    }
)


def method_label(environ: dict[str, Any]) -> str:
    """The request's bounded method label, from the message its handler parsed (its context's `message`)."""
    message: Any = context(environ).message
    kind = type(message)
    if kind is Request or kind is Notification:
        method: str = message.method
        return method if method in METHODS else "other"
    if isinstance(message, Batch):
        return "batch"
    if isinstance(message, RpcResponse):
        return "response"
    if isinstance(message, Invalid):
        return "invalid"
    verb = str(environ.get("REQUEST_METHOD", ""))
    if verb != "POST":
        return verb if verb in ("GET", "DELETE", "HEAD", "OPTIONS") else "other"
    header = environ.get(METHOD_HEADER)  # a request refused before its body was read
    return header if header in METHODS else "unknown"


class Figures:
    """The per-request figures as plain numbers: the gateway is one gevent worker (one thread; a greenlet
    never switches inside these updates), so they need no lock; prometheus_client reads them at scrape time."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str, str], int] = defaultdict(int)  # (server, method, status)
        self.seconds: dict[tuple[str, str], list[float]] = {}  # (server, method): per-bucket counts, then the sum
        self.bytes_in: defaultdict[str, int] = defaultdict(int)
        self.bytes_out: defaultdict[str, int] = defaultdict(int)
        self.sse_open: defaultdict[str, int] = defaultdict(int)

    def observe(self, server: str, method: str, seconds: float) -> None:
        counts = self.seconds.get((server, method))
        if counts is None:
            counts = self.seconds[server, method] = [0.0] * (len(BUCKETS) + 2)
        counts[bisect.bisect_left(BUCKETS, seconds)] += 1  # the first bucket whose bound is >= seconds
        counts[-1] += seconds


class CountingInput:
    """wsgi.input, counting the bytes read from it."""

    __slots__ = ("count", "stream")

    def __init__(self, stream: Any) -> None:
        self.stream, self.count = stream, 0

    def read(self, *args: Any) -> bytes:
        data: bytes = self.stream.read(*args)
        self.count += len(data)
        return data

    def readline(self, *args: Any) -> bytes:
        data: bytes = self.stream.readline(*args)
        self.count += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


class Observed:
    """WSGI middleware around the Endpoint: the per-request figures of the MCP endpoint requests (those the
    Endpoint routed to a server: it names it in the request's context before calling the handler)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], figures: Figures) -> None:
        self.app, self.figures = app, figures

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        body = environ["wsgi.input"] = CountingInput(environ.get("wsgi.input"))
        seen: list[Any] = []
        noted = context(environ)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            seen[:] = [status, headers]
            return start_response(status, headers, exc_info)

        try:
            result = self.app(environ, start)
        except BaseException:
            if (server := noted.server) is not None:
                self._count(server, environ, body, "500", started)
            raise
        server = noted.server
        if server is None:
            return result
        status = seen[0][:3] if seen else "500"
        if isinstance(result, list):  # the whole reply is here: count it now
            self.figures.bytes_out[server] += sum(map(len, result))
            self._count(server, environ, body, status, started)
            return result
        sse = bool(seen) and any(k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in seen[1])
        method = self._count(server, environ, body, status, None)
        return Counted(result, self.figures, server, method, started, sse)

    def _count(
        self, server: str, environ: dict[str, Any], body: CountingInput, status: str, started: float | None
    ) -> str:
        figures, method = self.figures, method_label(environ)
        figures.requests[server, method, status] += 1
        if body.count:
            figures.bytes_in[server] += body.count
        if started is not None:
            figures.observe(server, method, time.perf_counter() - started)
        return method


class Counted:
    """A streamed reply: its bytes counted as they go, its seconds (and the SSE gauge) when it closes."""

    __slots__ = ("_closed", "figures", "inner", "method", "server", "sse", "started")

    def __init__(
        self, inner: Iterable[bytes], figures: Figures, server: str, method: str, started: float, sse: bool
    ) -> None:
        self.inner, self.figures, self.server, self.method, self.started = inner, figures, server, method, started
        self.sse, self._closed = sse, False
        if sse:
            figures.sse_open[server] += 1

    def __iter__(self) -> Iterator[bytes]:
        counts, server = self.figures.bytes_out, self.server
        for chunk in self.inner:
            counts[server] += len(chunk)
            yield chunk

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()
        finally:
            self.figures.observe(self.server, self.method, time.perf_counter() - self.started)
            if self.sse:
                self.figures.sse_open[self.server] -= 1
