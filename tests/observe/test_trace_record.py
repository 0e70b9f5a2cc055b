"""observe/trace_record.py holds the Trace (the request's spans for what the usual list does not carry) and reads
the sampling state from observe/tracing.py, which imports its Trace from it: the two import each other, so each
must import first in a fresh interpreter, and the Trace reads tracing's state as setup (or a test) leaves it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcpgate.observe import trace_record, tracing, w3c

FIRST = ["mcpgate.observe.trace_record", "mcpgate.observe.tracing", "mcpgate.observe.span_records"]


@pytest.mark.parametrize("first", FIRST)
def test_either_module_imports_first(first: str) -> None:
    check = (
        f"import {first}\n"
        "from mcpgate.observe import trace_record, tracing\n"
        "assert tracing.Trace is trace_record.Trace and trace_record._state is tracing\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("always", "rules", "header", "decided", "sampled"),
    [
        (True, (True, True, False), None, True, True),
        (None, ("asked", True, False), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", True, False),
        (None, ("asked", True, False), None, False, False),
    ],
)
def test_a_trace_reads_the_sampling_state_tracing_holds(
    always: bool | None,
    rules: tuple[object, ...],
    header: str | None,
    decided: bool,
    sampled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "_always", always)
    monkeypatch.setattr(tracing, "_rules", rules)
    environ = {} if header is None else {"HTTP_TRACEPARENT": header}
    trace = trace_record.Trace("default", trace_record.SERVER, environ)
    assert (trace.decided, trace.sampled) == (decided, sampled)


def test_a_trace_opened_takes_its_ids_from_tracings_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = w3c.Ids()
    monkeypatch.setattr(tracing, "IDS", drawn)
    monkeypatch.setattr(tracing, "_always", True)
    trace = tracing.Trace("default")
    trace.open({}, None)
    assert trace.trace_id == drawn.drawn[:16] and drawn.at == 16


def test_the_request_paths_hooks_make_no_cells() -> None:
    """A function with a closure makes a cell for each name it shares at every call, taken or not: the hooks every
    traced request runs leave a streamed body's ending to the Trace (Trace.ending) instead."""
    for hook in (tracing.to_child, tracing.finish, tracing.traced):
        assert hook.__code__.co_cellvars == (), hook.__name__
