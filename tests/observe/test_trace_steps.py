"""A request's steps timed the request path's way (tracing.now, the step, Trace.took in a finally clause) are the
steps a `with tracing.step(...)` block times: the same names in the same order, each inside its own block, none
for a request known to be unsampled, and a step that raised timed all the same; a span's end marks a tool error
as answer_marks.tool_error does."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Request
from mcpgate.observe import tracing
from mcpgate.observe.answer_marks import error_code, tool_error
from mcpgate.observe.span_pipe import Kept
from mcpgate.observe.tracing import KEY, Trace
from tests.observe.test_trace_answers import ANSWERS

PLAIN = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}'
ROUND = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","requestState":"s"}}'


def request(raw: bytes) -> Request:
    parsed = jsonrpc.parse(raw)
    assert isinstance(parsed, Request)
    return parsed


def traced(decided: bool, sampled: bool) -> tuple[dict[str, Any], Trace]:
    trace = Trace("default")
    trace.decided, trace.sampled = decided, sampled
    return {KEY: trace}, trace


class Refused(Exception):
    pass


def by_took(trace: Trace, message: Request | None) -> None:
    """The steps as app.py, streamable.py and stateless.py time them."""
    began = tracing.now()
    try:
        pass
    finally:
        trace.took(tracing.GUARD, began)
    began = tracing.now()
    try:
        raise Refused
    except Refused:
        pass
    finally:
        trace.took(tracing.step_name(tracing.POOL, message), began)


def by_with(environ: dict[str, Any], message: Request | None) -> None:
    """The same steps in `with tracing.step(...)` blocks."""
    with tracing.step(environ, tracing.GUARD):
        pass
    try:
        with tracing.step(environ, tracing.POOL, message):
            raise Refused
    except Refused:
        pass


@pytest.mark.parametrize(("decided", "sampled"), [(True, True), (True, False), (False, False), (False, True)])
@pytest.mark.parametrize("raw", [None, PLAIN, ROUND])
def test_took_times_what_a_with_block_times(decided: bool, sampled: bool, raw: bytes | None) -> None:
    message = None if raw is None else request(raw)
    got = []
    for timing in ("took", "with"):
        environ, trace = traced(decided, sampled)
        before = tracing.now()
        if timing == "took":
            by_took(trace, message)
        else:
            by_with(environ, message)
        after = tracing.now()
        assert all(before <= began <= ended <= after for _, began, ended in trace.steps)
        assert [began for _, began, _ in trace.steps] == sorted(began for _, began, _ in trace.steps)
        got.append([name for name, _, _ in trace.steps])
    assert got[0] == got[1]
    pool = "mcpgate.mrtr" if raw == ROUND else "mcpgate.pool"
    assert got[0] == ([] if decided and not sampled else ["mcpgate.guard", pool])


@pytest.mark.parametrize(("body", "expected"), ANSWERS)
def test_a_spans_end_marks_a_tool_error_as_tool_error_tells_it(
    body: bytes, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trace.end's own look at a tools/call answer (its usual answer told without a call) marks what
    answer_marks.tool_error marks, the bytes cut short after "isError" included."""
    collected = Kept()
    monkeypatch.setattr(tracing, "TRACER", collected)
    for answer in (body, body[: body.find(b'"isError"') + 12] if b'"isError"' in body else body):
        environ, trace = traced(True, True)
        trace.opened, trace.what = True, ("tools/call", "echo", None, 1)
        tracing.finish(environ, 200, answer, [answer])
        assert trace.tool_error is tool_error(answer)
    assert collected.ended[0].tool_error is expected


MARKED = [  # answers a span's end reads (the usual tools/call answer told by one search, the rest by `marked`)
    *ANSWERS,
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}', False),
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad","data":{"isError":false}}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"mirror"}],"isError":false}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"mirror"}],"isError":true}}', True),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false,"error":{"code":1}}}', False),
    (b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":falsehood}}', False),  # no JSON: as marked reads it
    (b'{"isError":false}', False),
    (b'rror"', False),
    (b"", False),
]


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
@pytest.mark.parametrize(("body", "expected"), MARKED)
def test_a_spans_end_reads_an_answer_as_answer_marks_does(
    body: bytes, expected: bool, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trace.end's error code and tool error are answer_marks' for a table of answers (its one search's every way:
    no "rror\"", the usual tools/call answer, more than one, one that is no "isError":false), for a tools/call and
    for a request whose answer has no tool error."""
    monkeypatch.setattr(tracing, "TRACER", Kept())
    environ, trace = traced(True, True)
    trace.opened, trace.what = True, (method, "echo", None, 1)
    tracing.finish(environ, 200, body, [body])
    code = error_code(body) if body.find(b'"error"') >= 0 else None
    assert trace.code == code
    assert trace.tool_error is (code is None and method == "tools/call" and tool_error(body))
    if method == "tools/call" and code is None:
        assert trace.tool_error is expected


@pytest.mark.parametrize("way", ["bytes", "stream", "end"])
def test_a_requests_end_queues_it_once_whichever_way_it_ends(way: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """finish with a whole body queues the Trace at once; with a streamed body, when the body closes; Trace.end (the
    relay's way) as finish does: once, its status and spans counted, and a sampled Trace only."""
    kept = Kept()
    monkeypatch.setattr(tracing, "TRACER", kept)
    answer = b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}'
    for sampled in (True, False):
        environ, trace = traced(True, sampled)
        trace.opened, trace.what = True, ("tools/call", "echo", None, 1)
        trace.took(tracing.GUARD, tracing.now())
        if way == "end":
            del environ[KEY]
            trace.end(environ, 200, answer)
        else:
            sent = tracing.finish(environ, 200, answer if way == "bytes" else iter([answer]), [answer])
            assert KEY not in environ
            if way == "stream":
                assert kept.queue == [] and list(sent) == [answer]
                sent.close()  # type: ignore[attr-defined]
        assert kept.queue == ([(trace, 2)] if sampled else [])
        assert trace.status == (200 if sampled else 0) and trace.tool_error is (sampled and way != "stream")
        kept.queue.clear()
