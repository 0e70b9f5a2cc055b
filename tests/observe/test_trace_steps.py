"""A request's steps timed the request path's way (the guard's end appended to the request's list, then each step's
tuple with tracing.now in a finally clause; the guard's start the request's own) are the steps a `with
tracing.step(...)` block times: the same names in the same order, each inside its own block, a step that raised
timed all the same, and none exported for a request known to be unsampled (the path appends them without a check:
`finish` drops them with the request); a span's end marks a tool error as answer_marks.tool_error does."""

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
    """A request's list (tracing.begin) holding its Trace (tracing.traced), decided and sampled as told."""
    environ: dict[str, Any] = {}
    trace = tracing.traced(tracing.begin(environ, "default"), environ)
    trace.decided, trace.sampled = decided, sampled
    return environ, trace


class Refused(Exception):
    pass


def by_path(environ: dict[str, Any], message: Request | None) -> None:
    """The steps as app.py, streamable.py and stateless.py time them (the guard's from the request's start)."""
    listed = tracing.begin(environ, "default")
    try:
        pass
    finally:
        listed.append(tracing.now())
    began = tracing.now()
    try:
        raise Refused
    except Refused:
        pass
    finally:
        listed.append((tracing.step_name(tracing.POOL, message), began, tracing.now()))


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
def test_the_paths_steps_are_what_took_and_a_with_block_time(
    decided: bool, sampled: bool, raw: bytes | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = None if raw is None else request(raw)
    kept = Kept()
    monkeypatch.setattr(tracing, "TRACER", kept)
    got, exported = [], []
    for timing in ("path", "with"):
        before = tracing.now()
        environ: dict[str, Any] = {}
        if timing == "path":
            by_path(environ, message)
        else:
            tracing.begin(environ, "default")
            by_with(environ, message)
        after = tracing.now()
        listed = environ[KEY]
        steps = tracing.steps_of(listed)
        assert all(before <= began <= ended <= after for _, began, ended in steps)
        assert [began for _, began, _ in steps] == sorted(began for _, began, _ in steps)
        if timing == "path":
            assert steps[0][1] == listed[0]  # the guard's start: the request's, no clock read of its own
        trace = tracing.traced(listed, environ)
        trace.opened, trace.decided, trace.sampled = True, decided, sampled
        tracing.finish(environ, 200, b"{}", [b"{}"])
        got.append([name for name, _, _ in trace.steps])
        exported.append([[name for name, _, _ in ended.steps] for ended in kept.ended])
        kept.queue.clear()
    pool = "mcpgate.mrtr" if raw == ROUND else "mcpgate.pool"
    assert got[0] == got[1] == ["mcpgate.guard", pool]  # appended without a check
    # (opened by hand: `sampled` is what finish reads, the decision of an undecided one not asked here)
    assert exported[0] == exported[1] == ([["mcpgate.guard", pool]] if sampled else [])


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
        environ[KEY].append((tracing.GUARD, tracing.now(), tracing.now()))
        if way == "end":
            trace.steps = tracing.steps_of(environ.pop(KEY))
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
