"""The span processor of mcpgate's traces: ended spans queued (bounded) and exported in batches by one worker,
as the SDK's BatchSpanProcessor does and configured by the same OTEL_BSP_* variables (OTEL_BSP_SCHEDULE_DELAY,
OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE), but with no after-fork hook; and the provider
without its own (ForkSafeTracerProvider).

The SDK's processor restarts its worker thread in every forked process. A gevent worker forks to exec each
child; in the fork, before the exec, that start waits on an event, the copied hub runs the parent's greenlets,
and they serve (and close) the parent's client connections. Here nothing runs after a fork. The worker is a
`threading.Thread`: under gevent's monkey patching (the gateway's worker, the relay) a greenlet, whose export
goes out on patched sockets without blocking requests.

Imported by mcpgate.observe.tracing only when tracing is on (it imports the SDK).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("mcpgate.tracing")

DEFAULTS = {"OTEL_BSP_SCHEDULE_DELAY": 5000, "OTEL_BSP_MAX_QUEUE_SIZE": 2048, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512}
STOP_TIMEOUT = 5.0  # seconds the worker gets to finish at shutdown


def setting(name: str) -> int:
    """An OTEL_BSP_* value (a positive integer), its default when unset or invalid."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return DEFAULTS[name]
    return value if value > 0 else DEFAULTS[name]


class ForkSafeTracerProvider(TracerProvider):
    """The SDK's TracerProvider without its after-fork hook, which detects the resource again in a thread pool and
    waits on it: in a child forked to exec, under gevent, that wait runs the parent's greenlets too."""

    def _handle_fork(self) -> None:
        pass


class SpanBatches(SpanProcessor):
    """Ended, sampled spans into a bounded queue (the oldest dropped past it, counted); one worker exports a
    batch when one is full or the schedule delay passed, and what is left at shutdown."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.delay = setting("OTEL_BSP_SCHEDULE_DELAY") / 1000
        self.batch = setting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
        self.queue: collections.deque[ReadableSpan] = collections.deque(maxlen=setting("OTEL_BSP_MAX_QUEUE_SIZE"))
        self.dropped = 0
        self.stopped = False
        self.wake = threading.Event()
        self.worker = threading.Thread(target=self.run, name="mcpgate-span-export", daemon=True)
        self.worker.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self.stopped or span.context is None or not span.context.trace_flags.sampled:
            return
        if len(self.queue) == self.queue.maxlen:
            self.dropped += 1
        self.queue.append(span)
        if len(self.queue) >= self.batch:
            self.wake.set()

    def run(self) -> None:
        while not self.stopped:
            self.wake.wait(self.delay)
            self.wake.clear()
            self.export_queued()

    def export_queued(self) -> None:
        if self.dropped:
            log.warning("%d spans dropped: the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE)", self.dropped)
            self.dropped = 0
        while self.queue:
            spans: Sequence[ReadableSpan] = [self.queue.popleft() for _ in range(min(self.batch, len(self.queue)))]
            try:
                self.exporter.export(spans)
            except Exception as exc:  # noqa: BLE001 - an exporter's failure costs its batch, never the worker
                log.warning("a batch of %d spans could not be exported: %s", len(spans), exc)

    def shutdown(self) -> None:
        self.stopped = True
        self.wake.set()
        self.worker.join(STOP_TIMEOUT)
        self.export_queued()
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.export_queued()
        return True
