"""The span export process: `python -m mcpgate.observe.span_export SERVICE PARENT_PID`, started by a traced process
(a gateway worker, a relay: observe/span_pipe.py) with a pipe as its stdin. It reads the batches the worker
writes there (a frame each: a 4-byte little-endian length, then a payload of one record per ended request,
RECORD's fields, the usual request's packed with its shape numbered: observe/span_records.py), turns each into
its OTLP spans (observe/trace_spans.py, otlp_wire.py) and posts the batch as the SDK's OTLP/HTTP exporter would
(observe/span_batches.py: its endpoint, headers, timeout, compression and retries from the OTEL_* variables of its
environment; never from its argv). The spans of a
batch the endpoint did not accept (or that failed to encode) are reported back on its stdout, a pipe the worker
reads (a 4-byte little-endian count per failed batch; written without blocking: a count the pipe cannot take
now is added to the next one), for /metrics' mcpgate_spans_dropped_total{reason="export"}.

It ends when its stdin ends (the worker closed the pipe, or died: the pipe's only writer was the worker), and
with the worker (PR_SET_PDEATHSIG) even while a post waits on a receiver that does not answer. Single-threaded:
while a post waits, the pipe holds what comes, and past the pipe's size the worker drops and counts. It runs at
a lower priority (NICE added to its niceness): on a busy machine its few microseconds a request wait for the
worker and the MCP children rather than take their core; it needs about 2 % of one core at 3,500 calls/s, which
even a nice of 10 gets beside a busy process, and what it cannot keep up with the pipe holds, then the worker
drops and counts, as before.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import struct
import sys
from typing import IO, Any

from mcpgate.observe import otlp_wire, trace_spans, w3c
from mcpgate.observe.span_records import Table, unpacked

log = logging.getLogger("mcpgate.tracing")

RECORD = (
    "what",
    "http_method",
    "kind",
    "server",
    "session",
    "trace_id",
    "span_id",
    "parent",
    "state",
    "start",
    "end_at",
    "status",
    "code",
    "tool_error",
    "steps",
    "wait",
    "forward",
)  # a record's fields, in order (the Trace's that trace_spans reads: observe/span_pipe.py writes them)
LENGTH = struct.Struct("<I")  # a frame's length
MOST = 64 << 20  # the largest frame read (a worker's batch is far below)
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
NICE = 10  # added to the export process's niceness (the worker's and the children's are left as they are)
TABLE = Table()  # the shapes of the packed records this process read (observe/span_records.py)


class Record:
    """A request's spans as the worker wrote them: what trace_spans.Trace describes."""

    __slots__ = RECORD

    what: Any
    http_method: str
    kind: int
    server: str | None
    session: str | None
    trace_id: bytes
    span_id: bytes
    parent: w3c.Parent | None
    state: str
    start: int
    end_at: int
    status: int
    code: int | None
    tool_error: bool
    steps: list[tuple[str, int, int]]
    wait: tuple[bytes, int] | None
    forward: tuple[bytes, int, str] | None

    def __init__(self, fields: tuple[Any, ...]) -> None:
        (
            self.what,
            self.http_method,
            self.kind,
            self.server,
            self.session,
            self.trace_id,
            self.span_id,
            parent,
            self.state,
            self.start,
            self.end_at,
            self.status,
            self.code,
            self.tool_error,
            self.steps,
            self.wait,
            self.forward,
        ) = fields  # RECORD's order (one unpacking: a setattr per field costs several times more)
        self.parent = None if parent is None else w3c.Parent(*parent)


def encoded_batch(head: tuple[bytes, bytes], payload: bytes, table: Table = TABLE) -> tuple[bytes, int]:
    """A frame's payload as one ExportTraceServiceRequest, and how many requests it held (its shapes added to
    `table`, this process's, first)."""
    records = unpacked(payload, table)
    parts: list[bytes] = []
    for fields in records:
        if not trace_spans.encode_record(fields, parts):  # a request of a kind not seen yet, a tracestate, ...
            trace_spans.encode_into(Record(fields), parts)
    return otlp_wire.request(head, parts), len(records)


def spans_in(payload: bytes, table: Table = TABLE) -> int:
    """How many spans a frame's records make (as the worker counts them: the request's, a step's, the wait's and
    a forward's each)."""
    return sum(
        1 + len(fields[14]) + (fields[15] is not None) + (fields[16] is not None) for fields in unpacked(payload, table)
    )


class Failures:
    """The spans of failed batches, reported to the worker on a pipe without ever blocking (a count the pipe
    cannot take now waits for the next report; the worker gone: nothing more is reported)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.unreported = fd, 0
        os.set_blocking(fd, False)

    def add(self, spans: int) -> None:
        self.unreported += spans
        if self.fd < 0 or not self.unreported:
            return
        count = min(self.unreported, 0xFFFFFFFF)
        try:
            os.write(self.fd, LENGTH.pack(count))  # 4 bytes: taken whole or not at all
        except BlockingIOError:
            return
        except OSError:  # the worker is gone
            self.fd = -1
            return
        self.unreported -= count


def resource_head(service: str) -> tuple[bytes, bytes]:
    """A batch's resource (OTEL_RESOURCE_ATTRIBUTES; OTEL_SERVICE_NAME, else `service`) and scope, encoded."""
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource

    import mcpgate

    name = os.environ.get("OTEL_SERVICE_NAME") or service
    resource = OTELResourceDetector().detect().merge(Resource({SERVICE_NAME: name}))
    return otlp_wire.resource_head(resource.attributes, "mcpgate", mcpgate.__version__)


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's payload; None at the end of the input (or a frame cut short: the writer is gone)."""
    head = stream.read(LENGTH.size)
    if len(head) < LENGTH.size:
        return None
    (size,) = LENGTH.unpack(head)
    if size > MOST:
        raise ValueError(f"a frame of {size} bytes")
    payload = stream.read(size)
    return payload if len(payload) == size else None


def die_with(parent: int) -> None:
    """SIGTERM when the parent (the worker) dies, and none of this process readable by others (it holds the
    exporter's headers); gone at once when the parent already is."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(0)


def main(argv: list[str]) -> int:
    service, parent = argv[0], int(argv[1])
    die_with(parent)
    try:
        os.nice(NICE)
    except OSError:  # (a limit that refuses it: the default priority)
        pass
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(asctime)s mcpgate-span-export %(message)s")
    from mcpgate import fast_json

    fast_json.install()  # the usual requests' bytes read with msgspec first, as the worker reads them (span_records)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from mcpgate.observe.span_batches import Poster

    failures = Failures(os.dup(1))  # the report pipe; stdout itself goes nowhere, so no stray print reaches it
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    poster = Poster(OTLPSpanExporter())
    head = resource_head(service)
    stdin = os.fdopen(0, "rb", buffering=1 << 16)
    try:
        while True:
            payload = read_frame(stdin)
            if payload is None:
                return 0
            try:
                body, _ = encoded_batch(head, payload)
                if poster.send(body):
                    failures.add(0)  # a count the pipe could not take before, reported now
                    continue
            except Exception as exc:  # noqa: BLE001 - a batch's failure costs that batch, never the export
                log.warning("a batch of spans could not be exported: %s", exc)
            failures.add(spans_of(payload))
    finally:
        poster.close()


def spans_of(payload: bytes) -> int:
    try:
        return spans_in(payload)
    except (ValueError, EOFError, TypeError, IndexError):  # a frame that is no batch: its spans are unknown
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
