"""Prometheus metrics (MCPGATE_METRICS): what the gateway is doing, at /metrics, in the text format.

Off by default, and then nothing here runs: no route, no wrapper, no counter. Served beyond loopback (a
non-loopback bind, or MCPGATE_PUBLIC_FRONT), it needs MCPGATE_METRICS_TOKEN: the gateway refuses to start
without it (`exposure_problem`), since the labels name every server. When on:

- `Observed` (serve/request_figures.py) wraps the app's Endpoint: per MCP endpoint request it counts the
  request (server, method, status), its seconds, the bytes read from its body and the bytes of its reply as they
  are sent (an SSE stream's too, chunk by chunk), and how many SSE replies are open.
- the gauges (sessions, children per server) and each gateway's `Tally` (child exits by cause, stream
  drops, write-queue closes: rare events, plain counts), the refusals by kind (observe/refusals.py), the
  connections handed between a fleet's instances on one machine (serve/front/handoff.py), the
  pins' changes and, with tracing on, the spans the trace export dropped by reason (observe/span_pipe.py) are
  read when /metrics is scraped (`FiguresCollector`), from the app's own registry.

Labels are bounded: `server` is a configured name, `method` an MCP method the specification defines (else
"other"; "batch", "response", the HTTP method of a GET/DELETE), `status` the HTTP status. No session ids.
"""

from __future__ import annotations

import hmac
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Sized
from typing import TYPE_CHECKING, Protocol, cast

from mcpgate.child.process import WRITE_QUEUE_FULL, ChildProcess
from mcpgate.observe import refusals, tracing
from mcpgate.serve.pins import guard as pins
from mcpgate.serve.request_figures import BUCKETS, Figures

CAUSES = ("clean", "crash", "stopped", "limit")

if TYPE_CHECKING:  # prometheus_client and Flask are imported only when metrics are on (`install`)
    from flask import Flask
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector


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


class FiguresCollector:
    """Every series, at scrape time: the Figures, and the gateways' sessions, children and Tally (a
    prometheus_client Collector by its `collect`; no `describe`: the registry asks for no names)."""

    def __init__(self, servers: Servers, figures: Figures) -> None:
        self.servers, self.figures = servers, figures

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._servers()
        yield refused()
        yield handoffs()
        yield pins.changes()
        yield from spans_dropped()

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


def handoffs() -> Metric:
    """The connections this worker handed to another instance of a fleet on its machine and took from them
    (MCPGATE_HANDOFF_DIR; serve/front/handoff.py), by outcome."""
    from prometheus_client.core import CounterMetricFamily

    from mcpgate.serve.front import handoff

    family = CounterMetricFamily(
        "mcpgate_handoffs",
        "Client connections handed between instances on one machine instead of a request forwarded: sent (to the "
        "session's owner), declined (the owner did not take it: forwarded instead), received (taken from another "
        "instance), refused (not taken: draining, full, or a message that is no handoff).",
        labels=["outcome"],
    )
    for outcome, count in handoff.COUNTS.items():
        family.add_metric([outcome], count)
    return family


def spans_dropped() -> Iterator[Metric]:
    """The sampled spans this worker's trace export dropped, by reason (mcpgate/observe/span_pipe.py); none when
    tracing is off."""
    from prometheus_client.core import CounterMetricFamily

    counts = tracing.dropped()
    if counts is None:
        return
    family = CounterMetricFamily(
        "mcpgate_spans_dropped",
        "Sampled spans never exported, by reason: queue (past OTEL_BSP_MAX_QUEUE_SIZE), pipe (the export process "
        "behind or not running), export (the endpoint did not accept their batch).",
        labels=["reason"],
    )
    for reason, count in counts.items():
        family.add_metric([reason], count)
    yield family


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
