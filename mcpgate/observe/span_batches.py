"""The post of a batch of spans, in the span export process (observe/span_export.py), and the OTEL_BSP_* settings
the worker batches by (observe/span_pipe.py: OTEL_BSP_SCHEDULE_DELAY, OTEL_BSP_MAX_QUEUE_SIZE,
OTEL_BSP_MAX_EXPORT_BATCH_SIZE, each in spans, as the SDK's BatchSpanProcessor reads them).

A batch's OTLP protobuf body is posted on a kept connection of its own to a plain-HTTP endpoint (LeanPost: the
requests session costs about 1.2 ms of CPU a post, http.client about 50 us), else, or on any failure, by the SDK's
OTLPSpanExporter's HTTP client (its endpoint, headers, timeout, compression and retries from
OTEL_EXPORTER_OTLP_*).

Standard library only: the export process passes the SDK's exporter in.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import urllib.parse
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("mcpgate.tracing")

DEFAULTS = {"OTEL_BSP_SCHEDULE_DELAY": 5000, "OTEL_BSP_MAX_QUEUE_SIZE": 2048, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512}
RETRIED = frozenset({408, 429, 502, 503, 504})  # statuses the SDK's client retries: a lean post leaves them to it
MOST_HEAD, MOST_BODY, CHUNK = 64 << 10, 1 << 20, 64 << 10  # bytes: an answer's head and body read at most; a read


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
    """A batch's POST on one kept connection (a socket of its own, the request written and the answer's head read
    here: http.client's request and response objects and its email-parsed headers cost about as much again as the
    socket's work), to the endpoint, with the headers and timeout the SDK's client was configured with. Only for a
    plain-HTTP endpoint without compression, with headers that can be written as they are; a failed connection or
    a status worth retrying returns None, and the SDK's client, with its retries, posts the batch instead. The
    connection is kept when the answer says how long its body is (Content-Length, or none) and does not close."""

    def __init__(self, host: str, port: int, path: str, headers: dict[str, str], timeout: float) -> None:
        self.host, self.port, self.path, self.headers, self.timeout = host, port, path, headers, timeout
        self.sock: socket.socket | None = None
        named = f"[{host}]" if ":" in host else host
        lines = [f"POST {path} HTTP/1.1", f"Host: {named}" + (f":{port}" if port != 80 else "")]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self.head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

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
        if not _TARGET.match(path) or not _TARGET.match(parts.hostname):
            return None
        if not all(plain_header(name, value) for name, value in headers.items()):
            return None
        return cls(parts.hostname, port, path, dict(headers), timeout if isinstance(timeout, int | float) else 10.0)

    def post(self, data: bytes) -> bool | None:
        """Whether the endpoint accepted the batch; None: left to the SDK's client (no answer, or one to retry)."""
        sock, self.sock = self.sock, None
        try:
            if sock is None:
                sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            sock.sendall(b"".join((self.head, b"%d\r\n\r\n" % len(data), data)))
            status, kept = answer(sock)
        except (OSError, ValueError):
            if sock is not None:
                sock.close()
            return None
        if kept:
            self.sock = sock
        else:
            sock.close()
        if status in RETRIED:
            return None
        if not 200 <= status < 300:
            log.warning("a batch of spans was not accepted: HTTP %s", status)
            return False
        return True

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")  # a header's name (RFC 9110's token)
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*\Z")  # a header's value: no CR, LF or other control
_TARGET = re.compile(r"[\x21-\x7e]*\Z")  # a request target without space or control
_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})  # written here, never twice


def plain_header(name: Any, value: Any) -> bool:
    """A header the lean post writes as it is (else the SDK's client posts)."""
    if not isinstance(name, str) or not isinstance(value, str) or name.lower() in _FRAMING:
        return False
    return bool(_TOKEN.match(name)) and bool(_VALUE.match(value))


def answer(sock: socket.socket) -> tuple[int, bool]:
    """An HTTP/1.x answer's status (after any 1xx), and whether the connection can carry the next request: an
    HTTP/1.1 answer that does not close and whose body was read whole by its Content-Length (or has none).
    ValueError: no HTTP answer; OSError: the connection failed before its status."""
    got = b""
    while True:
        end = got.find(b"\r\n\r\n")
        while end < 0:
            if len(got) > MOST_HEAD:
                raise ValueError("an answer's head past its bound")
            chunk = sock.recv(CHUNK)
            if not chunk:
                raise ConnectionError("the endpoint closed the connection")
            got += chunk
            end = got.find(b"\r\n\r\n")
        lines = got[:end].split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1.") or len(rest) < 3 or not rest[:3].isdigit():
            raise ValueError("no HTTP answer")
        status, got = int(rest[:3]), got[end + 4 :]
        if status >= 200 or status == 101:
            break
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().lower()
    kept = version == b"HTTP/1.1" and b"close" not in fields.get(b"connection", b"")
    if status in (204, 304):
        return status, kept and not got
    if b"transfer-encoding" in fields or b"content-length" not in fields or status == 101:
        return status, False  # its body's end is not read here: the connection goes
    try:
        left = int(fields[b"content-length"]) - len(got)
        while 0 < left <= MOST_BODY:
            chunk = sock.recv(min(left, CHUNK))
            if not chunk:
                return status, False
            left -= len(chunk)
    except (OSError, ValueError):  # the status stands: the connection goes
        return status, False
    return status, kept and left == 0
