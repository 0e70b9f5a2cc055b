"""A frame's payload as the worker writes it and the export process reads it (observe/span_records.py): the usual
request packed with its shape numbered, every other one a record; read back, each is the record the Trace makes,
its times the wall clock's nanoseconds; a shape goes once to each export process, again after a frame that was
not written, and a table past its bound starts again."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.observe import span_records
from mcpgate.observe.span_records import Shapes, Table, payload, record, unpacked
from mcpgate.observe.tracing import SERVER, Trace

NS = 1_000_000_000
ONE = bytes(range(1, 25))  # to_child's one draw: the trace id, then the wait's span id


def usual(n: int = 7, **fields: Any) -> Trace:
    """A 2025 session's tools/call as to_child and finish leave it (times: the monotonic clock's seconds)."""
    trace = Trace("default", SERVER)
    trace.start, trace.end_at, trace.trace_id = 100.0, 100.5, ONE
    trace.what, trace.session, trace.status = ("tools/call", "echo", None, n), "s" * 32, 200
    trace.steps = [("mcpgate.guard", 100.0, 100.125), ("mcpgate.session", 100.25, 100.375)]
    trace.wait = (ONE, 100.1875)
    for name, value in fields.items():
        setattr(trace, name, value)
    return trace


CASES: list[tuple[str, dict[str, Any], bool]] = [  # a name, the Trace's fields changed, packed
    ("usual", {}, True),
    ("a tool error", {"tool_error": True}, True),
    ("an error code", {"code": -32602, "status": 200}, True),
    ("a pooled call's steps", {"steps": [("mcpgate.guard", 100.0, 100.1), ("mcpgate.pool", 100.2, 100.3)]}, True),
    ("one step", {"steps": [("mcpgate.guard", 100.0, 100.1)]}, False),
    ("a string id", {"what": ("tools/call", "echo", None, "a")}, False),
    ("an id past 64 bits", {"what": ("tools/call", "echo", None, 1 << 70)}, False),
    ("a name that is no string", {"what": ("tools/call", ["x"], None, 1)}, False),
    ("ids of its own", {"trace_id": ONE[:16], "wait": (ONE[16:], 100.1875)}, False),
    ("a forward", {"forward": (ONE[16:], 100.2, "b")}, False),
    ("no wait", {"wait": None}, False),
]


def in_ns(fields: tuple[Any, ...], offset: int) -> tuple[Any, ...]:
    return span_records.in_ns(fields, offset)


@pytest.mark.parametrize(("name", "changed", "packed"), CASES, ids=[case[0] for case in CASES])
def test_a_payload_reads_back_as_the_traces_record(name: str, changed: dict[str, Any], packed: bool) -> None:
    trace = usual(**changed)
    data, numbered = payload([(trace, 4)], Shapes())
    start, shapes, packs, records, offset, _ = span_records.marshal.loads(data)
    assert (len(packs) == span_records.PACKED.size, len(records) == 1) == (packed, not packed)
    assert start == 0 and numbered == len(shapes) == (1 if packed else 0)
    (got,) = unpacked(data, Table())
    assert got == in_ns(record(trace), offset)
    assert got[9] == offset + 100 * NS and got[10] == offset + 100_500_000_000  # the wall clock's ns


def test_a_shape_goes_once_to_each_export_process_and_again_after_an_unwritten_frame() -> None:
    shapes, table = Shapes(), Table()
    first, numbered = payload([(usual(1), 4)], shapes)
    assert span_records.marshal.loads(first)[1] and numbered == 1
    again, _ = payload([(usual(2), 4)], shapes)  # the first frame not written: its shape goes again
    assert span_records.marshal.loads(again)[:2] == (0, span_records.marshal.loads(first)[1])
    shapes.sent = numbered  # written
    later, _ = payload([(usual(3), 4), (usual(4, session="t" * 32), 4)], shapes)
    start, listed = span_records.marshal.loads(later)[:2]
    assert (start, [shape[4] for shape in listed]) == (1, ["t" * 32])  # only the new session's
    assert [got[0][3] for got in unpacked(again, table)] == [2]
    assert [got[0][3] for got in unpacked(later, table)] == [3, 4]
    assert [got[4] for got in unpacked(later, table)] == ["s" * 32, "t" * 32]
    fresh = Table()  # a new export process: the worker starts its numbers' list again (SpanPipe.flush)
    shapes.sent = 0
    restarted, _ = payload([(usual(5, session="t" * 32), 4)], shapes)
    assert [got[4] for got in unpacked(restarted, fresh)] == ["t" * 32]


def test_a_table_past_its_bound_starts_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_records, "SHAPES_KEPT", 2)
    shapes, table = Shapes(), Table()
    for n in range(5):
        data, shapes.sent = payload([(usual(n, session=f"{n}" * 32), 4)], shapes)
        (got,) = unpacked(data, table)
        assert got[4] == f"{n}" * 32 and len(table.shapes) <= 2 + 1


BODIES = [  # a usual request's bytes: a 2025 session's call, a 2026-07-28 one (its _meta), one past RAW_SENT
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"message":"hi"}}}',
    b'{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"echo","arguments":{},'
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}',
    b'{"jsonrpc":"2.0","id":8,"method":"prompts/get","params":{"name":"p","arguments":{"x":"%s"}}}' % (b"y" * 3000),
]


@pytest.mark.parametrize("body", BODIES, ids=["2025", "2026-07-28", "past RAW_SENT"])
def test_a_usual_requests_list_reads_back_as_its_traces_record(body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A usual request's list (tracing.begin, the guard's end, to_child, a step, finish) is queued as it is and read
    back by the export process (what it asked read from its bytes) as the record of the Trace the list holds when
    the usual way does not serve it (tracing.traced)."""
    from mcpgate.core import jsonrpc
    from mcpgate.observe import tracing
    from mcpgate.observe.span_pipe import Kept

    kept = Kept()
    monkeypatch.setattr(tracing, "TRACER", kept)
    monkeypatch.setattr(tracing, "_root", True)
    monkeypatch.setattr(span_records.time, "time_ns", lambda: 5 * NS)  # one offset for both payloads
    monkeypatch.setattr(span_records.time, "monotonic", lambda: 1.0)
    environ: dict[str, Any] = {"HTTP_MCP_SESSION_ID": "s" * 32}
    listed = tracing.begin(environ, "default")
    listed.append(tracing.now())
    tracing.to_child(environ, jsonrpc.parse(body))
    listed.append((tracing.POOL, tracing.now(), tracing.now()))
    tracing.finish(environ, 200, b'{"jsonrpc":"2.0","id":7,"result":{}}', [b""])
    assert kept.queue == [(listed, 4)]
    trace = tracing.traced(listed[:5], environ)
    trace.steps, (trace.end_at, trace.status) = tracing.steps_of(listed), listed[5:7]
    got = unpacked(payload(kept.queue, Shapes())[0], Table())
    assert got == unpacked(payload([(trace, 4)], Shapes())[0], Table())
    assert got[0][0][:2] == (("tools/call", "echo") if b"tools/call" in body else ("prompts/get", "p"))


def test_a_request_whose_list_holds_a_trace_gives_the_child_the_traces_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list that holds a Trace already (a forward's, before to_child) is not the usual one: the child's context is
    the Trace's (its trace id, the wait's span id), and the request ends as that Trace, once."""
    from mcpgate.core import jsonrpc
    from mcpgate.observe import tracing
    from mcpgate.observe.span_pipe import Kept

    kept = Kept()
    monkeypatch.setattr(tracing, "TRACER", kept)
    monkeypatch.setattr(tracing, "_root", True)
    environ: dict[str, Any] = {"HTTP_MCP_SESSION_ID": "s" * 32, "REQUEST_METHOD": "POST"}
    listed = tracing.begin(environ, "default")
    tracing.forwarding(environ, [], BODIES[0], "b")
    sent = tracing.to_child(environ, jsonrpc.parse(BODIES[0]))
    listed.append((tracing.SESSION, tracing.now(), tracing.now()))
    tracing.finish(environ, 200, b'{"jsonrpc":"2.0","id":7,"result":{}}', [b""])
    trace = tracing.traced(listed, environ)
    assert isinstance(sent, jsonrpc.Request) and trace.wait is not None
    _, trace_hex, span_hex, _ = sent.params["_meta"]["traceparent"].split("-")
    assert (trace_hex, span_hex) == (trace.trace_id[:16].hex(), trace.wait[0][-8:].hex())
    assert kept.queue == [(trace, 4)]  # its span, the step, the wait, the forward
