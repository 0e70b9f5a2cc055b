"""The export writes a trace with no tracestate and no forward into its layout's template (observe/trace_spans.py
encode_into): the bytes are those the span-by-span writer gives (spans_into), for a table of traces (kinds, steps,
a wait, a remote parent, errors, request ids short and long, a "%" in a name), and opentelemetry-proto decodes
them. A batch's records, taken in one pass (span_records.records), are each Trace's `record`."""

from __future__ import annotations

import marshal
from typing import Any

import pytest

from mcpgate.observe import otlp_wire, trace_spans, w3c
from mcpgate.observe.span_records import record, records
from mcpgate.observe.tracing import CLIENT, SERVER, Trace
from tests.support.otlp import decode

PARENT = w3c.Parent(bytes(range(1, 17)), bytes(range(30, 38)), True, "")
STEPS = [("mcpgate.guard", 1_000_100, 1_000_200), ("mcpgate.session", 1_000_300, 1_000_350)]

CASES: list[dict[str, Any]] = [
    {},  # a 2025 tools/call: guard, session, the wait for the child
    {"parent": PARENT},
    {"steps": []},
    {"steps": STEPS[:1], "wait": None},
    {"steps": [("mcpgate.mrtr", 5, 6), ("100%d", 7, 8)]},
    {"code": -32602},
    {"tool_error": True, "session": "s%" * 20},
    {"status": 503, "server": None},
    {"what": ("tools/call", "echo", "2026-07-28", "x" * 90)},
    {"what": ("tools/call", "echo", None, "y" * 300)},  # a request id past the one-byte lengths
    {"what": ("prompts/get", "greet%s", None, None)},
    {"what": "GET", "wait": None},  # no request: named by its method, no shared attributes
    {"kind": CLIENT, "server": None, "what": ("tools/call", "echo", None, 3), "steps": [], "wait": None},
]


def trace_of(case: dict[str, Any]) -> Trace:
    trace = Trace(case.get("server", "default"), case.get("kind", SERVER))
    trace.trace_id, trace.span_id, trace.parent = bytes(range(100, 116)), bytes(range(50, 58)), case.get("parent")
    trace.what = case.get("what", ("tools/call", "echo", None, 7))
    trace.session, trace.http_method = case.get("session", "a" * 32), "POST"
    trace.start, trace.end_at = 1_000_000, 1_009_000
    trace.status, trace.code, trace.tool_error = (
        case.get("status", 200),
        case.get("code"),
        case.get("tool_error", False),
    )
    trace.steps = list(case.get("steps", STEPS))
    trace.wait = case.get("wait", (bytes(range(70, 78)), 1_000_250))
    return trace


def ids() -> w3c.Ids:
    drawn = w3c.Ids()
    drawn.drawn = bytes(range(1, 256)) * 16
    return drawn


@pytest.mark.parametrize("case", CASES)
def test_a_layouts_bytes_are_the_span_by_span_bytes(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_spans, "IDS", ids())
    by_layout: list[bytes] = []
    trace_spans.encode_into(trace_of(case), by_layout)
    trace_spans.encode_into(trace_of(case), by_layout)  # the second from the layout kept
    monkeypatch.setattr(trace_spans, "IDS", ids())
    by_span: list[bytes] = []
    trace_spans.spans_into(trace_of(case), by_span)
    trace_spans.spans_into(trace_of(case), by_span)
    assert b"".join(by_layout) == b"".join(by_span)
    head = otlp_wire.resource_head({"service.name": "layouts"}, "mcpgate", "0")
    spans = decode(otlp_wire.request(head, [b"".join(by_layout)]))
    expected = 1 + len(case.get("steps", STEPS)) + (case.get("wait", True) is not None)
    assert len(spans) == 2 * expected
    assert {span.trace_id for span in spans} == {bytes(range(100, 116)).hex()}


@pytest.mark.parametrize("case", CASES)
def test_a_record_is_packed_as_its_trace_is(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """What the worker writes of a Trace, packed straight from its fields (encode_record, once encode_into has
    seen one of its kind), is the span-by-span bytes too; a record of a kind not seen yet is left to encode_into."""
    fields = marshal.loads(marshal.dumps([record(trace_of(case))]))[0]
    monkeypatch.setattr(trace_spans, "_plans", {})
    assert not trace_spans.encode_record(fields, [])
    trace_spans.encode_into(trace_of(case), [])
    monkeypatch.setattr(trace_spans, "IDS", ids())
    by_record: list[bytes] = []
    packed = trace_spans.encode_record(fields, by_record)
    assert packed is isinstance(case.get("what", ()), tuple)
    if packed:
        monkeypatch.setattr(trace_spans, "IDS", ids())
        by_span: list[bytes] = []
        trace_spans.spans_into(trace_of(case), by_span)
        assert b"".join(by_record) == b"".join(by_span)


@pytest.mark.parametrize("size", [0, 1, 7, 100, 101, 127, 128, 300, 20000])
def test_a_request_ids_prefix_and_value_are_its_key_value(size: int) -> None:
    """A layout writes the request id attribute as a constant prefix (by the value's size: its lengths are varints
    of one byte, then two) and the id's bytes: the KeyValue the general writer gives."""
    value = "7" * size
    assert trace_spans.id_prefix(size) + value.encode() == otlp_wire.key_value(9, "jsonrpc.request.id", value)


def test_a_full_cache_is_emptied_not_frozen() -> None:
    """A long-lived worker's sessions each name their own attributes: past the bound the cache starts again, so a
    new session's are cached too (a cache that stopped taking entries would leave every new one uncached)."""
    cache: dict[int, int] = {}
    for n in range(10):
        otlp_wire.keep(cache, n, n, bound=4)
        assert len(cache) <= 4 and cache[n] == n


def test_a_batchs_records_are_each_traces_record() -> None:
    """span_records.records (a flush's one pass over the queue) writes what `record` writes of each Trace, in order,
    for the table's traces and one with a tracestate and a forward (the span-by-span kind)."""
    traces = [trace_of(case) for case in CASES]
    odd = trace_of({"parent": w3c.Parent(bytes(range(1, 17)), bytes(range(30, 38)), False, "k=v")})
    odd.state, odd.forward = "k=v", (bytes(range(80, 88)), 1_000_400, "instance-2")
    traces.append(odd)
    queued = [(trace, 1 + len(trace.steps)) for trace in traces]
    assert records(queued) == [record(trace) for trace in traces]
    assert marshal.loads(marshal.dumps(records(queued))) == [record(trace) for trace in traces]
    assert records([]) == []
