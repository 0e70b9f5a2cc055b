"""The records of ended requests the worker writes to the span export process's pipe (observe/span_pipe.py), a
frame's payload at a time, and their reading back there (observe/span_export.py).

A frame's payload is one marshal'd tuple (start, shapes, packed, records, offset, listed):

- `listed`: the usual request (a 2025 session's call or a pooled one, answered whole with no error) as the list
  observe/tracing.py made of it, as it is: its start, server, the guard's end, to_child's (ids, the request's bytes
  or request_of's tuple, the wait's start), its step, end, status and session; read back by `from_list`, what the
  request asked read from its bytes here (trace_sampling.request_of_bytes), not on the request path;
- `offset`: the wall clock's nanoseconds at the monotonic clock's 0, as the worker saw it (times go as seconds);
- `packed`: a Trace that to_child's usual way served but the list could not carry (an error answer, say:
  the ids of its own trace and of the wait for its child as one 24-byte draw, two steps, no tracestate, no
  parent, no forward, an integer request id) as one PACKED struct of the values that vary per request (its
  shape's index, the 24 id bytes, the request id, seven times), in one bytes value;
- `shapes`: the shapes (SHAPE: method, tool, protocol version, server, session, status, error code, tool error, the
  two steps' names) that first appeared since the export process last got one, numbered from `start` in the
  order they appeared; each export process keeps the table (`Table`) the frames it read built, and a frame
  starting at 0 (a new export process, a worker's table past SHAPES_KEPT started again) begins it anew. A frame
  that was not written (the pipe full) takes its shapes along to the next one;
- `records`: every other request as a record of the Trace's fields (RECORD's, in order: span_export.Record), as
  marshal takes them, made in one pass (no call a Trace).

`unpacked` turns a payload back into records (a packed request's as `record` would have written it), which is
how the export process reads every request; a payload that is a list is records alone (tests, older frames).
"""

from __future__ import annotations

import marshal
import struct
import time
from collections.abc import Iterable
from typing import Any

from mcpgate.observe.trace_sampling import request_of_bytes
from mcpgate.observe.trace_steps import GUARD

PACKED = struct.Struct("<I24sq7d")  # shape, ids, request id; start, the steps' starts and ends, the wait's, end
SHAPE = ("method", "target", "version", "server", "session", "status", "code", "tool_error", "first", "second")
SHAPES_KEPT = 4096  # shapes a worker numbers before it starts its table again
SERVER = 2  # OTLP's span kind of a packed request's span
NS = 1e9  # nanoseconds a second (a time's seconds, times this, truncated: within a nanosecond)


class Shapes:
    """The worker's shape table: each shape's number, the shapes in their order, how many the export process has
    (`sent`), and which export process that is (`process`: its start's number)."""

    __slots__ = ("index", "listed", "process", "sent")

    def __init__(self) -> None:
        self.index: dict[tuple[Any, ...], int] = {}
        self.listed: list[tuple[Any, ...]] = []
        self.sent, self.process = 0, 0

    def add(self, shape: tuple[Any, ...]) -> int:
        at = self.index[shape] = len(self.listed)
        self.listed.append(shape)
        return at

    def restart(self) -> None:
        """Numbered from 0 again (the next frame starts the export process's table again too)."""
        self.index.clear()
        self.listed.clear()
        self.sent = 0


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


def payload(queued: Iterable[tuple[Any, int]], shapes: Shapes) -> tuple[bytes, int]:
    """A frame's payload of the queued Traces (their shapes from shapes.sent on), and the shapes it numbers: the
    caller sets shapes.sent to that once the frame is written. A table past SHAPES_KEPT starts again first."""
    if len(shapes.listed) >= SHAPES_KEPT:
        shapes.restart()
    index, pack, packed, others, listed = shapes.index, PACKED.pack, [], [], []
    for trace, spans in queued:
        if type(trace) is list:  # the usual request's list (tracing.finish): marshal'd as it is
            listed.append(trace)
            continue
        wait = trace.wait
        if wait is not None and wait[0] is trace.trace_id and trace.forward is None:  # to_child's one draw
            what = trace.what  # (a tuple: to_child's, as its ids)
            try:  # two steps, an integer id, times in range, a shape's values hashable: else a record
                (first, began, ended), (second, began_2, ended_2) = trace.steps
                shape = (
                    what[0],
                    what[1],
                    what[2],
                    trace.server,
                    trace.session,
                    trace.status,
                    trace.code,
                    trace.tool_error,
                    first,
                    second,
                )
                at = known = index.get(shape)
                if known is None:  # a new shape: numbered once its request is packed
                    at = len(shapes.listed)
                packed.append(
                    pack(at, wait[0], what[3], trace.start, began, ended, began_2, ended_2, wait[1], trace.end_at)
                )
                if known is None:
                    shapes.add(shape)
                continue
            except (ValueError, TypeError, struct.error):
                pass
        others.append((trace, spans))
    start, numbered = shapes.sent, len(shapes.listed)
    offset = time.time_ns() - int(time.monotonic() * NS)  # the wall clock's time at the monotonic clock's 0
    body = (start, shapes.listed[start:], b"".join(packed), records(others), offset, listed)
    return marshal.dumps(body), numbered


class Table:
    """The export process's shape table, as the frames it read built it."""

    def __init__(self) -> None:
        self.shapes: list[tuple[Any, ...]] = []


def unpacked(data: bytes, table: Table) -> list[tuple[Any, ...]]:
    """A frame's payload as records (span_export.RECORD's fields, in order), its shapes added to `table` first."""
    got = marshal.loads(data)
    if type(got) is list:  # records alone
        return got
    start, shapes, packed, others, offset, listed = got
    out = [from_list(fields, offset) for fields in listed]
    del table.shapes[start:]
    table.shapes += shapes
    known = table.shapes
    out += [in_ns(fields, offset) for fields in others]
    for at, ids, request, begun, began, ended, began_2, ended_2, waited, end in PACKED.iter_unpack(packed):
        method, target, version, server, session, status, code, error, first, second = known[at]
        steps = [(first, int(began * NS) + offset, int(ended * NS) + offset)]
        steps.append((second, int(began_2 * NS) + offset, int(ended_2 * NS) + offset))
        start_ns, end_ns, wait = int(begun * NS) + offset, int(end * NS) + offset, (ids, int(waited * NS) + offset)
        what = (method, target, version, request)
        out.append(_served(what, server, session, ids, start_ns, end_ns, status, code, error, steps, wait))
    return out


def _served(
    what: Any,
    server: str,
    session: str | None,
    ids: bytes,
    start_ns: int,
    end_ns: int,
    status: int,
    code: int | None,
    error: bool,
    steps: list[tuple[str, int, int]],
    wait: tuple[bytes, int],
) -> tuple[Any, ...]:
    """The record of a request served with the usual spans (a packed record's, a usual list's): no parent, no
    forward, its trace id and the wait's span id the one 24-byte value `ids`."""
    return (
        what,
        "",
        SERVER,
        server,
        session,
        ids,
        b"",
        None,
        "",
        start_ns,
        end_ns,
        status,
        code,
        error,
        steps,
        wait,
        None,
    )


def from_list(listed: list[Any], offset: int) -> tuple[Any, ...]:
    """A usual request's list (observe/tracing.py: start, server, the guard's end, to_child's ids, bytes and wait's
    start, its one step, its end, status and session) as a record, its times the wall clock's nanoseconds and what
    it asked read from its bytes (trace_sampling.request_of_bytes)."""
    start, server, guarded, (ids, sent, waited), (second, began, ended), end, status, session = listed
    begun = int(start * NS) + offset
    steps = [(GUARD, begun, int(guarded * NS) + offset), (second, int(began * NS) + offset, int(ended * NS) + offset)]
    what = request_of_bytes(sent) if type(sent) is bytes else sent
    wait = (ids, int(waited * NS) + offset)
    return _served(what, server, session, ids, begun, int(end * NS) + offset, status, None, False, steps, wait)


def in_ns(fields: tuple[Any, ...], offset: int) -> tuple[Any, ...]:
    """A record's times (the worker's monotonic clock's seconds) as nanoseconds of the wall clock."""
    (what, method, kind, server, session, ids, span_id, parent, state, start, end, status, code, error) = fields[:14]
    steps, wait, forward = fields[14:]
    steps = [(name, int(began * NS) + offset, int(ended * NS) + offset) for name, began, ended in steps]
    if wait is not None:
        wait = (wait[0], int(wait[1] * NS) + offset)
    if forward is not None:
        forward = (forward[0], int(forward[1] * NS) + offset, forward[2])
    start, end = int(start * NS) + offset, int(end * NS) + offset
    return (
        what,
        method,
        kind,
        server,
        session,
        ids,
        span_id,
        parent,
        state,
        start,
        end,
        status,
        code,
        error,
        steps,
        wait,
        forward,
    )
