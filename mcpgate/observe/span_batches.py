"""The export of mcpgate's spans: ended requests' Traces queued (bounded, counted in spans) and exported in batches
by one worker, as the SDK's BatchSpanProcessor does and configured by the same OTEL_BSP_* variables
(OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE, OTEL_BSP_MAX_EXPORT_BATCH_SIZE, each in spans), but with no
after-fork hook. A batch is turned into spans and encoded to OTLP protobuf here, in the worker
(observe/trace_spans.py, otlp_wire.py: each request's spans appended to one list, joined once a batch), off the
requests' path, and posted (on a kept connection of its own to
a plain-HTTP endpoint, LeanPost, else or on any failure) by the SDK's OTLPSpanExporter's HTTP client
(its endpoint, headers, timeout, compression and retries from OTEL_EXPORTER_OTLP_*).

The SDK's processor restarts its worker thread in every forked process, and its TracerProvider detects the
resource again after a fork. A gevent worker forks to exec each child; in the fork, before the exec, such a start
waits on an event, the copied hub runs the parent's greenlets, and they serve (and close) the parent's client
connections. Here nothing runs after a fork. The worker is a `threading.Thread`: under gevent's monkey patching
(the gateway's worker, the relay) a greenlet, whose export goes out on patched sockets without blocking requests.

Imported by mcpgate.observe.tracing only when tracing is on (it imports the SDK's exporter).
"""

from __future__ import annotations

import collections
import http.client
import logging
import os
import threading
import urllib.parse
from typing import Any, Protocol

from mcpgate.observe import otlp_wire

log = logging.getLogger("mcpgate.tracing")

DEFAULTS = {"OTEL_BSP_SCHEDULE_DELAY": 5000, "OTEL_BSP_MAX_QUEUE_SIZE": 2048, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512}
STOP_TIMEOUT = 5.0  # seconds the worker gets to finish at shutdown
RETRIED = frozenset({408, 429, 502, 503, 504})  # statuses the SDK's client retries: a lean post leaves them to it


def setting(name: str) -> int:
    """An OTEL_BSP_* value (a positive integer), its default when unset or invalid."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return DEFAULTS[name]
    return value if value > 0 else DEFAULTS[name]


class Ended(Protocol):
    """A request's spans, ended: encoded when exported."""

    def encode_into(self, out: list[bytes]) -> None: ...


class SpanBatches:
    """Ended, sampled requests' spans into a bounded queue (the oldest dropped past it, counted); one worker
    exports a batch when one is full or the schedule delay passed, and what is left at shutdown. `exporter` is
    the SDK's OTLPSpanExporter, `head` the batch's resource and scope (otlp_wire.resource_head)."""

    def __init__(self, exporter: Any, head: tuple[bytes, bytes]) -> None:
        self.exporter, self.head = exporter, head
        self.delay = setting("OTEL_BSP_SCHEDULE_DELAY") / 1000
        self.batch = setting("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
        self.bound = setting("OTEL_BSP_MAX_QUEUE_SIZE")
        self.queue: collections.deque[tuple[Ended, int]] = collections.deque()
        self.queued = 0  # spans in the queue
        self.dropped = 0
        self.stopped = False
        self.wake = threading.Event()
        self.lean = LeanPost.of(getattr(exporter, "_client", None))
        self.worker = threading.Thread(target=self.run, name="mcpgate-span-export", daemon=True)
        self.worker.start()

    def on_end(self, ended: Ended, spans: int) -> None:
        """A request's `spans` ended (on the request's greenlet: one append)."""
        if self.stopped:
            return
        self.queue.append((ended, spans))
        self.queued += spans
        while self.queued > self.bound and len(self.queue) > 1:  # the oldest make room
            lost = self.queue.popleft()[1]
            self.dropped += lost
            self.queued -= lost
        if self.queued >= self.batch:
            self.wake.set()

    def run(self) -> None:
        """Woken by a full batch: the full batches go (what is left joins the next one); at the schedule delay,
        everything (a busy worker whose exports take a while otherwise sends each remnant on its own)."""
        while not self.stopped:
            woken = self.wake.wait(self.delay)
            self.wake.clear()
            self.export_queued(whole=not woken)

    def export_queued(self, whole: bool = True) -> None:
        if self.dropped:
            log.warning("%d spans dropped: the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE)", self.dropped)
            self.dropped = 0
        while self.queue and self.queued >= (1 if whole else self.batch):
            taken: list[Ended] = []
            spans = 0
            while self.queue and spans < self.batch:
                ended, count = self.queue.popleft()
                taken.append(ended)
                spans += count
            self.queued -= spans
            try:
                parts: list[bytes] = []
                for ended in taken:
                    ended.encode_into(parts)
                self.send(otlp_wire.request(self.head, [b"".join(parts)]))
            except Exception as exc:  # noqa: BLE001 - an exporter's failure costs its batch, never the worker
                log.warning("a batch of %d spans could not be exported: %s", spans, exc)

    def send(self, data: bytes) -> None:
        """One batch's body posted: first on the lean connection (a plain-HTTP endpoint), else, or when that
        fails, by the exporter's HTTP client, with its retries (the SDK's private API: `_client.export` since
        1.4x, `_export` with its own retries before)."""
        if self.lean is not None and self.lean.post(data):
            return
        client = getattr(self.exporter, "_client", None)
        if client is not None:
            result = client.export(data)
            if not result.success:
                log.warning("a batch of spans was not accepted: %s", getattr(result, "error", None))
            return
        reply = self.exporter._export(data, self.exporter._timeout)
        if not reply.ok:
            log.warning("a batch of spans was not accepted: HTTP %s", reply.status_code)

    def shutdown(self) -> None:
        if self.lean is not None:
            self.lean.close()
        self.stopped = True
        self.wake.set()
        self.worker.join(STOP_TIMEOUT)
        self.export_queued()
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self.export_queued()
        return True


class LeanPost:
    """A batch's POST on one kept http.client connection, to the endpoint, with the headers and timeout the SDK's
    client was configured with: the requests session costs about 1.2 ms of CPU a post. Only for a plain-HTTP
    endpoint without compression; a failed connection or a status worth retrying returns False, and the SDK's
    client, with its retries, posts the batch instead."""

    def __init__(self, host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> None:
        self.host, self.port, self.path, self.headers, self.timeout = host, port, path, headers, timeout
        self.conn: http.client.HTTPConnection | None = None

    @classmethod
    def of(cls, client: Any) -> LeanPost | None:
        endpoint, headers = getattr(client, "_endpoint", None), getattr(client, "_headers", None)
        compression = getattr(getattr(client, "_compression", None), "value", None)
        if not isinstance(endpoint, str) or not isinstance(headers, dict) or compression != "none":
            return None
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme != "http" or not parts.hostname or parts.username or parts.password:
            return None
        try:
            port = parts.port or 80
        except ValueError:
            return None
        timeout = getattr(client, "_timeout", 10.0)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return cls(parts.hostname, port, path, dict(headers), timeout if isinstance(timeout, int | float) else 10.0)

    def post(self, data: bytes) -> bool:
        conn = self.conn or http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn = None
        try:
            conn.request("POST", self.path, data, self.headers)
            reply = conn.getresponse()
            reply.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            return False
        if reply.will_close:
            conn.close()
        else:
            self.conn = conn
        if reply.status in RETRIED:
            return False
        if not 200 <= reply.status < 300:
            log.warning("a batch of spans was not accepted: HTTP %s", reply.status)
        return True

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
