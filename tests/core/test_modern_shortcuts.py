"""The shortcuts of core/modern.py and core/modern_rewrites.py each give what the full path gives: a child's
request put together from a head made once per method (child_request) is the bytes jsonrpc.encode makes of the
whole message, a remembered header text (header_text) is decode_header_value's, and legacy_params keeps its
results for every kind of params."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, modern_rewrites, wire
from mcpgate.core.header_values import decode_header_value

MINTED = ["mcpgate-1", "mcpgate-42", "mcpgate-p7", "mcpgate-1234567890123"]
METHODS = [*sorted(modern.MODERN_METHODS), "initialize", "ping", "notifications/x", 'x\u00e9/"quoted"', ""]
PARAMS: list[dict[str, Any] | None] = [
    None,
    {},
    {"name": "echo", "arguments": {"message": "hello"}},
    {"name": "echo", "arguments": {"message": "caf\u00e9 \u2603 \U0001f600", "n": 1.5, "b": [True, None]}},
    {"name": "e", "arguments": {"text": 'a\nb\r"c"\\d\u2028\x00'}},
    {"name": "lone", "arguments": {"s": "\ud800 a lone surrogate"}},  # encode falls back to ASCII escapes
    {"uri": "file:///a b", "_meta": {"progressToken": "p-1", "x": {"y": []}}},
    {"name": "n", "requestState": "s" * 300, "inputResponses": {"a": {"action": "accept"}}},
    {"taskId": "t-1"},
    {"nested": {"deep": [[[{"k": "v"}]]]}, "big": 2**70, "neg": -0.0},
]


def full(minted: str, method: str, params: dict[str, Any] | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": minted, "method": method}
    if params is not None:
        message["params"] = params
    return jsonrpc.encode(message)


@pytest.mark.parametrize(("minted", "method", "params"), list(itertools.product(MINTED, METHODS, PARAMS)))
def test_child_request_is_the_full_encoding(minted: str, method: str, params: dict[str, Any] | None) -> None:
    assert modern_rewrites.child_request(minted, method, params) == full(minted, method, params)


HEADER_VALUES = [
    "echo",
    " echo ",
    "\techo",
    "caf\u00e9",  # not visible ASCII: invalid
    "a\x7fb",
    "a\x00b",
    "",
    " ",
    "=?base64?ZWNobw==?=",  # "echo"
    "=?base64?Y2Fmw6k=?=",  # "café"
    "=?base64?ZWNobw?=",  # unpadded: invalid
    "=?base64?/w==?=",  # not UTF-8: invalid
    "=?BASE64?ZWNobw==?=",  # not the sentinel (case-sensitive): plain
    "=?base64??=",  # the empty text
    "file:///tmp/a b",
    "x" * 300,
]


@pytest.mark.parametrize("raw", HEADER_VALUES)
def test_header_text_is_decode_header_value(raw: str) -> None:
    modern._TEXTS.clear()
    expected = decode_header_value(raw)
    assert modern.header_text(raw) == expected  # read
    assert modern.header_text(raw) == expected  # remembered (a valid one) or read again
    assert (raw in modern._TEXTS) == (expected is not None)


def test_header_text_memo_is_bounded() -> None:
    modern._TEXTS.clear()
    for number in range(modern._TEXTS_MAX * 3):
        raw = f"tool-{number}"
        assert modern.header_text(raw) == raw
        assert len(modern._TEXTS) <= modern._TEXTS_MAX
    for raw in HEADER_VALUES:  # still the same answers after the memo started afresh
        assert modern.header_text(raw) == decode_header_value(raw)


def reference_legacy_params(params: Any) -> Any:
    """legacy_params as it was written before its shortcuts (isinstance checks, dict(), a keys view compared)."""
    if not isinstance(params, dict):
        return params
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return params
    out = dict(params)
    if meta.keys() <= modern_rewrites.REQUEST_META_KEYS:
        del out["_meta"]
    else:
        out["_meta"] = {key: value for key, value in meta.items() if key not in modern_rewrites.REQUEST_META_KEYS}
    return out


REQUEST_META = {wire.META_PROTOCOL_VERSION: "2026-07-28", wire.META_CLIENT_CAPABILITIES: {}}
LEGACY_CASES: list[Any] = [
    None,
    [],
    "text",
    {},
    {"name": "echo"},
    {"name": "echo", "_meta": None},
    {"name": "echo", "_meta": []},
    {"name": "echo", "_meta": {}},
    {"name": "echo", "arguments": {"a": 1}, "_meta": dict(REQUEST_META)},
    {"_meta": {**REQUEST_META, wire.META_CLIENT_INFO: {"name": "c"}, wire.META_LOG_LEVEL: "debug"}},
    {"name": "echo", "_meta": {**REQUEST_META, "progressToken": 5}},
    {"name": "echo", "_meta": {"progressToken": "t", "other": {"x": 1}}},
    OrderedDict([("name", "echo"), ("_meta", dict(REQUEST_META))]),
    OrderedDict([("name", "echo"), ("_meta", OrderedDict(REQUEST_META))]),
    {"name": "echo", "_meta": OrderedDict([("progressToken", 1), (wire.META_PROTOCOL_VERSION, "2026-07-28")])},
]


@pytest.mark.parametrize("params", LEGACY_CASES)
def test_legacy_params_as_before(params: Any) -> None:
    snapshot = repr(params)
    got, expected = modern_rewrites.legacy_params(params), reference_legacy_params(params)
    assert got == expected
    assert type(got) is type(expected)
    assert (got is params) == (expected is params)
    assert repr(params) == snapshot  # the argument is not changed


# served_environ: the ladder's verdict read straight from a WSGI environ, against validate reading the same
# environ through the front's HttpRequest.header. A table of bodies (methods, params, _meta) by header sets.
LADDER_METHODS = ["tools/call", "prompts/get", "resources/read", "tasks/get", "tools/list", "server/discover", "ping"]
LADDER_PARAMS: list[Any] = [
    None,
    [1],
    {},
    {"name": "echo", "uri": "echo", "taskId": "echo", "_meta": dict(REQUEST_META)},
    {"name": "echo", "uri": "echo", "taskId": "echo", "_meta": {**REQUEST_META, "progressToken": 1}},
    {"name": "other", "uri": "other", "taskId": "other", "_meta": dict(REQUEST_META)},
    {"name": "caf\u00e9", "uri": "caf\u00e9", "taskId": "caf\u00e9", "_meta": dict(REQUEST_META)},
    {"name": 5, "uri": None, "_meta": dict(REQUEST_META)},
    {"name": "echo", "_meta": {wire.META_PROTOCOL_VERSION: "2026-07-28"}},  # no client capabilities
    {"name": "echo", "_meta": {**REQUEST_META, wire.META_CLIENT_CAPABILITIES: []}},
    {"name": "echo", "_meta": {**REQUEST_META, wire.META_PROTOCOL_VERSION: "2025-11-25"}},
    {"name": "echo", "_meta": {**REQUEST_META, wire.META_PROTOCOL_VERSION: ["2026-07-28"]}},  # unhashable
    {"name": "echo", "_meta": {**REQUEST_META, wire.META_PROTOCOL_VERSION: None}},
    {"name": "echo", "_meta": []},
    {"name": "echo"},
    OrderedDict([("name", "echo"), ("_meta", dict(REQUEST_META))]),  # a dict's subclass: the ladder decides
    {"name": "echo", "_meta": OrderedDict(REQUEST_META)},
]
CAFE = "=?base64?Y2Fmw6k=?="  # "café"
NAME_VALUES: list[Any] = ["echo", " echo", "echo\t", "other", "ECHO", CAFE, "=?base64?ZWNobw==?=", "", None, b"echo"]
VERSION_VALUES: list[Any] = ["2026-07-28", " 2026-07-28 ", "2025-11-25", "", None, b"2026-07-28"]
METHOD_VALUES: list[Any] = ["=", " =", "tools/list", None, b"="]  # "=": the body's method


def ladder_environ(version: Any, method: Any, name: Any) -> dict[str, Any]:
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST"}
    for key, value in (("HTTP_MCP_PROTOCOL_VERSION", version), ("HTTP_MCP_METHOD", method), ("HTTP_MCP_NAME", name)):
        if value is not None:
            environ[key] = value
    return environ


@pytest.mark.parametrize("method", LADDER_METHODS)
@pytest.mark.parametrize("params", LADDER_PARAMS)
def test_served_environ_is_the_ladder(method: str, params: Any) -> None:
    from mcpgate.serve.front.http import HttpRequest

    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        obj["params"] = params
    message = jsonrpc.Request(1, method, params, obj, None)
    taken = 0
    for version, method_value, name in itertools.product(VERSION_VALUES, METHOD_VALUES, NAME_VALUES):
        method_header = method if method_value == "=" else (" " + method if method_value == " =" else method_value)
        environ = ladder_environ(version, method_header, name)
        for _ in range(2):  # before and after validate remembered the Mcp-Name value's text (header_text)
            meta = modern.served_environ(message, environ)
            fast = meta is not None
            passed = modern.validate(message, HttpRequest(environ).header) is None
            assert meta is None or meta is params["_meta"]  # what the later steps read: the request's own _meta
            assert not fast or modern.is_modern(message)  # streamable.post sends it to the pool on this alone
            assert not fast or passed, (version, method_header, name)  # True only when the ladder passes
            taken += fast
    if type(params) is dict and params in LADDER_PARAMS[3:5] and method in modern.MODERN_METHODS:
        assert taken  # the usual request, exact headers: taken by the shortcut


def reference_is_modern(message: Any) -> bool:
    """is_modern as it was: through request_meta."""
    if message.method == "server/discover":
        return True
    meta = modern.request_meta(message)
    return meta is not None and (wire.META_PROTOCOL_VERSION in meta or wire.META_CLIENT_CAPABILITIES in meta)


ERA_PARAMS: list[Any] = [
    *LADDER_PARAMS,
    {"_meta": {wire.META_CLIENT_CAPABILITIES: None}},
    {"_meta": {wire.META_PROTOCOL_VERSION: 5}},
    {"_meta": {"progressToken": 1}},
    OrderedDict([("_meta", OrderedDict([(wire.META_PROTOCOL_VERSION, "x")]))]),
    "text",
    7,
]


@pytest.mark.parametrize("method", ["server/discover", "tools/call", "initialize"])
@pytest.mark.parametrize("params", ERA_PARAMS)
def test_is_modern_as_through_request_meta(method: str, params: Any) -> None:
    for message in (
        jsonrpc.Request(1, method, params, {"jsonrpc": "2.0", "id": 1, "method": method}, None),
        jsonrpc.Notification(method, params, {"jsonrpc": "2.0", "method": method}, None),
    ):
        assert modern.is_modern(message) is reference_is_modern(message)
