"""The OTLP protobuf encoding of mcpgate's span records (stdlib only): an `ExportTraceServiceRequest` written by
hand, one resource and one scope per batch.

The SDK's encoder builds a message object per span, per attribute and per value, then serializes them: about
90 us a span on a loaded machine. The attributes of a gateway's spans repeat (the method, the tool, the server,
the status), so each (key, value) pair is encoded once and its bytes kept (at most CACHED pairs, the cache emptied
when full: a long-lived worker's sessions, each naming its own, never leave new ones uncached); a span is then
a few concatenations. Field numbers are opentelemetry-proto's (trace/v1/trace.proto, common/v1/common.proto).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

CACHED = 4096  # encoded attribute pairs kept (and as many of each other cache of the export)
ERROR = 2  # Status.code STATUS_CODE_ERROR
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # Span.flags: whether the parent is remote is known, and it is

_TIMES = struct.Struct("<BQBQ")  # start_time_unix_nano (field 7) and end_time_unix_nano (8), fixed64 each
_pairs: dict[tuple[str, Any], bytes] = {}
_heads: dict[tuple[str, int], bytes] = {}  # a span's name and kind fields
LOCAL = b"\x85\x01" + (1 | HAS_IS_REMOTE).to_bytes(4, "little")  # Span.flags: sampled, parent known local
_REMOTE = b"\x85\x01" + (1 | HAS_IS_REMOTE | IS_REMOTE).to_bytes(4, "little")
_ERROR = b"\x7a\x02\x18\x02"  # status { code: ERROR }
UNCACHED = frozenset({"jsonrpc.request.id"})  # a value per request: never worth a cache entry
_SHORT = 1 << 14  # varints below it are looked up


def varint(value: int) -> bytes:
    return _VARINTS[value] if value < _SHORT else _varint(value)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_VARINTS = [_varint(value) for value in range(_SHORT)]
_RESOURCE_SPANS, _SCOPE_SPANS = b"\x0a", b"\x12"  # the tags of fields 1 and 2, length-delimited


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, bytes, a message)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def any_value(value: Any) -> bytes:
    """An AnyValue: a string, bool, int or float (anything else as its str)."""
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    return field(1, str(value).encode())


def key_value(number: int, key: str, value: Any) -> bytes:
    """A KeyValue as field `number` of its message, its bytes cached."""
    pair = (key, value)
    try:
        return _pairs[pair]
    except KeyError:
        pass
    except TypeError:  # an unhashable value
        return field(number, field(1, key.encode()) + field(2, any_value(value)))
    encoded = field(number, field(1, key.encode()) + field(2, any_value(value)))
    if number == 9 and key not in UNCACHED:
        keep(_pairs, pair, encoded)
    return encoded


def keep(cache: dict[Any, Any], key: Any, value: Any, bound: int = CACHED) -> None:
    """`value` cached under `key`; a full cache emptied first (what is in use comes back at its next miss)."""
    if len(cache) >= bound:
        cache.clear()
    cache[key] = value


def span(
    trace_id: bytes,
    span_id: bytes,
    parent_id: bytes,
    state: str,
    name: str,
    kind: int,
    start: int,
    end: int,
    attributes: bytes,
    error: bool,
    remote_parent: bool,
) -> bytes:
    """A Span message's bytes (`attributes`: its KeyValue fields, encoded by `key_value(9, ...)`)."""
    out: list[bytes] = []
    after = after_id(state, parent_id)
    span_into(out, lead(trace_id), span_id, after, head(name, kind), start, end, attributes, last(error, remote_parent))
    return b"".join(out)


def lead(trace_id: bytes) -> bytes:
    """What each span of a trace starts with: its trace id, and the span id's tag."""
    return b"\x0a\x10" + trace_id + b"\x12\x08"


def after_id(state: str, parent_id: bytes) -> bytes:
    """What follows a span's id: the trace's tracestate, the parent's id."""
    return (field(3, state.encode()) if state else b"") + (b"\x22\x08" + parent_id if parent_id else b"")


def head(name: str, kind: int) -> bytes:
    """A span's name and kind fields (cached)."""
    found = _heads.get((name, kind))
    if found is None:
        found = field(5, name.encode()) + b"\x30" + bytes((kind,))
        keep(_heads, (name, kind), found)
    return found


def span_into(
    out: list[bytes],
    lead: bytes,
    span_id: bytes,
    after: bytes,
    head: bytes,
    start: int,
    end: int,
    attributes: bytes,
    last: bytes = LOCAL,
) -> None:
    """A Span's parts appended to `out` (joined once a batch); `lead`, `after`, `head` and `last` as written by the
    functions of those names (`last`: an unset status and a local parent by default)."""
    size = len(lead) + 8 + len(after) + len(head) + 18 + len(attributes) + len(last)
    out += (b"\x12", _VARINTS[size] if size < _SHORT else _varint(size), lead, span_id, after, head)
    out += (_TIMES.pack(0x39, start, 0x41, end), attributes, last)


def last(error: bool, remote_parent: bool) -> bytes:
    """A span's status (an error's) and flags (sampled; its parent remote or local)."""
    return (_ERROR if error else b"") + (_REMOTE if remote_parent else LOCAL)


def attributes(pairs: Mapping[str, Any]) -> bytes:
    """A span's attributes as its KeyValue fields."""
    return b"".join([key_value(9, key, value) for key, value in pairs.items()])


def resource_head(resource: Mapping[str, Any], scope: str, version: str) -> tuple[bytes, bytes]:
    """A batch's fixed parts: the resource field, and the scope field (name, version)."""
    attributes = b"".join(key_value(1, key, value) for key, value in resource.items())
    return field(1, attributes), field(1, field(1, scope.encode()) + field(2, version.encode()))


def request(head: tuple[bytes, bytes], spans: Iterable[bytes]) -> bytes:
    """The ExportTraceServiceRequest of encoded `spans` (`span`'s), under the resource and scope of `head`: one
    join (the nested messages' lengths added up), not a copy of the batch's bytes per enclosing message."""
    resource, scope = head
    parts = spans if isinstance(spans, list) else list(spans)
    inner = len(scope) + sum(map(len, parts))  # ScopeSpans: the scope, then the spans
    inner_head = _SCOPE_SPANS + varint(inner)
    outer = len(resource) + len(inner_head) + inner  # ResourceSpans: the resource, then its ScopeSpans
    return b"".join([_RESOURCE_SPANS, varint(outer), resource, inner_head, scope, *parts])
