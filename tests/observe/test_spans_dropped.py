"""Dropped spans in /metrics (mcpgate_spans_dropped_total, by reason): spans past the worker's queue bound
(OTEL_BSP_MAX_QUEUE_SIZE), a batch the endpoint refuses (counted by the span export process and reported back to
the worker on its stdout), a pipe the export process does not read (SIGSTOPped); each read from a real scrape of
`gunicorn mcpgate.wsgi`, or from the SpanPipe where no gateway is needed. Tracing off: no such series."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

from mcpgate.observe.span_pipe import SpanPipe
from tests.observe.test_span_pipe import a_traced_call, ended, the_export_process
from tests.observe.test_tracing import open_session_with
from tests.support import HANG_GUARD, Gateway, serving, wait_for
from tests.support.otlp import endpoint, receiver

SERIES = re.compile(r'^mcpgate_spans_dropped_total\{reason="([a-z]+)"\} ([0-9.e+]+)$', re.MULTILINE)
CALL_SPANS = 4  # a traced tools/call in a 2025 session: its own, the guard's, the session lookup's, the wait's


def dropped(gw: Gateway) -> dict[str, int]:
    reply = gw.request("GET", "/metrics")
    assert reply.status == 200, reply
    return {reason: int(float(count)) for reason, count in SERIES.findall(reply.body.decode())}


@contextlib.contextmanager
def refusing() -> Iterator[str]:
    """An OTLP/HTTP endpoint that answers every export 400 (not retried): its traces URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with endpoint(Handler) as url:
        yield url


def test_spans_past_the_queue_bound_are_counted_in_metrics() -> None:
    """The flusher asleep (a schedule delay past the test, batches larger than the queue): each call's spans make
    the previous call's leave the queue, counted under reason="queue"."""
    with receiver() as sink:
        env = {
            "MCPGATE_TRACING": "true",
            "MCPGATE_METRICS": "true",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "100000",
            "OTEL_BSP_MAX_QUEUE_SIZE": str(CALL_SPANS),
        }
        with serving(env) as gw:
            session = open_session_with(gw, {})
            a_traced_call(gw, session, "4" * 32, 10)
            before = dropped(gw)
            assert set(before) == {"queue", "pipe", "export"}, before
            a_traced_call(gw, session, "5" * 32, 11)
            after = dropped(gw)
            assert after["queue"] - before["queue"] == CALL_SPANS  # the first call's, pushed out by the second's
            assert after["pipe"] == after["export"] == 0


def test_a_batch_the_endpoint_refuses_is_counted_by_the_worker() -> None:
    """The endpoint answers 400: the export process reports the batch's spans back, and the worker's /metrics
    counts them under reason="export"."""
    with refusing() as url:
        env = {"MCPGATE_TRACING": "true", "MCPGATE_METRICS": "true", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url}
        env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
        with serving(env) as gw:
            the_export_process(gw.proc.pid)
            session = open_session_with(gw, {})
            a_traced_call(gw, session, "6" * 32, 10)
            wait_for(lambda: dropped(gw)["export"] >= CALL_SPANS, timeout=30, what="the refused batch counted")
            assert dropped(gw)["queue"] == dropped(gw)["pipe"] == 0


def test_no_series_with_tracing_off() -> None:
    with serving({"MCPGATE_METRICS": "true"}) as gw:
        assert dropped(gw) == {}


def test_a_stopped_export_process_costs_pipe_drops_and_a_refused_batch_export_drops() -> None:
    """The SpanPipe alone: a SIGSTOPped export process's pipe fills, the frames past it counted under "pipe"; an
    endpoint that refuses every batch: each batch's spans reported back under "export", none lost twice."""
    with refusing() as url:
        environ = {
            "PATH": os.environ.get("PATH", ""),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url,
            "OTEL_BSP_SCHEDULE_DELAY": "3600000",  # the flusher left asleep: this test flushes
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1000000",
            "OTEL_BSP_MAX_QUEUE_SIZE": "1000000",
        }
        pipe = SpanPipe("dropped", environ)
        proc = pipe.export.proc
        assert proc is not None
        flushes, batch = 40, 500  # 40 frames of ~100 KB against a pipe of 1 MiB at most
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            for n in range(flushes):
                for k in range(batch):
                    pipe.on_end(ended(n * batch + k + 1), 2)
                pipe.flush()
            assert 0 < pipe.dropped_by()["pipe"] == pipe.lost < flushes * batch * 2
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        pipe.shutdown(HANG_GUARD)  # the pipe's last frame written, the export process posting all it holds
        assert proc.poll() is not None
        assert pipe.dropped_by() == {"queue": 0, "pipe": pipe.lost, "export": flushes * batch * 2 - pipe.lost}
