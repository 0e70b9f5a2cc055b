"""The post of a batch of spans, in the span export process (observe/span_export.py), and the OTEL_BSP_* settings
the worker batches by (observe/span_pipe.py: OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE,
OTEL_BSP_MAX_EXPORT_BATCH_SIZE, each in spans, as the SDK's BatchSpanProcessor reads them).

A batch's OTLP protobuf body is posted on a kept connection of its own to a plain-HTTP endpoint (LeanPost: the
requests session costs about 1.2 ms of CPU a post), else, or on any failure, by the SDK's OTLPSpanExporter's HTTP
client (its endpoint, headers, timeout, compression and retries from OTEL_EXPORTER_OTLP_*).

Standard library only: the export process passes the SDK's exporter in.
"""

from __future__ import annotations

import http.client
import logging
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("mcpgate.tracing")

DEFAULTS = {"OTEL_BSP_SCHEDULE_DELAY": 5000, "OTEL_BSP_MAX_QUEUE_SIZE": 2048, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512}
RETRIED = frozenset({408, 429, 502, 503, 504})  # statuses the SDK's client retries: a lean post leaves them to it


def setting(name: str, environ: Mapping[str, str] = os.environ) -> int:
    """An OTEL_BSP_* value (a positive integer), its default when unset or invalid."""
    try:
        value = int(environ.get(name, ""))
    except ValueError:
        return DEFAULTS[name]
    return value if value > 0 else DEFAULTS[name]


class Poster:
    """A batch's body posted to the OTLP/HTTP endpoint: on the lean connection when the endpoint is plain HTTP
    without compression, else (or when that fails) by the SDK exporter's HTTP client, with its retries."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self.lean = LeanPost.of(getattr(exporter, "_client", None))

    def send(self, data: bytes) -> bool:
        """One batch's body posted (the SDK's private API: `_client.export` since 1.4x, `_export` with its own
        retries before): whether the endpoint accepted it."""
        if self.lean is not None:
            accepted = self.lean.post(data)
            if accepted is not None:
                return accepted
        client = getattr(self.exporter, "_client", None)
        if client is not None:
            result = client.export(data)
            if not result.success:
                log.warning("a batch of spans was not accepted: %s", getattr(result, "error", None))
            return bool(result.success)
        reply = self.exporter._export(data, self.exporter._timeout)
        if not reply.ok:
            log.warning("a batch of spans was not accepted: HTTP %s", reply.status_code)
        return bool(reply.ok)

    def close(self) -> None:
        if self.lean is not None:
            self.lean.close()
        self.exporter.shutdown()


class LeanPost:
    """A batch's POST on one kept http.client connection, to the endpoint, with the headers and timeout the SDK's
    client was configured with: the requests session costs about 1.2 ms of CPU a post. Only for a plain-HTTP
    endpoint without compression; a failed connection or a status worth retrying returns None, and the SDK's
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

    def post(self, data: bytes) -> bool | None:
        """Whether the endpoint accepted the batch; None: left to the SDK's client (no answer, or one to retry)."""
        conn = self.conn or http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        self.conn = None
        try:
            conn.request("POST", self.path, data, self.headers)
            reply = conn.getresponse()
            reply.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            return None
        if reply.will_close:
            conn.close()
        else:
            self.conn = conn
        if reply.status in RETRIED:
            return None
        if not 200 <= reply.status < 300:
            log.warning("a batch of spans was not accepted: HTTP %s", reply.status)
            return False
        return True

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
