"""W3C Trace Context without the SDK (stdlib only): a `traceparent` read into a Parent, a context written back as
its fields, span and trace ids drawn from one os.urandom per IDS_DRAWN bytes, and the fields put into a
request's `params._meta` (in its raw bytes when that is safe, so the child gets the client's bytes plus the
context and nothing is encoded again).

The parsing follows the SDK's TraceContextTextMapPropagator: version "ff" and all-zero ids are invalid, a
version-00 header has exactly four fields, a later version may carry more (ignored). A tracestate is passed on
as it came when it is at most 512 printable ASCII characters (no CR or LF can reach a header), else dropped.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, NamedTuple

TRACE_KEYS = ("traceparent", "tracestate")  # in HTTP headers and in _meta alike
IDS_DRAWN = 4096  # random bytes drawn at once for ids
_TRACEPARENT = re.compile(r"[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?[ \t]*\Z")
_TRACESTATE = re.compile(r"[ -~]{1,512}\Z")
_HEX_CONTEXT = re.compile(r"[0-9a-f-]{55}\Z")  # a version-00 traceparent: its JSON string is its bytes
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
_PARAMS = re.compile(rb'"params"[ \t\r\n]*:[ \t\r\n]*\{()[ \t\r\n]*(\}?)')  # group 1: inside the object
_BLANK_OR_END = frozenset(b" \t\r\n}")  # after `"params":{`, what leaves the splice to _PARAMS


class Parent(NamedTuple):
    """A remote parent's context: trace id (16 bytes), span id (8), sampled flag, tracestate ("" for none)."""

    trace_id: bytes
    span_id: bytes
    sampled: bool
    state: str


def parent_of(carrier: Any) -> Parent | None:
    """The W3C context in a carrier (HTTP headers' or _meta's fields); None when it carries no valid one."""
    if not isinstance(carrier, dict):
        return None
    return parsed(carrier.get("traceparent"), carrier.get("tracestate"))


def parsed(header: Any, state: Any) -> Parent | None:
    """The W3C context of a traceparent and a tracestate (each as a header or _meta carries it); None when the
    traceparent is no valid one."""
    if not isinstance(header, str) or len(header) > 512:
        return None
    found = _TRACEPARENT.match(header)
    if found is None:
        return None
    version, trace_hex, span_hex, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest) or trace_hex == _ZERO_TRACE or span_hex == _ZERO_SPAN:
        return None
    state = state.strip() if isinstance(state, str) and _TRACESTATE.match(state) else ""
    return Parent(bytes.fromhex(trace_hex), bytes.fromhex(span_hex), bool(int(flags, 16) & 1), state)


def traceparent(trace_id: bytes, span_id: bytes, sampled: bool) -> str:
    return f"00-{trace_id.hex()}-{span_id.hex()}-{'01' if sampled else '00'}"


class Ids:
    """Random ids, sliced from one os.urandom draw (never all zero). `clean`: where the draw's part that holds no 8
    zero bytes in a row ends (the whole draw, as good as always), before which no id of 8 bytes or more can be all
    zero: tracing.to_child slices a trace id and a span id there (as one 24-byte value) without looking at them."""

    __slots__ = ("at", "clean", "drawn")

    def __init__(self) -> None:
        self.drawn, self.at, self.clean = b"", 0, 0

    def take(self, size: int) -> bytes:
        at, end = self.at, self.at + size
        if end > len(self.drawn):
            self.drawn, at, end = os.urandom(IDS_DRAWN), 0, size
            run = self.drawn.find(bytes(8))
            self.clean = IDS_DRAWN if run < 0 else run
        self.at = end
        taken = self.drawn[at:end]
        return taken if taken.count(0) < size else taken[:-1] + b"\x01"

    def context(self) -> bytes:
        """A trace id and a span id at once (16 + 8 bytes, as take(16) and take(8) would give them), neither all
        zero."""
        at, end = self.at, self.at + 24
        if end <= len(self.drawn):  # (take's work, in one call)
            self.at = end
            taken = self.drawn[at:end]
        else:
            taken = self.take(24)
        return taken if taken.count(0) < 8 else self.take(16) + self.take(8)  # fewer than 8 zeros: neither is


def put_in_meta(message: Any, fields: dict[str, str]) -> None:
    """`fields` (traceparent, tracestate) into a request's params._meta, in place (params a dict or absent); its
    raw bytes spliced when that is safe, else dropped (the message is encoded again when sent)."""
    params = message.params
    if params is None:
        params = message.params = message.obj["params"] = {}
    meta = params.get("_meta")
    raw = message.raw
    if isinstance(meta, dict):
        old = meta.get("traceparent")
        params["_meta"] = {**{k: v for k, v in meta.items() if k not in TRACE_KEYS}, **fields}
        if raw is not None and "tracestate" not in meta and "tracestate" not in fields and isinstance(old, str):
            message.raw = replaced_context(raw, old, fields["traceparent"])
        else:
            message.raw = None
        return
    spliced = raw is not None and "_meta" not in params  # an "_meta": null is there: a second one would not count
    params["_meta"] = fields
    message.raw = spliced_meta(raw, fields) if spliced else None


def replaced_context(raw: bytes, old: str, new: str) -> bytes | None:
    """`raw` with its one traceparent string `old` replaced by `new` (None when that is not certain)."""
    if not _HEX_CONTEXT.match(old) or b"\\u" in raw:
        return None
    before = old.encode()
    return raw.replace(before, new.encode()) if raw.count(before) == 1 else None


def spliced_meta(raw: bytes, fields: dict[str, str]) -> bytes | None:
    """`raw` with `"_meta": fields` first in its params object (None when the params object cannot be found for
    certain): spliced_member's splice."""
    if "tracestate" not in fields:
        return spliced_member(raw, b'"_meta":{"traceparent":"' + fields["traceparent"].encode() + b'"}')
    state = json.dumps(fields["tracestate"]).encode()
    return spliced_member(
        raw, b'"_meta":{"traceparent":"%s","tracestate":%s}' % (fields["traceparent"].encode(), state)
    )


def spliced_member(raw: bytes, member: bytes) -> bytes | None:
    """`raw` with `member` (`"_meta":{...}`) first in its params object (None when the params object cannot be found
    for certain). With no \\u escape in the bytes, the top-level key is spelled `"params"`, so one occurrence is it.
    (bytes.find, not `in`: a bytes `in` tries its operand as an integer first, which costs more than the search;
    a slice compared, not startswith at an offset, whose arguments are parsed the slow way.)"""
    at = raw.find(b'"params"')
    if at < 0 or raw.find(b'"params"', at + 8) >= 0 or raw.find(b"\\u") >= 0:
        return None
    cut = at + 10 if raw[at + 8 : at + 10] == b":{" else at + 11 if raw[at + 8 : at + 11] == b": {" else 0
    if cut and cut < len(raw) and raw[cut] not in _BLANK_OR_END:
        comma = b","  # compact JSON, as SDKs send it, or Python's json.dumps: the object's first key follows
    else:
        found = _PARAMS.search(raw)
        if found is None:
            return None
        cut, comma = found.start(1), b"" if found.group(2) else b","
    return b"".join((raw[:cut], member, comma, raw[cut:]))
