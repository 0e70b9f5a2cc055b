"""The W3C Trace Context of mcpgate's traces without the SDK (mcpgate/observe/w3c.py), from tables: a traceparent
read as the SDK's propagator reads it, the context put into a request's `_meta` in its raw bytes only where that is
certain (the bytes the child gets then decode to what re-encoding would give), ids never zero; and a request's
Trace turned into OTLP spans (observe/trace_spans.py) that opentelemetry-proto decodes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.propagators.textmap import DefaultGetter
from opentelemetry.trace import get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.observe import w3c
from mcpgate.observe.span_export import encoded_batch, resource_head
from mcpgate.observe.span_records import Shapes, Table, payload
from tests.support.otlp import decode, receiver

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
CONTEXT = f"00-{TRACE}-{SPAN}-01"

TRACEPARENTS = [
    (CONTEXT, True),
    (f"00-{TRACE}-{SPAN}-00", True),
    (f"  00-{TRACE}-{SPAN}-01\t", True),
    (f"01-{TRACE}-{SPAN}-01-future", True),  # a later version may carry more
    (f"00-{TRACE}-{SPAN}-01-more", False),  # version 00 has four fields
    (f"ff-{TRACE}-{SPAN}-01", False),
    (f"00-{'0' * 32}-{SPAN}-01", False),
    (f"00-{TRACE}-{'0' * 16}-01", False),
    (f"00-{TRACE.upper()}-{SPAN}-01", False),
    (f"00-{TRACE}-{SPAN}", False),
    ("", False),
    ("x" * 600, False),
]


@pytest.mark.parametrize(("header", "valid"), TRACEPARENTS)
def test_a_traceparent_is_read_as_the_sdk_reads_it(header: str, valid: bool) -> None:
    ours = w3c.parent_of({"traceparent": header})
    theirs = get_current_span(TraceContextTextMapPropagator().extract({"traceparent": header}, getter=DefaultGetter()))
    assert (ours is not None) is valid is theirs.get_span_context().is_valid
    if ours is not None:
        context = theirs.get_span_context()
        assert ours.trace_id == context.trace_id.to_bytes(16, "big")
        assert ours.span_id == context.span_id.to_bytes(8, "big")
        assert ours.sampled is context.trace_flags.sampled


@pytest.mark.parametrize(
    ("state", "kept"),
    [("rojo=00f067aa0ba902b7", "rojo=00f067aa0ba902b7"), ("a=1\r\nX-Injected: 1", ""), ("x" * 513, ""), (7, "")],
)
def test_a_tracestate_is_kept_only_when_it_can_go_in_a_header(state: Any, kept: str) -> None:
    parent = w3c.parent_of({"traceparent": CONTEXT, "tracestate": state})
    assert parent is not None and parent.state == kept


def message(raw: bytes) -> Request:
    parsed = jsonrpc.parse(raw)
    assert isinstance(parsed, Request)
    return parsed


FIELDS = {"traceparent": f"00-{TRACE}-a269f801cf0054d7-01"}
SPLICED = [  # the raw request; whether its bytes are kept (spliced) or encoded again
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"m":"x"}}}', True),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}', True),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}', True),  # json.dumps'
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}', True),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params" :\n { }}', True),
    (b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', False),  # no params object to put it in
    (b'{"jsonrpc":"2.0","id":1,"method":"t","params":{"arguments":{"params":{"a":1}}}}', False),  # two "params"
    (b'{"jsonrpc":"2.0","id":1,"method":"t","p\\u0061rams":{"arguments":{"params":{}}}}', False),  # an escape
    (b'{"jsonrpc":"2.0","id":1,"method":"t","params":{"_meta":"not an object"}}', False),
    (b'{"jsonrpc":"2.0","id":1,"method":"t","params":{"name":"x","_meta":null}}', False),  # a second _meta: lost
    (b'{"jsonrpc":"2.0","id":1,"method":"t","params":{"_meta":{"progressToken":3}}}', False),
    (b'{"jsonrpc":"2.0","id":1,"method":"t","params":{"_meta":{"traceparent":"' + CONTEXT.encode() + b'"}}}', True),
]


@pytest.mark.parametrize(("raw", "kept"), SPLICED)
def test_the_context_goes_into_meta_in_the_raw_bytes_only_when_certain(raw: bytes, kept: bool) -> None:
    request = message(raw)
    w3c.put_in_meta(request, dict(FIELDS))
    assert (request.raw is not None) is kept
    sent = jsonrpc.raw_bytes(request)
    decoded = json.loads(sent)
    assert decoded == request.obj  # what the child gets is the message as changed, whichever way it was made
    assert decoded["params"]["_meta"]["traceparent"] == FIELDS["traceparent"]
    if kept:
        assert b"\n" not in sent.replace(b"\n { }", b"")  # still one line where it was one


def test_a_tracestate_is_written_as_a_json_string() -> None:
    request = message(b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}')
    w3c.put_in_meta(request, {**FIELDS, "tracestate": 'a="b\\'})
    assert json.loads(jsonrpc.raw_bytes(request))["params"]["_meta"]["tracestate"] == 'a="b\\'


def test_ids_are_drawn_in_one_go_and_never_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    draws: list[int] = []

    def urandom(size: int) -> bytes:
        draws.append(size)
        return bytes(size)  # all zero: each id still is not

    monkeypatch.setattr(os, "urandom", urandom)
    ids = w3c.Ids()
    taken = [ids.take(8) for _ in range(100)] + [ids.take(16)]
    pairs = [ids.context() for _ in range(20)]
    assert draws == [w3c.IDS_DRAWN] and all(any(one) for one in taken)
    assert all(len(pair) == 24 and any(pair[:16]) and any(pair[16:]) for pair in pairs)


ZERO_RUN = b"\x01" * 40 + bytes(16) + b"\x02" * (w3c.IDS_DRAWN - 56)


@pytest.mark.parametrize(
    ("drawn", "clean"),
    [
        (bytes(range(1, 256)) * 17, w3c.IDS_DRAWN),
        (ZERO_RUN, 40),
        (b"\x01" * 100 + bytes(7) + b"\x01" * 100 + bytes(8) + b"\x03" * w3c.IDS_DRAWN, 207),  # 7 zeros are not 8
        (bytes(w3c.IDS_DRAWN), 0),
    ],
)
def test_a_draws_clean_part_ends_at_its_first_eight_zero_bytes(
    drawn: bytes, clean: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "urandom", lambda size: drawn[:size])
    ids = w3c.Ids()
    ids.take(8)
    assert ids.clean == clean


def test_the_short_way_to_the_child_takes_ids_as_a_context_does(
    ended: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """to_child's short way slices its ids from the draw's clean part and asks IDS.context past it: the ids a
    context gives, none all zero where the draw holds a run of zeros."""
    from mcpgate.observe import tracing

    monkeypatch.setattr(os, "urandom", lambda size: ZERO_RUN[:size])
    monkeypatch.setattr(tracing, "IDS", w3c.Ids())
    twin, got = w3c.Ids(), []
    for _ in range(5):
        environ: dict[str, Any] = {"HTTP_MCP_SESSION_ID": "s" * 32, "REQUEST_METHOD": "POST"}
        listed = tracing.begin(environ, "default")
        tracing.to_child(environ, message(b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'))
        trace = tracing.traced(listed, environ)
        assert trace.wait is not None
        got.append(trace.trace_id[:16] + trace.wait[0][-8:])  # (both the same 24 bytes: the export cuts them)
    assert got == [twin.context() for _ in got]
    assert all(any(ids[:16]) and any(ids[16:]) for ids in got)


def test_a_context_is_a_trace_id_and_a_span_id_as_taken_one_by_one() -> None:
    one, other = w3c.Ids(), w3c.Ids()
    one.drawn = other.drawn = bytes(range(256)) * 16
    assert [one.context() for _ in range(50)] == [other.take(16) + other.take(8) for _ in range(50)]


@pytest.fixture
def ended(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Tracing on in this process for one test (its ended Traces collected, nothing exported), then off again."""
    from mcpgate.observe import span_pipe, tracing

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    assert tracing.TRACER is None
    tracing.setup(True, "w3c-test")
    export, kept = tracing.TRACER, span_pipe.Kept()
    tracing.TRACER = kept  # what Trace.end queues: (the Trace, its spans)
    try:
        yield kept.queue
    finally:
        tracing.TRACER = None
        export.shutdown()


def test_a_traces_spans_decode_with_opentelemetry_proto(ended: list[Any]) -> None:
    """A traced request's Trace, made by the hooks as the Endpoint calls them, encoded as the export does."""
    from mcpgate.observe import otlp_wire, tracing

    environ: dict[str, Any] = {"HTTP_TRACEPARENT": CONTEXT, "HTTP_MCP_SESSION_ID": "s" * 32, "REQUEST_METHOD": "POST"}
    tracing.begin(environ, "default")
    with tracing.step(environ, "mcpgate.guard"):
        pass
    sent = tracing.to_child(environ, message(SPLICED[0][0]))
    answer = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}'
    tracing.finish(environ, 200, answer, [b""])
    ((trace, count),) = ended
    frame, _ = payload([(trace, count)], Shapes())
    body, _ = encoded_batch(resource_head("w3c-test"), frame, Table())  # as the export process gets it
    spans = {(s.name, s.kind): s for s in decode(body)}
    assert len(body) == len(otlp_wire.request(resource_head("w3c-test"), [trace.encoded()]))  # ids drawn apart
    assert count == len(spans) == 3
    server, guard = spans["tools/call echo", "SERVER"], spans["mcpgate.guard", "INTERNAL"]
    wait = spans["tools/call echo", "CLIENT"]
    assert server.trace_id == TRACE and server.parent_id == SPAN and server.service == "w3c-test"
    assert guard.parent_id == wait.parent_id == server.span_id
    assert json.loads(jsonrpc.raw_bytes(sent))["params"]["_meta"]["traceparent"] == f"00-{TRACE}-{wait.span_id}-01"
    assert server.error and server.attributes["rpc.response.status_code"] == "-32602"
    assert server.attributes["gen_ai.tool.name"] == "echo" and server.attributes["jsonrpc.request.id"] == "1"
    assert server.attributes["mcp.session.id"] == "s" * 8 and wait.attributes["network.transport"] == "pipe"
    assert server.start <= guard.start <= guard.end <= wait.start <= wait.end == server.end


@pytest.mark.parametrize("way", ["records", "encoded", "span by span"])
def test_the_short_ways_ids_are_exported_as_the_child_got_them(ended: list[Any], way: str) -> None:
    """A request to_child serves in one call (no traceparent anywhere) keeps its trace id and the wait's span id as
    one 24-byte value, which the export cuts: the trace id and the wait's span id exported are the child's
    `_meta.traceparent`'s, by records as the export process gets them (a first of its kind and one by its plan),
    by Trace.encoded, and span by span (a tracestate's way)."""
    from mcpgate.observe import otlp_wire, tracing

    sent = []
    for _ in range(2):
        environ: dict[str, Any] = {"HTTP_MCP_SESSION_ID": "s" * 32, "REQUEST_METHOD": "POST"}
        listed = tracing.begin(environ, "default")
        listed.append(tracing.now())  # the guard's end (app.py's)
        sent.append(json.loads(jsonrpc.raw_bytes(tracing.to_child(environ, message(SPLICED[0][0])))))
        listed.append((tracing.SESSION, tracing.now(), tracing.now()))
        if way != "records":  # (records: the usual request's list, queued as it is)
            trace = tracing.traced(listed, environ)
            assert len(trace.trace_id) == 24 and trace.wait is not None and trace.wait[0] is trace.trace_id
        if way == "span by span":
            trace.state = "k=v"
        tracing.finish(environ, 200, b'{"jsonrpc":"2.0","id":1,"result":{}}', [b""])
    head = resource_head("w3c-test")
    if way == "records":
        table, shapes, spans = Table(), Shapes(), []
        for queued in ended:  # (the first frame numbers its shape, the second uses it)
            frame, shapes.sent = payload([queued], shapes)
            spans += decode(encoded_batch(head, frame, table)[0])
    else:
        spans = decode(otlp_wire.request(head, [trace.encoded() for trace, _ in ended]))
    assert len(spans) == 8
    for got in sent:
        _, trace_hex, span_hex, flags = got["params"]["_meta"]["traceparent"].split("-")
        waits = [s for s in spans if s.kind == "CLIENT" and s.span_id == span_hex]
        servers = [s for s in spans if s.kind == "SERVER" and s.trace_id == trace_hex]
        assert flags == "01" and len(waits) == len(servers) == 1
        assert waits[0].trace_id == trace_hex and waits[0].parent_id == servers[0].span_id


def test_a_tool_error_marks_the_requests_span(ended: list[Any]) -> None:
    """A tools/call answered with a result whose isError is true: the span is an error of type tool_error (one
    with isError false, or true only deeper in the result, is not)."""
    from mcpgate.observe import otlp_wire, tracing

    answers = [
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"isError":true}}}',
    ]
    for answer in answers:
        environ: dict[str, Any] = {"REQUEST_METHOD": "POST"}
        tracing.begin(environ, "default")
        tracing.to_child(environ, message(SPLICED[0][0]))
        tracing.finish(environ, 200, answer, [b""])
    spans = decode(otlp_wire.request(resource_head("w3c-test"), [trace.encoded() for trace, _ in ended]))
    servers = [s for s in spans if s.kind == "SERVER"]
    assert [(s.error, s.attributes.get("error.type")) for s in servers] == [
        (True, "tool_error"),
        (False, None),
        (False, None),
    ]


def test_a_batch_goes_out_on_the_lean_connection_to_a_plain_http_receiver() -> None:
    """A plain-HTTP endpoint without compression: batches on a connection of its own (kept when the receiver keeps
    it), with the SDK client's headers; https, compression, or no such client: the SDK client posts."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from mcpgate.observe.span_batches import LeanPost

    with receiver() as got:
        lean = LeanPost.of(OTLPSpanExporter(endpoint=got.url, headers={"x-tenant": "t1"})._client)
        assert lean is not None
        body = otlp_request()
        assert lean.post(body) and lean.post(body)
        assert got.bodies == [body, body]
        lean.close()
    assert LeanPost.of(OTLPSpanExporter(endpoint="https://collector.example/v1/traces")._client) is None
    assert LeanPost.of(OTLPSpanExporter(endpoint=got.url, compression=Compression.Gzip)._client) is None
    assert LeanPost.of(None) is None


def otlp_request() -> bytes:
    from mcpgate.observe import otlp_wire

    head = otlp_wire.resource_head({"service.name": "lean"}, "mcpgate", "0")
    span = otlp_wire.span(b"\x01" * 16, b"\x02" * 8, b"", "", "s", 1, 1, 2, b"", False, False)
    return otlp_wire.request(head, [span])


PLAIN = [  # a request to_child takes the short way with (no _meta, no traceparent header)
    SPLICED[0][0],
    SPLICED[1][0],
    SPLICED[2][0],
    b'{"jsonrpc":"2.0","id":"a","method":"prompts/get","params":{"name":"greet"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"params":{}}}}',  # not spliced
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params" :{"name":"x"},"y":{"params":{}}}',  # nor here
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\u0078"}}',  # an escape: not spliced
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{ "name":"x"}}',  # the search's way
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}',
    # a 2026-07-28 request's _meta (no W3C field in it): the short way too, its raw bytes encoded again
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":'
    b'{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}',
    b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":5},"name":"x"}}',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{}}}',
]
LONG = [  # the long way, whichever is called: a W3C field in _meta, or an _meta that is no object
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"traceparent":"00-'
    + TRACE.encode()
    + b'-a269f801cf0054d7-01"}}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"tracestate":"k=v"}}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":"m"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":null}}',
]


@pytest.mark.parametrize("raw", PLAIN + LONG)
@pytest.mark.parametrize("rule", [True, False])
def test_the_short_way_to_the_child_is_the_long_one(
    raw: bytes, rule: bool, ended: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """to_child's short way for the common request leaves the message and the Trace as `open`, `context` and
    put_in_meta do, for a sampled request and an unsampled one (the sampler's rule with no parent: ParentBased's
    root); a request of PLAIN goes the short way (opened_to_child is not called)."""
    from mcpgate.observe import tracing

    monkeypatch.setattr(tracing, "_rules", (rule, True, False))
    monkeypatch.setattr(tracing, "_root", rule)
    long_way = tracing.opened_to_child
    longs: list[bytes] = []

    def counted(trace: Any, environ: dict[str, Any], message: Any) -> Any:
        longs.append(raw)
        return long_way(trace, environ, message)

    monkeypatch.setattr(tracing, "opened_to_child", counted)
    got = []
    for short in (True, False):
        drawn = w3c.Ids()
        drawn.drawn = bytes(range(1, 256)) * 16
        monkeypatch.setattr(tracing, "IDS", drawn)
        environ: dict[str, Any] = {"HTTP_MCP_SESSION_ID": "s" * 32, "REQUEST_METHOD": "POST"}
        listed = tracing.begin(environ, "default")
        with tracing.step(environ, "mcpgate.guard"):
            pass
        if short:
            sent = tracing.to_child(environ, message(raw))
            assert longs == ([] if raw in PLAIN else [raw])
        else:
            sent = long_way(tracing.traced(listed, environ), environ, message(raw))
        assert isinstance(sent, Request)
        trace = tracing.traced(listed, environ)
        trace.steps = tracing.steps_of(listed)
        ids = trace.trace_id[:16]  # (the short way's 24 bytes: the trace id, then the wait's span id, as exported)
        fields = (ids, trace.sampled, trace.decided, trace.opened, trace.what, trace.session, trace.state)
        steps = [name for name, _, _ in trace.steps]
        got.append(
            (sent.raw, sent.obj, fields, trace.http_method, trace.wait and trace.wait[0][-8:], steps, trace.parent)
        )
    assert got[0] == got[1]
    assert json.loads(jsonrpc.raw_bytes(message(raw))) != got[0][1]
    assert raw in LONG or (got[0][4] is not None) is rule  # (LONG's first: sampled by its parent's flag)
