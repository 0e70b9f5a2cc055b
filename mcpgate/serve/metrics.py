"""Prometheus metrics (MCPGATE_METRICS): what the gateway is doing, at /metrics, in the text format.

Off by default, and then nothing here runs: no route, no wrapper, no counter. Served beyond loopback (a
non-loopback bind, or MCPGATE_PUBLIC_FRONT), it needs MCPGATE_METRICS_TOKEN: the gateway refuses to start
without it (`exposure_problem`), since the labels name every server. When on:

- `Observed` wraps the app's Endpoint: per MCP endpoint request it counts the request (server, method,
  status), its seconds, the bytes read from its body and the bytes of its reply as they are sent (an SSE
  stream's too, chunk by chunk), and how many SSE replies are open.
- the gauges (sessions, children per server) and each gateway's `Tally` (child exits by cause, stream
  drops, write-queue closes: rare events, plain counts) are read when /metrics is scraped.

Labels are bounded: `server` is a configured name, `method` an MCP method the specification defines (else
"other"; "batch", "response", the HTTP method of a GET/DELETE), `status` the HTTP status. No session ids.
"""

from __future__ import annotations

import bisect
import hmac
import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Any, Protocol, cast

from mcpgate.child.process import WRITE_QUEUE_FULL, ChildProcess
from mcpgate.core import wire
from mcpgate.core.jsonrpc import Batch, Invalid, Notification, Request
from mcpgate.core.jsonrpc import Response as RpcResponse
from mcpgate.observe import refusals
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import StartResponse
from mcpgate.serve.pins import guard as pins

if TYPE_CHECKING:  # prometheus_client and Flask are imported only when metrics are on (`install`)
    from flask import Flask
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

METHOD_HEADER = "HTTP_" + wire.METHOD.upper().replace("-", "_")  # Mcp-Method in a WSGI environ
CAUSES = ("clean", "crash", "stopped", "limit")
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


def exit_cause(child: ChildProcess) -> str:
    """Why a child ended (its end_cause), one of CAUSES."""
    return child.end_cause if child.end_cause in CAUSES else "crash"


class Tally:
    """One gateway's rare events, counted when metrics are on and read at scrape time."""

    __slots__ = ("exits", "stream_drops", "write_queue_closes")

    def __init__(self) -> None:
        self.exits: dict[str, int] = dict.fromkeys(CAUSES, 0)
        self.stream_drops = 0
        self.write_queue_closes = 0

    def child_ended(self, child: ChildProcess) -> None:
        cause = exit_cause(child)
        self.exits[cause] = self.exits.get(cause, 0) + 1
        if child.exit_reason == WRITE_QUEUE_FULL:
            self.write_queue_closes += 1

    def stream_dropped(self) -> None:
        self.stream_drops += 1


class Observable(Protocol):
    """What a scrape reads of one published server (serve/servers/server.py's PublishedServer)."""

    @property
    def sessions(self) -> Sized: ...

    @property
    def tally(self) -> Tally | None: ...

    def live_children(self) -> int: ...


Servers = Callable[[], Iterable[tuple[str, Observable]]]  # the published servers by name, at scrape time


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


class FiguresCollector:
    """Every series, at scrape time: the Figures, and the gateways' sessions, children and Tally (a
    prometheus_client Collector by its `collect`; no `describe`: the registry asks for no names)."""

    def __init__(self, servers: Servers, figures: Figures) -> None:
        self.servers, self.figures = servers, figures

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._servers()
        yield refused()
        yield pins.changes()

    def _requests(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        f = self.figures
        requests = CounterMetricFamily(
            "mcpgate_requests", "MCP endpoint requests.", labels=["server", "method", "status"]
        )
        for key, count in f.requests.items():
            requests.add_metric(key, count)
        seconds = HistogramMetricFamily(
            "mcpgate_request_seconds",
            "Seconds until an MCP endpoint request's reply ended (a stream's: its lifetime).",
            labels=["server", "method"],
        )
        for (server, method), counts in f.seconds.items():
            cumulative = list(itertools.accumulate(counts[:-1]))
            buckets = [(str(bound), n) for bound, n in zip(BUCKETS, cumulative, strict=False)]
            seconds.add_metric([server, method], [*buckets, ("+Inf", cumulative[-1])], counts[-1])
        bytes_in = CounterMetricFamily("mcpgate_bytes_in", "Request body bytes read.", labels=["server"])
        bytes_out = CounterMetricFamily("mcpgate_bytes_out", "Reply body bytes sent, as sent.", labels=["server"])
        sse_open = GaugeMetricFamily("mcpgate_sse_streams_open", "SSE replies open.", labels=["server"])
        for family, values in ((bytes_in, f.bytes_in), (bytes_out, f.bytes_out), (sse_open, f.sse_open)):
            for server, value in values.items():
                family.add_metric([server], value)
        yield from (requests, seconds, bytes_in, bytes_out, sse_open)

    def _servers(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sessions = GaugeMetricFamily("mcpgate_sessions", "Open sessions.", labels=["server"])
        children = GaugeMetricFamily(
            "mcpgate_children", "Live child processes (sessions' and pooled).", labels=["server"]
        )
        exits = CounterMetricFamily(
            "mcpgate_child_exits", "Child processes ended, by cause.", labels=["server", "cause"]
        )
        drops = CounterMetricFamily(
            "mcpgate_stream_queue_drops", "Reply streams ended because their client stopped reading.", labels=["server"]
        )
        closes = CounterMetricFamily(
            "mcpgate_write_queue_closes", "Children closed because their stdin queue was full.", labels=["server"]
        )
        for name, gateway in self.servers():
            sessions.add_metric([name], len(gateway.sessions))
            children.add_metric([name], gateway.live_children())
            tally = gateway.tally
            if tally is None:
                continue
            for cause, count in tally.exits.items():
                exits.add_metric([name, cause], count)
            drops.add_metric([name], tally.stream_drops)
            closes.add_metric([name], tally.write_queue_closes)
        yield from (sessions, children, exits, drops, closes)


def refused() -> Metric:
    """What the hostile-network defences refused in this worker, by kind (mcpgate/observe/refusals.py)."""
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(
        "mcpgate_refusals", "Requests the hostile-network defences refused, by kind.", labels=["kind"]
    )
    for kind, count in refusals.COUNTS.items():
        family.add_metric([kind], count)
    return family


class Metrics:
    """The app's own registry (never prometheus_client's global one) over its Figures and gateways."""

    def __init__(self, servers: Servers) -> None:
        from prometheus_client import CollectorRegistry

        self.figures = Figures()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(cast("Collector", FiguresCollector(servers, self.figures)))

    def scrape(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


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

    def __init__(self, app: Callable[..., Iterable[bytes]], metrics: Metrics) -> None:
        self.app, self.figures = app, metrics.figures

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


def bearer_ok(header: str | None, token: str) -> bool:
    """Authorization: Bearer <token>, compared in constant time."""
    scheme, _, given = (header or "").strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def exposure_problem(exposed: Collection[str], token: str) -> str | None:
    """Why /metrics must not be served, or None: reachable beyond loopback (`exposed`: the binds, or a public
    front) without MCPGATE_METRICS_TOKEN, its series would tell anyone every server's name and traffic."""
    if not exposed or token:
        return None
    return (
        f"refusing to serve /metrics beyond loopback ({', '.join(exposed)}) without MCPGATE_METRICS_TOKEN: its "
        "series name every server and count its traffic for anyone who asks. Set MCPGATE_METRICS_TOKEN (the "
        "scraper sends Authorization: Bearer <token>), or serve on loopback only, or set MCPGATE_METRICS=false"
    )


def install(app: Flask, token: str, servers: Servers) -> Metrics:
    """The /metrics route on `app` (behind `token` when set); the Metrics the Endpoint's wrapper feeds."""
    from flask import Response, request
    from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4

    metrics = Metrics(servers)

    @app.get("/metrics")
    def scrape() -> Response:
        if token and not bearer_ok(request.headers.get("Authorization"), token):
            return Response(
                "Unauthorized: /metrics needs the bearer token (MCPGATE_METRICS_TOKEN)\n",
                status=401,
                mimetype="text/plain",
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        return Response(metrics.scrape(), content_type=CONTENT_TYPE_PLAIN_0_0_4)

    return metrics
