"""A traced request's spans as plain fields, for what the usual request's list (observe/tracing.py) does not carry:
a parent in the traceparent header or in the message's _meta, a sampler that is not static, a forward, an MRTR
round, a streamed or error answer, the relay's requests. Decided once (`open`), ended once (`ended`), written to
the export process by observe/span_records.py.

The sampling state (the sampler's rules, the decision known as a request begins, the ids' draw) is tracing's,
set by tracing.setup: read from that module when a Trace is made or opened (`_state`, imported at the end of
this one: tracing imports this module for its Trace).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcpgate.core.jsonrpc import Message, Request
from mcpgate.observe import trace_sampling, w3c
from mcpgate.observe.answer_marks import error_code, tool_error
from mcpgate.observe.trace_sampling import looked_at, request_of
from mcpgate.observe.trace_steps import Ending, marks
from mcpgate.observe.w3c import Parent

INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds


def decide(parent: Parent | None, trace_id: bytes, message: Message | None) -> tuple[bool, str]:
    """Sampled or not, and the tracestate to pass on (observe/trace_sampling.py asks a sampler that is not static)."""
    rules = _state._rules
    rule = rules[0] if parent is None else rules[1] if parent.sampled else rules[2]
    if rule is True or rule is False:
        return rule, parent.state if parent is not None else ""
    return trace_sampling.asked(rule, parent, trace_id, message)


class Trace:
    """One request's spans as plain fields: decided once (`open`), ended once (`end`), encoded by the export."""

    __slots__ = (
        "code",
        "decided",
        "end_at",
        "forward",
        "headed",
        "http_method",
        "kind",
        "opened",
        "parent",
        "sampled",
        "server",
        "session",
        "span_id",
        "start",
        "state",
        "status",
        "steps",
        "tool_error",
        "trace_id",
        "wait",
        "what",
    )

    def __init__(self, server: str | None, kind: int = SERVER, environ: Mapping[str, Any] | None = None) -> None:
        always = _state._always
        self.start, self.server, self.kind = _state.now(), server, kind
        self.opened = False  # described, its parent and trace id found (`open`)
        self.headed = False  # the traceparent header read (`from_header`)
        self.decided = always is not None  # sampled or not is known (a static sampler's: from the start)
        self.sampled = always is True
        self.steps: list[tuple[str, float, float]] = []  # name, start, end: INTERNAL children of the request's span
        self.wait: tuple[bytes, float] | None = None  # the wait for the child: span id, start
        self.forward: tuple[bytes, float, str] | None = None  # a forward: span id, start, the owner instance
        self.span_id = b""  # the request's own span's id: given by the export (the relay's: when sent)
        self.what: tuple[str, Any, Any, Any] | str = ""  # a request's request_of, else the span's name
        self.session: str | None = None  # the Mcp-Session-Id the request names
        self.http_method = ""
        self.code: int | None = None
        self.tool_error = False  # a tools/call result with isError true
        # trace_id: 16 bytes, or 24 from to_child's short way (the trace id, then the wait's span id: wait[0] is the
        # same 24 bytes), cut by the export process (trace_spans: [:16], [-8:]) rather than on the request path
        self.status, self.end_at, self.trace_id, self.state = 0, 0.0, b"", ""
        self.parent: Parent | None = None
        if environ is not None and not self.decided and "HTTP_TRACEPARENT" in environ:  # decided by its flag?
            parent = self.from_header(environ)
            rules = _state._rules
            rule = None if parent is None else rules[1] if parent.sampled else rules[2]
            if rule is True or rule is False:
                self.decided, self.sampled = True, rule

    def open(self, environ: Mapping[str, Any], message: Message | None) -> None:
        """The parent from the traceparent header, else from the message's _meta, and the sampling decision (once)."""
        if self.opened:
            return
        self.opened = True
        if self.headed:
            parent = self.parent
        else:
            parent = self.from_header(environ) if "HTTP_TRACEPARENT" in environ else None
            self.headed = True
        params, meta = looked_at(message)
        if parent is None and meta is not None:
            parent = self.parent = w3c.parent_of(meta)
        self.trace_id = parent.trace_id if parent is not None else _state.IDS.take(16)
        if self.decided:
            self.state = parent.state if parent is not None else ""
        else:
            self.decided = True
            self.sampled, self.state = decide(parent, self.trace_id, message)
        if not self.sampled:  # only its context is passed on: nothing more to note
            self.steps.clear()
            return
        if isinstance(message, Request):
            self.what = request_of(message, params, meta)
        else:  # (its HTTP method names the span of no request only)
            self.what = str(getattr(message, "method", "batch")) if message is not None else ""
            self.http_method = environ.get("REQUEST_METHOD", "")
        self.session = environ.get("HTTP_MCP_SESSION_ID")

    def from_header(self, environ: Mapping[str, Any]) -> Parent | None:
        """The parent in the request's traceparent header (and tracestate), if any."""
        self.headed = True
        header = environ.get("HTTP_TRACEPARENT")
        self.parent = w3c.parsed(header, environ.get("HTTP_TRACESTATE")) if header is not None else None
        return self.parent

    def context(self, span_id: bytes) -> dict[str, str]:
        """The W3C fields naming `span_id` of this trace."""
        fields = {"traceparent": w3c.traceparent(self.trace_id[:16], span_id, self.sampled)}
        if self.state:
            fields["tracestate"] = self.state
        return fields

    def end(self, environ: Mapping[str, Any], status: int, body: bytes | None) -> None:
        """The request answered: queued for export when sampled (tracing.finish's work, for a Trace of its own)."""
        _state.finish(environ, status, b"" if body is None else body, (), self)

    def ending(self, environ: Mapping[str, Any], status: int, sent: Iterable[bytes]) -> Ending:
        """A streamed body that ends the request (`end`) when it closes."""
        return Ending(sent, lambda: self.end(environ, status, None))

    def ended(self, environ: Mapping[str, Any], status: int, body: bytes) -> int:
        """The request answered with a whole body: its end, status and error marks noted, and its spans to queue (0:
        unsampled, nothing to queue)."""
        if not self.opened and (self.sampled or not self.decided):
            self.open(environ, None)
        if not self.sampled:
            return 0
        self.end_at, self.status = _state.now(), status
        if body and body[-17:] != b'"isError":false}}' and marks(body):  # tools/call's usual answer (result last)
            self.marked(body)
        return 1 + len(self.steps) + (self.wait is not None) + (self.forward is not None)

    def marked(self, body: bytes) -> None:
        """Its error code and tool error, read from an answer holding "error" or "isError" (as error_code and
        tool_error look first: no call for the usual answer)."""
        if body.find(b'"error"') >= 0:
            self.code = error_code(body)
        if self.code is None and type(self.what) is tuple and self.what[0] == "tools/call":
            at = body.find(b'"isError"')
            if at >= 0 and (body[at + 9 : at + 15] != b":false" or body.find(b'"isError"', at + 9) >= 0):
                self.tool_error = tool_error(body)

    def encoded(self) -> bytes:
        """Its spans, encoded (as the export process encodes its record)."""
        out: list[bytes] = []
        self.encode_into(out)
        return b"".join(out)

    def encode_into(self, out: list[bytes]) -> None:
        """Its spans' parts appended to a batch's: its record written and read back, then encoded, as the worker and
        the export process do (its times the wall clock's nanoseconds)."""
        from mcpgate.observe import span_export, span_records, trace_spans

        data, _ = span_records.payload([(self, 0)], span_records.Shapes())
        for fields in span_records.unpacked(data, span_records.Table()):
            if not trace_spans.encode_record(fields, out):
                trace_spans.encode_into(span_export.Record(fields), out)


from mcpgate.observe import tracing as _state  # noqa: E402 - (a cycle: tracing imports Trace from here)
