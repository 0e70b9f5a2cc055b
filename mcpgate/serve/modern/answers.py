"""A pooled child's answer to a call, as the call's client gets it.

    Answers(label, ttl_ms, sealed).of(call, response, server_info) -> bytes     the client's JSON-RPC message

The client's id replaces the minted one. A result gets what a 2026-07-28 result must or should carry
(core/modern_rewrites.stamp_result: resultType, a cacheable method's ttlMs and cacheScope, the child's serverInfo); a
tools/list result loses the tools its filter hides; an input_required result, or one naming a task, goes to
`sealed` first, which seals its requestState or task id for the call's principal (None: it cannot be passed on,
and the client gets a 502-like internal error instead). An error answer keeps its error, and its code is noted on
the call (call.error_code). A plain result, neither of those, is spliced: its bytes are passed on with the
stamp's members appended, without decoding or encoding it again (a large one was classified from its head and
never decoded), unless it has a member the stamp could add (a decoded result's own members are read; a large one's
bytes are searched for the names, anywhere) or holds a CR (an SSE line would end there). A large
one's end is found by walking it (core/json_extent: its strings skipped by bytes.find), not taken to be the
message's last brace but one: an answer with a member after its result, or one whose walk past its bound is
unknown, is decoded whole and made again. A decoded answer's result is taken up to the last brace but one only
once that span is one JSON value (json_extent.sole_value): a child repeating "id" or "result" after its result
(which the decoding hides, keeping the last) gets its answer made again from the decoding, the minted id never
passed on.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from mcpgate.core import json_extent, jsonrpc, modern_rewrites, mrtr, tasks
from mcpgate.core.jsonrpc import Response
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.fast_json import msgspec  # loaded its way: fast_json says how
from mcpgate.serve.modern.calls import Call

log = logging.getLogger("mcpgate.pool")

# The members stamp_result may add to a result (a result naming any of them is decoded and stamped instead).
_NAMES = (b"resultType", b"_meta", b"ttlMs", b"cacheScope")
_STAMPED = re.compile(b'"(?:' + b"|".join(_NAMES) + b')"')
_QUOTED = tuple(b'"' + name + b'"' for name in _NAMES)
_LONGEST = max(len(name) for name in _QUOTED)
# A result this large is walked from quote to quote (bytes.find: a memchr each) before the pattern, which steps
# through every byte (~1 ms on a 4 MiB text); past this many quotes the pattern searches the rest.
_WALK_FROM, _WALK_QUOTES = 64 * 1024, 64
_VIEW_FROM = 4096  # a result this large is passed on through a memoryview (copied once, into the answer)
# The head of a child's answer to a minted id as the SDKs write it (compact): its result is found without the pattern.
_MINTED_HEAD = b'{"jsonrpc":"2.0","id":"%s","result":{'
_EMPTY = re.compile(rb"\{[ \t\r\n]*\}")  # a result object with no member (matching stops at the first one)
_EMPTY_NEXT = frozenset(b" \t\r\n}")  # what follows the "{" of a result with no member (else no match is tried)
_TAIL = re.compile(rb"[ \t\n\r]*\}[ \t\n\r]*")  # what follows the result of an answer that ends with it
# A large result's walk takes at most one step for this many bytes of its answer (and never fewer than the
# minimum): a step costs about a microsecond, decoding an answer of dense small tokens 15-20 ns a
# byte, so a walk given up at its bound wasted a fifth of what the decoding costs at most.
_BYTES_A_STEP, _STEPS_AT_LEAST = 256, 1024
_FAST_TEXT = msgspec.json.Encoder().encode  # a text id, encoded as json's encoder writes it
NOT_JSON = "Bad Gateway: the MCP server's answer could not be read as JSON (not JSON, or nested too deep)"
UNCARRIED = "Bad Gateway: the MCP server's requestState or task id cannot be passed on (not a string, or too long)"


class Answers:
    """One child's answers rewritten for their clients (see the module docstring). `sealed(call, result)` is the
    pool's: the result with its requestState or task id sealed, or None."""

    def __init__(
        self, label: str, ttl_ms: int, sealed: Callable[[Call, dict[str, Any]], dict[str, Any] | None]
    ) -> None:
        self.label, self.ttl_ms, self.sealed = label, ttl_ms, sealed
        self._stamps: dict[bool, bytes] = {}  # the stamp's members, encoded, for (not) cacheable results

    def of(self, call: Call, message: Response, server_info: dict[str, Any] | None) -> bytes:
        """What the call's client gets for the child's answer `message`: a plain result spliced, in this frame (the
        usual answer: a Python call less), else made again by _made. A result is spliced, without decoding or
        encoding it again, as its bytes with the client's id and the stamp's members appended; it is made again when
        the answer is an error or a task method's (it names the task), a tools/list result the call's filter may
        hide tools of, a result with a member the stamp could add (the stamp never duplicates one: a decoded
        result's own members are read, so an escaped name counts and a nested one or a value does not; a result
        read by its head alone, or a large one, is searched for the names as bytes, anywhere), one holding a CR (an
        SSE line would end there; a line LineDecoder.bare vouched for, still the message's raw, is not searched), or
        the message is not laid out as {"jsonrpc", "id", "result"} (a decoded one with another member, wherever it
        is, included; an answer read by its head alone, past PARTIAL_FROM_BYTES, must end with its result:
        partial_bounds; a decoded one whose result is not the one value up to its end, as when a member is
        repeated after it, which the decoding does not show: json_extent.sole_value)."""
        # (Response.is_error read without its property: a Python call less; a task method's answer names the task)
        raw = message.raw
        if (
            raw is None
            or "error" in message.obj
            or call.method in tasks.METHODS
            or (call.tools is not None and call.tools.may_hide(raw))
        ):
            return self._made(call, message, server_info)
        if len(message.obj) != 3 and not message.partial:  # a member besides the three: made again
            return self._made(call, message, server_info)
        quoteless: list[tuple[int, int]] | None = None  # a partial result's long strings that hold no quote
        if message.partial:
            quoteless = []
            bounds = partial_bounds(raw, call.minted, quoteless)
            if bounds is UNKNOWN:  # the walk gave up: the decoding says whether the result is the last member
                bounds = jsonrpc.result_bounds(raw) if _decoded(message) else None
                quoteless = None
        else:  # minted_bounds(raw, call.minted) or jsonrpc.result_bounds(raw), the first without a call
            head = _MINTED_HEAD % call.minted.encode()
            bounds = (len(head) - 1, len(raw) - 1) if raw.startswith(head) and raw.endswith(b"}}") else None
            if bounds is None:
                bounds = jsonrpc.result_bounds(raw)
        if bounds is None:
            return self._made(call, message, server_info)
        start, end = bounds  # the result searched in place: a large one is copied once, into the answer
        if raw is not message.bare and raw.find(b"\r", start, end) >= 0:  # bytes the splitter vouched for: no CR
            return self._made(call, message, server_info)
        if quoteless is not None:
            if names_stamped_around(raw, start, end, quoteless):
                return self._made(call, message, server_info)
        elif end - start < _WALK_FROM:  # a small result, decoded: its own members read (no byte search)
            result = message.obj.get("result")
            if (
                type(result) is not dict
                or "resultType" in result
                or "_meta" in result
                or "ttlMs" in result
                or "cacheScope" in result
            ):
                return self._made(call, message, server_info)
        elif names_stamped(raw, start, end):
            return self._made(call, message, server_info)
        # bounds taken to the last brace but one (a decoded answer's, not walked): one value there, else a member was
        # repeated after the result (which the decoding hides); asked last, of an answer about to be spliced only
        if quoteless is None and not json_extent.sole_value(raw, start, end):
            return self._made(call, message, server_info)
        cacheable = call.method in modern_rewrites.CACHEABLE
        members = self._stamps.get(cacheable)
        if members is None:  # the same for every result of its kind from this child: encoded once
            stamp = modern_rewrites.stamp_result(call.method, {}, ttl_ms=self.ttl_ms, server_info=server_info)
            members = self._stamps[cacheable] = jsonrpc.encode(stamp)[1:-1]
        client_id = call.client_id
        if isinstance(client_id, int):
            encoded_id = str(client_id).encode()
        else:  # a text id: msgspec writes every code point as json's encoder does (a lone surrogate it refuses)
            try:
                encoded_id = _FAST_TEXT(client_id)
            except ValueError:
                encoded_id = jsonrpc.encode(client_id)  # json's ASCII escapes
        if raw[start + 1] in _EMPTY_NEXT and _EMPTY.fullmatch(raw, start, end):  # no member of its own
            return b"".join((b'{"jsonrpc":"2.0","id":', encoded_id, b',"result":{', members, b"}}"))
        # its bytes copied once, into the answer (a small result's slice costs less than a view's)
        result = raw[start : end - 1] if end - start < _VIEW_FROM else memoryview(raw)[start : end - 1]
        return b"".join((b'{"jsonrpc":"2.0","id":', encoded_id, b',"result":', result, b",", members, b"}}"))

    def _made(self, call: Call, message: Response, server_info: dict[str, Any] | None) -> bytes:
        """The answer decoded and made again (the way of every answer `of` does not splice)."""
        try:
            obj = message.full()
        except (ValueError, RecursionError):  # read by its head alone, and no JSON (or too deep) after all
            log.warning(
                "pooled child %s: an answer of %d bytes could not be read as JSON", self.label, len(message.raw or b"")
            )
            obj = jsonrpc.error_response(call.client_id, jsonrpc.INTERNAL_ERROR, NOT_JSON)
        result = obj.get("result")
        if isinstance(result, dict) and (mrtr.is_input_required(result) or tasks.names_task(call.method, result)):
            result = self.sealed(call, result)  # its requestState or task id sealed for the principal
            if result is None:
                obj = jsonrpc.error_response(call.client_id, jsonrpc.INTERNAL_ERROR, UNCARRIED)
        if isinstance(result, dict):
            if call.tools is not None and not mrtr.is_input_required(result):
                result = self._without_hidden_tools(call.tools, result)
            result = modern_rewrites.stamp_result(call.method, result, ttl_ms=self.ttl_ms, server_info=server_info)
            obj = {"jsonrpc": "2.0", "id": call.client_id, "result": result}
        else:
            error = obj.get("error")
            call.error_code = (
                error.get("code") if isinstance(error, dict) and isinstance(error.get("code"), int) else None
            )
            obj = {**obj, "id": call.client_id}
        return jsonrpc.encode(obj)

    def _without_hidden_tools(self, tools: ToolFilter, result: dict[str, Any]) -> dict[str, Any]:
        shown = tools.result(result)
        if shown is None:
            log.warning("pooled child %s: a tools/list result could not be read; passed unchanged", self.label)
        return result if shown is None else shown


UNKNOWN = (-1, -1)  # partial_bounds: the walk did not reach the result's end


def _decoded(message: Response) -> bool:
    """Decode an answer read by its head alone, keeping what it holds on the message (decoded once, whatever reads
    it next); True when it holds the three members jsonrpc, id and result only, as its head named them in order (so
    its result is its last member, but for a key given twice, as with a small answer: sole_value tells).
    False for any other member, and for no JSON."""
    try:
        obj = message.full()
    except (ValueError, RecursionError):  # Answers.of decodes it again and answers with an error
        return False
    message.obj, message.partial = obj, False
    return len(obj) == 3


def partial_bounds(raw: bytes, minted: str, quoteless: list[tuple[int, int]] | None = None) -> tuple[int, int] | None:
    """The result's place in an answer read by its head alone (jsonrpc.parse_line's partial Response, whose head
    {"jsonrpc", "id", "result": matched): from its "{" to the end of the object it opens, found by json_extent's
    walk, when only the message's closing brace follows it. None when another member follows (`"result":{...},
    "_x":{}}`) or the result is no object (the caller decodes the answer whole); UNKNOWN when the walk stopped at
    its bound (or at bytes that are no JSON) before the result's end (the caller decodes it: _decoded). The minted
    head, as the SDKs write it, is recognised without the pattern. `quoteless` gets the walk's long strings that
    hold no quote (json_extent.value_end), for names_stamped_around."""
    head = _MINTED_HEAD % minted.encode()
    if raw.startswith(head):
        start = len(head) - 1
    else:
        bounds = jsonrpc.result_bounds(raw)  # its start is where the head ends; None: no object there, or
        if bounds is None:  # the bytes before the last brace are no "}" (then something follows it)
            return None
        start = bounds[0]
    end = json_extent.value_end(raw, start, max(_STEPS_AT_LEAST, len(raw) // _BYTES_A_STEP), quoteless)
    if end is None:
        return UNKNOWN
    return (start, end) if _TAIL.fullmatch(raw, end) is not None else None


def minted_bounds(raw: bytes, minted: str) -> tuple[int, int] | None:
    """jsonrpc.result_bounds(raw) for an answer laid out as the SDKs write it, {"jsonrpc":"2.0","id":"<minted>",
    "result":{...}} without whitespace, read without the pattern; None for any other layout (result_bounds reads
    it). `minted` is a minted id (calls.mint): ASCII without a quote, a backslash or a control character, so the id
    the pattern would read is exactly its bytes. For a decoded answer of these three members only: the result is
    taken to end at the message's last brace but one (an answer read by its head alone has partial_bounds), which
    Answers.of checks with json_extent.sole_value."""
    head = _MINTED_HEAD % minted.encode()
    if raw.startswith(head) and raw.endswith(b"}}"):  # the result's brace and the message's, after the head's "{"
        return len(head) - 1, len(raw) - 1
    return None


def names_stamped(raw: bytes, start: int, end: int) -> bool:
    """Whether raw[start:end] names a member the stamp could add ("resultType", "_meta", ... anywhere), as _STAMPED
    finds it. A large result, most often a long text with few quotes, is walked from quote to quote first."""
    if end - start < _WALK_FROM:
        return _STAMPED.search(raw, start, end) is not None
    find, names = raw.find, _QUOTED
    at = find(b'"', start, end)
    for _ in range(_WALK_QUOTES):
        if at < 0:
            return False
        if raw.startswith(names, at, end):
            return True
        at = find(b'"', at + 1, end)
    return at >= 0 and _STAMPED.search(raw, at, end) is not None


def names_stamped_around(raw: bytes, start: int, end: int, quoteless: list[tuple[int, int]]) -> bool:
    """names_stamped(raw, start, end) without searching again the insides of strings known to hold no quote
    (`quoteless`: json_extent's (a, b) spans, in order, within start and end), which the walk that found the
    result's end has just read: a name starts with a quote, so none starts inside one, and one starting before it
    is searched to its end."""
    at = start
    for inside, after in quoteless:
        if names_stamped(raw, at, min(inside + _LONGEST, after)):
            return True
        at = after
    return names_stamped(raw, at, end)
