"""The OTLP protobuf encoding of mcpgate's span records (stdlib only): an `ExportTraceServiceRequest` written by
hand, one resource and one scope per batch.

The SDK's encoder builds a message object per span, per attribute and per value, then serializes them: about
90 us a span on a loaded machine. The attributes of a gateway's spans repeat (the method, the tool, the server,
the status), so each (key, value) pair is encoded once and its bytes kept (at most CACHED pairs); a span is then
a few concatenations. Field numbers are opentelemetry-proto's (trace/v1/trace.proto, common/v1/common.proto).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

CACHED = 4096  # encoded attribute pairs kept
ERROR = 2  # Status.code STATUS_CODE_ERROR
HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # Span.flags: whether the parent is remote is known, and it is

_FIXED64 = struct.Struct("<Q")
_pairs: dict[tuple[str, Any], bytes] = {}


class Record(Protocol):
    """What the encoder reads of a span."""

    trace_id: int
    span_id: int
    parent_id: int
    remote_parent: bool
    state: str
    name: str
    kind: int
    start: int
    end: int
    attributes: Mapping[str, Any]
    error: bool


def varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


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
    if number == 9 and len(_pairs) < CACHED:
        _pairs[pair] = encoded
    return encoded


def span(record: Record) -> bytes:
    """A Span message's bytes."""
    parts = [
        b"\x0a\x10",
        record.trace_id.to_bytes(16, "big"),
        b"\x12\x08",
        record.span_id.to_bytes(8, "big"),
    ]
    if record.state:
        parts.append(field(3, record.state.encode()))
    if record.parent_id:
        parts += (b"\x22\x08", record.parent_id.to_bytes(8, "big"))
    parts += (field(5, record.name.encode()), b"\x30", bytes((record.kind,)))
    parts += (b"\x39", _FIXED64.pack(record.start), b"\x41", _FIXED64.pack(record.end))
    parts += [key_value(9, key, value) for key, value in record.attributes.items()]
    if record.error:
        parts.append(b"\x7a\x02\x18\x02")  # status { code: ERROR }
    flags = 1 | HAS_IS_REMOTE | (IS_REMOTE if record.remote_parent else 0)
    parts += (b"\x85\x01", flags.to_bytes(4, "little"))
    return field(2, b"".join(parts))


def resource_head(resource: Mapping[str, Any], scope: str, version: str) -> tuple[bytes, bytes]:
    """A batch's fixed parts: the resource field, and the scope field (name, version)."""
    attributes = b"".join(key_value(1, key, value) for key, value in resource.items())
    return field(1, attributes), field(1, field(1, scope.encode()) + field(2, version.encode()))


def request(head: tuple[bytes, bytes], records: Iterable[Record]) -> bytes:
    """The ExportTraceServiceRequest of `records`, under the resource and scope of `head`."""
    resource, scope = head
    spans = b"".join([span(record) for record in records])
    return field(1, resource + field(2, scope + spans))
