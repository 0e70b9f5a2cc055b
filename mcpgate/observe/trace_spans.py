"""A request's Trace (observe/tracing.py) turned into its encoded OTLP spans, in the span export process (from
the record the worker wrote, observe/span_export.py): the
request's own span (SERVER; the relay's: CLIENT), a span per step (INTERNAL), the wait for the child (CLIENT,
its id the one the child's `_meta.traceparent` named) and a forward to another instance (CLIENT). The ids the
request path did not need are drawn here; the attributes the request and its wait share are encoded once.

A gateway's requests come in few layouts (a tools/call of one tool in a 2025 session: its spans' names, kinds and
attributes the same but for the session's): each layout is kept as one struct of its spans' constant bytes and a
field for each id, time, the request id's bytes and the request span's own attributes, packed by a function of
the layout's own that passes the values straight from its arguments (`compiled`), so a request is one call (about
1.9 us a 4-span record in process, with finding its plan; 5 span by span; a %-format of a bytes template cost 3).
A record's plan (its layout and attributes) is found with one key of its values. A tracestate or a forward: span
by span.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol

from mcpgate.core import session_ids
from mcpgate.observe import otlp_wire, w3c

INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds
IDS = w3c.Ids()  # the export's own
_PIPE = otlp_wire.attributes({"network.transport": "pipe"})
_prefixes: dict[int, bytes] = {}  # a request id attribute's bytes before its value, by the value's size
_shapes: dict[tuple[Any, Any, Any], tuple[str, bytes]] = {}  # (method, name, version): span name, shared attributes
_owns: dict[tuple[Any, ...], bytes] = {}  # (kind, server, session, status, code, tool error): the request span's own
Packer = Callable[..., bytes]  # a layout's packer (`compiled`): a request's values in, its spans' bytes out
_layouts: dict[tuple[Any, ...], Packer] = {}  # a trace's layout: how its spans are written (encode_into)
_plans: dict[tuple[Any, ...], tuple[Packer, bytes]] = {}  # what a record says of its kind: layout, own attributes
LAYOUTS = 256  # layouts kept (about 0.6 KB each)


class Trace(Protocol):
    """What the export reads of a request's Trace (observe/tracing.py)."""

    what: tuple[str, Any, Any, Any] | str  # (method, params.name, protocol version, id), or the span's name
    http_method: str
    kind: int
    server: str | None
    session: str | None  # the Mcp-Session-Id it named
    trace_id: bytes
    span_id: bytes  # its own span's, when the request path needed it (b"": drawn here)
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


def encoded(trace: Trace) -> bytes:
    """Every span of an ended, sampled request."""
    out: list[bytes] = []
    encode_into(trace, out)
    return b"".join(out)


def encode_into(trace: Trace, out: list[bytes]) -> None:
    """Every span of an ended, sampled request appended to `out` (a batch's, joined once): packed by its layout
    when it has no tracestate and no forward (the layout: what its spans' bytes are but for its ids, times and
    request id), else span by span. A request's layout and attributes are then kept for encode_record too."""
    if trace.state or trace.forward is not None:
        spans_into(trace, out)
        return
    name, shared, request_id = shape(trace)
    steps, wait, parent, attributes = trace.steps, trace.wait, trace.parent, own_attributes(trace)
    names = tuple([step[0] for step in steps])
    size = -1 if request_id is None else len(request_id)
    key = (trace.kind, name, shared, error_of(trace), parent is not None, names, wait is not None, size)
    packer = _layouts.get((*key, len(attributes)))
    if packer is None:
        packer = layout(*key, len(attributes))
        otlp_wire.keep(_layouts, (*key, len(attributes)), packer, LAYOUTS)
    what = trace.what
    if isinstance(what, tuple) and all(isinstance(part, str | None) for part in what[:3]):
        seen = (*what[:3], trace.kind, trace.server, trace.session, trace.status, trace.code, trace.tool_error)
        otlp_wire.keep(_plans, (*seen, parent is None, wait is None, size, *names), (packer, attributes))
    parent_id = None if parent is None else parent.span_id
    ids, span_id, start, end = trace.trace_id, trace.span_id, trace.start, trace.end_at
    value = request_id or b""
    out.append(packed(packer, ids, span_id, parent_id, start, end, value, attributes, steps, wait))


def encode_record(fields: tuple[Any, ...], out: list[bytes]) -> bool:
    """A request's record as the worker writes it (span_export.RECORD's fields, in order) appended to `out` as
    encode_into would, straight from its fields, when encode_into packed one of its kind before (same method,
    tool, version, server, session, status, error, steps, parent or none, wait or none, request id's size); else
    False. The plan is found with one lookup of a key made of the record's own values."""
    (
        what,
        _,
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
    ) = fields
    if state or forward is not None or type(what) is not tuple:
        return False
    value = str(what[3]).encode()
    try:
        seen = (what[0], what[1], what[2], kind, server, session, status, code, error, parent is None, wait is None)
        plan = _plans.get((*seen, len(value), *[step[0] for step in steps]))
    except TypeError:  # something unhashable: encode_into
        return False
    if plan is None:
        return False
    parent_id = None if parent is None else parent[1]
    out.append(packed(plan[0], ids, span_id, parent_id, start, end, value, plan[1], steps, wait))
    return True


def packed(
    packer: Packer,
    trace_id: bytes,
    span_id: bytes,
    parent_id: bytes | None,
    start: int,
    end: int,
    request_id: bytes,
    attributes: bytes,
    steps: list[tuple[str, int, int]],
    wait: tuple[bytes, int] | None,
) -> bytes:
    """A request's spans by its layout's struct: the values in the struct's order, the constants between
    (`request_id`: the request id attribute's value, its key and lengths among the constants)."""
    drawn = IDS.take(8 * (len(steps) + 1))  # the steps' ids, and the request's own unless it has one
    return packer(trace_id, span_id or drawn[-8:], parent_id, start, end, request_id, attributes, drawn, steps, wait)


def layout(
    kind: int,
    name: str,
    shared: bytes,
    error: bool,
    remote: bool,
    steps: tuple[str, ...],
    wait: bool,
    request_id: int,
    own: int,
) -> Packer:
    """How a trace's spans (no tracestate, no forward) are written: one struct of their fields, in turn a run of
    constant bytes and one value (an id, a time, the request id attribute's value of `request_id` bytes, -1 for
    none, the request span's own attributes of `own` bytes), as encode_into gives the values; and the constants,
    at the even places of the struct's arguments."""
    formats: list[str] = []
    parts: list[bytes | None] = []

    def constant(part: bytes) -> None:
        if parts and parts[-1] is not None:
            parts[-1] += part
        else:
            parts.append(part)
            formats.append("")

    def value(form: str) -> None:
        constant(b"")  # the run of constants before it (empty between two values)
        formats[-1] = f"{len(parts[-1] or b'')}s"
        parts.append(None)
        formats.append(form)

    def span(head: bytes, parent: bool, attributes: tuple[bytes | int, ...], last: bytes) -> None:
        """A span's fields; `attributes`: constant ones, and a value's size for those of each trace."""
        size = 2 + 16 + 2 + 8 + (10 if parent else 0) + len(head) + 18 + len(last)
        size += sum(part if isinstance(part, int) else len(part) for part in attributes)
        constant(b"\x12" + otlp_wire.varint(size) + b"\x0a\x10")
        value("16s")
        constant(b"\x12\x08")
        value("8s")
        if parent:
            constant(b"\x22\x08")
            value("8s")
        constant(head + b"\x39")
        value("Q")
        constant(b"\x41")
        value("Q")
        for part in attributes:
            if isinstance(part, int):
                value(f"{part}s")
            else:
                constant(part)
        constant(last)

    prefix, size = (b"", 0) if request_id < 0 else (id_prefix(request_id), request_id)
    span(otlp_wire.head(name, kind), remote, (shared, prefix, size, own), otlp_wire.last(error, remote))
    for step in steps:
        span(otlp_wire.head(step, INTERNAL), True, (), otlp_wire.LOCAL)
    if wait:
        span(otlp_wire.head(name, CLIENT), True, (shared, prefix, size, _PIPE), otlp_wire.LOCAL)
    formats[-1] = f"{len(parts[-1] or b'')}s"
    return compiled(struct.Struct("<" + "".join(formats)).pack, parts, remote, len(steps), wait)


def compiled(pack: Callable[..., bytes], parts: list[bytes | None], remote: bool, steps: int, wait: bool) -> Packer:
    """A layout's packer: one function calling its struct's `pack` with the constants (`parts`) and, at their
    places (None), the values in the order `layout` writes them, each read straight from the arguments (no list
    of values built, copied and spread per request: about 0.6 us less a request). Its source names only the
    arguments, `pack` and the constants (c0, c2, ...) and slices by integers: nothing of a request's data."""
    values = ["t", "own", *(["parent"] if remote else []), "start", "end", "rid", "attrs"]
    for n in range(steps):
        values += ["t", f"drawn[{8 * n}:{8 * n + 8}]", "own", f"b{n}", f"e{n}"]
    if wait:
        values += ["t", "wait[0][-8:]", "own", "wait[1]", "end", "rid"]  # (an id of 24: the trace's, then the wait's)
    taken = iter(values)
    constants = {f"c{at}": part for at, part in enumerate(parts) if part is not None}
    args = [f"c{at}" if part is not None else next(taken) for at, part in enumerate(parts)]
    unpacked = f"        {''.join(f'(_, b{n}, e{n}), ' for n in range(steps))}= steps\n" if steps else ""
    source = (
        f"def make(pack, {', '.join(constants)}):\n"
        "    def packed(t, own, parent, start, end, rid, attrs, drawn, steps, wait):\n"
        f"{unpacked}        return pack({', '.join(args)})\n"
        "    return packed\n"
    )
    namespace: dict[str, Any] = {}
    exec(source, namespace)  # generated above from names and integers only
    packer: Packer = namespace["make"](pack, **constants)
    return packer


def error_of(trace: Trace) -> bool:
    if trace.kind == SERVER:
        return trace.code is not None or trace.tool_error or trace.status >= 500
    return not 0 < trace.status < 400


def spans_into(trace: Trace, out: list[bytes]) -> None:
    """Every span of an ended, sampled request, span by span (any request: a tracestate, a forward)."""
    name, shared, request_id = shape(trace)
    common = shared if request_id is None else shared + id_prefix(len(request_id)) + request_id
    drawn = IDS.take(8 * (len(trace.steps) + 1))  # as encode_into draws them
    own = trace.span_id or drawn[-8:]
    parent, state = trace.parent, trace.state
    lead = otlp_wire.lead(trace.trace_id[:16])  # (24 bytes from to_child: the trace id, then the wait's span id)
    after = otlp_wire.after_id(state, parent.span_id if parent is not None else b"")
    attributes = common + own_attributes(trace)
    last = otlp_wire.last(error_of(trace), parent is not None)
    span = otlp_wire.span_into
    span(out, lead, own, after, otlp_wire.head(name, trace.kind), trace.start, trace.end_at, attributes, last)
    steps, end = trace.steps, trace.end_at
    after = otlp_wire.after_id(state, own)  # the children's
    for n, (step, began, ended) in enumerate(steps):
        span(out, lead, drawn[8 * n : 8 * n + 8], after, otlp_wire.head(step, INTERNAL), began, ended, b"")
    if trace.wait is not None:
        span_id, began = trace.wait
        span(out, lead, span_id[-8:], after, otlp_wire.head(name, CLIENT), began, end, common + _PIPE)
    if trace.forward is not None:
        span_id, began, owner = trace.forward
        instance = otlp_wire.attributes({"mcpgate.instance": owner})
        span(out, lead, span_id, after, otlp_wire.head("mcpgate.forward", CLIENT), began, end, instance)


def shape(trace: Trace) -> tuple[str, bytes, bytes | None]:
    """The request's span name, the attributes its span and the wait's share (described once per method, tool
    and version) and the value of their request id attribute (None: no request)."""
    what = trace.what
    if isinstance(what, str):
        return what or trace.http_method, b"", None
    method, target, version, request_id = what
    key = (method, target, version)
    try:
        found = _shapes.get(key)
    except TypeError:  # a name or version that is no string (unhashable)
        found = None
    if found is None:
        name, described = named(method, target, version)
        found = name, otlp_wire.attributes(described)
        if all(isinstance(part, str | None) for part in key):
            otlp_wire.keep(_shapes, key, found)
    return found[0], found[1], str(request_id).encode()


def id_prefix(size: int) -> bytes:
    """The jsonrpc.request.id attribute's bytes before a value of `size` bytes (a KeyValue ends with its string
    value): a layout's constant, so a request's id goes in as its bytes."""
    found = _prefixes.get(size)
    if found is None:
        whole = otlp_wire.key_value(9, "jsonrpc.request.id", "x" * size)
        found = whole[: len(whole) - size]
        otlp_wire.keep(_prefixes, size, found)
    return found


def own_attributes(trace: Trace) -> bytes:
    """The request's own span's attributes beyond the shared ones: transport, server, session, status, error."""
    key = (trace.kind, trace.server, trace.session, trace.status, trace.code, trace.tool_error)
    found = _owns.get(key)
    if found is not None:
        return found
    extra: dict[str, Any] = {"network.transport": "tcp"}
    if trace.kind == SERVER:
        extra["network.protocol.name"] = "http"
        if trace.server:
            extra["mcpgate.server"] = trace.server
        if isinstance(trace.session, str) and trace.session:
            extra["mcp.session.id"] = session_ids.short(trace.session)
    if trace.status:
        extra["http.response.status_code"] = trace.status
    if trace.code is not None:
        extra["error.type"] = extra["rpc.response.status_code"] = str(trace.code)
    elif trace.tool_error:
        extra["error.type"] = "tool_error"  # OpenTelemetry's MCP conventions
    found = otlp_wire.attributes(extra)
    otlp_wire.keep(_owns, key, found)
    return found


def named(method: str, target: Any, version: Any) -> tuple[str, dict[str, Any]]:
    """The span name and attributes of a request of `method` naming `target` (a tool, a prompt), `version`."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    if method not in ("tools/call", "prompts/get") or not isinstance(target, str) or len(target) > 128:
        target = None
    if method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target:
            attributes["gen_ai.tool.name"] = target
    elif target:
        attributes["gen_ai.prompt.name"] = target
    if isinstance(version, str) and len(version) <= 32:
        attributes["mcp.protocol.version"] = version
    return (f"{method} {target}" if target else method), attributes
