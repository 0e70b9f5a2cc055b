"""The record of an ended request the worker writes to the span export process's pipe (observe/span_pipe.py): the
Trace's fields the export reads (span_export.RECORD names them, in this order), as marshal takes them. One layout,
written here once; a batch's records are made in one pass (no call a Trace)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def record(trace: Any) -> tuple[Any, ...]:
    """A Trace's fields the export reads (span_export.RECORD's), as marshal takes them: `records`' layout, the one
    place it is written."""
    return records(((trace, 0),))[0]


def records(queued: Iterable[tuple[Any, int]]) -> list[tuple[Any, ...]]:
    """The record of each queued Trace (with its span count), in one pass: no call a Trace (a batch's usual way).
    A record is the Trace's fields the export reads (span_export.RECORD's), as marshal takes them."""
    return [
        (
            trace.what,
            trace.http_method,
            trace.kind,
            trace.server,
            trace.session,
            trace.trace_id,
            trace.span_id,
            None
            if (parent := trace.parent) is None
            else (parent.trace_id, parent.span_id, parent.sampled, parent.state),
            trace.state,
            trace.start,
            trace.end_at,
            trace.status,
            trace.code,
            trace.tool_error,
            trace.steps,
            trace.wait,
            trace.forward,
        )
        for trace, _ in queued
    ]
