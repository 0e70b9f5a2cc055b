"""The 2026-07-28 validation ladder of mcpgate.core.modern (its era rewrites: test_modern_rewrites.py).

Rows marked "conformance" are the requests the 0.2.0-alpha.12 suite sends (server-stateless,
http-header-validation, http-custom-header-server-validation, caching) with the answer it expects.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, wire
from mcpgate.core.jsonrpc import Notification, Request

V = "2026-07-28"
META = {
    wire.META_PROTOCOL_VERSION: V,
    wire.META_CLIENT_INFO: {"name": "t", "version": "1"},
    wire.META_CLIENT_CAPABILITIES: {},
}
BAD_PARAMS = (400, jsonrpc.INVALID_PARAMS)
MISMATCH = (400, modern.HEADER_MISMATCH)
UNSUPPORTED = (400, jsonrpc.UNSUPPORTED_PROTOCOL_VERSION)
NOT_FOUND = (404, jsonrpc.METHOD_NOT_FOUND)
OK = None
DROP = object()  # a header value meaning "send no such header"


def message(method: str, params: Any = DROP, msg_id: int | None = 1) -> Request | Notification:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        obj["id"] = msg_id
    if params is not DROP:
        obj["params"] = params
    parsed = jsonrpc.parse(json.dumps(obj))
    assert isinstance(parsed, (Request, Notification))
    return parsed


def lookup(headers: dict[str, str]) -> Any:
    folded = {name.lower(): value for name, value in headers.items()}
    return lambda name: folded.get(name.lower())


def headers_for(method: str, params: Any, overrides: dict[str, Any]) -> dict[str, str]:
    """The headers a conforming client sends (as the suite's yt() builds them), then the row's overrides."""
    headers = {wire.PROTOCOL_VERSION: V, wire.METHOD: method}
    field = modern.NAME_FIELD.get(method)
    if field and isinstance(params, dict) and isinstance(params.get(field), str):
        headers[wire.NAME] = params[field]
    for name, value in overrides.items():
        for existing in [n for n in headers if n.lower() == name.lower()]:
            del headers[existing]
        if value is not DROP:
            headers[name] = value
    return headers


def with_meta(**params: Any) -> dict[str, Any]:
    return {**params, "_meta": dict(META)}


def run(method: str, params: Any, overrides: dict[str, Any], **kw: Any) -> modern.Failure | None:
    msg = message(method, params)
    return modern.validate(msg, lookup(headers_for(method, params, overrides)), **kw)


def outcome(failure: modern.Failure | None) -> tuple[int, int] | None:
    return None if failure is None else (failure.status, failure.code)


def meta_without(*keys: str) -> dict[str, Any]:
    return {"_meta": {k: v for k, v in META.items() if k not in keys}}


TOOL = "echo"
CALL = with_meta(name=TOOL, arguments={})

LADDER: list[tuple[str, str, Any, dict[str, Any], tuple[int, int] | None]] = [
    # rung 1: _meta
    ("conformance missing-meta", "server/discover", {}, {}, BAD_PARAMS),
    ("no params", "tools/list", DROP, {}, BAD_PARAMS),
    ("params not an object", "tools/list", [1], {}, BAD_PARAMS),
    ("_meta not an object", "tools/list", {"_meta": "x"}, {}, BAD_PARAMS),
    (
        "conformance missing-protocol-version",
        "server/discover",
        meta_without(wire.META_PROTOCOL_VERSION),
        {},
        BAD_PARAMS,
    ),
    (
        "conformance missing-client-capabilities",
        "server/discover",
        meta_without(wire.META_CLIENT_CAPABILITIES),
        {},
        BAD_PARAMS,
    ),
    ("conformance clientInfo optional", "server/discover", meta_without(wire.META_CLIENT_INFO), {}, OK),
    (
        "protocolVersion not a string",
        "tools/list",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: 20260728}},
        {},
        BAD_PARAMS,
    ),
    (
        "clientCapabilities not an object",
        "tools/list",
        {"_meta": {**META, wire.META_CLIENT_CAPABILITIES: []}},
        {},
        BAD_PARAMS,
    ),
    ("_meta first, before a missing header", "tools/list", {}, {wire.PROTOCOL_VERSION: DROP}, BAD_PARAMS),
    # rung 2: MCP-Protocol-Version
    ("version header missing", "tools/list", with_meta(), {wire.PROTOCOL_VERSION: DROP}, MISMATCH),
    (
        "conformance header-mismatch (body v999.0.0)",
        "server/discover",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: "v999.0.0"}},
        {},
        MISMATCH,
    ),
    ("version header differs", "tools/list", with_meta(), {wire.PROTOCOL_VERSION: "2025-11-25"}, MISMATCH),
    ("version header surrounded by spaces", "tools/list", with_meta(), {wire.PROTOCOL_VERSION: f"  {V} "}, OK),
    (
        "version header lowercase name",
        "tools/list",
        with_meta(),
        {wire.PROTOCOL_VERSION: DROP, "mcp-protocol-version": V},
        OK,
    ),
    (
        "version header with a control character",
        "tools/list",
        with_meta(),
        {wire.PROTOCOL_VERSION: V + "\x00"},
        MISMATCH,
    ),
    (
        "version header base64 is not decoded",
        "tools/list",
        with_meta(),
        {wire.PROTOCOL_VERSION: "=?base64?MjAyNi0wNy0yOA==?="},
        MISMATCH,
    ),
    # rung 2: Mcp-Method
    ("conformance ServerRejectsMissingMethodHeader", "tools/list", with_meta(), {wire.METHOD: DROP}, MISMATCH),
    (
        "conformance ServerRejectsMismatchedMethodHeader",
        "tools/list",
        with_meta(),
        {wire.METHOD: "prompts/list"},
        MISMATCH,
    ),
    ("conformance ServerRejectsCaseMismatchValue", "tools/list", with_meta(), {wire.METHOD: "TOOLS/LIST"}, MISMATCH),
    ("conformance ServerAcceptsLowercaseHeaderName", "tools/list", with_meta(), {"mcp-method": "tools/list"}, OK),
    ("conformance ServerAcceptsUppercaseHeaderName", "tools/list", with_meta(), {"MCP-METHOD": "tools/list"}, OK),
    (
        "method header base64 is not decoded",
        "tools/list",
        with_meta(),
        {wire.METHOD: "=?base64?dG9vbHMvbGlzdA==?="},
        MISMATCH,
    ),
    ("method header with a newline", "tools/list", with_meta(), {wire.METHOD: "tools/list\n"}, MISMATCH),
    # rung 2: Mcp-Name
    ("tools/call with matching name", "tools/call", CALL, {}, OK),
    ("conformance ServerRejectsMismatchedNameHeader", "tools/call", CALL, {wire.NAME: "wrong_tool_name"}, MISMATCH),
    ("conformance ServerAcceptsWhitespaceHeaderValue", "tools/call", CALL, {wire.NAME: f"  {TOOL}  "}, OK),
    ("conformance ServerRejectsMissingNameHeader", "tools/call", CALL, {wire.NAME: DROP}, MISMATCH),
    ("name case differs", "tools/call", CALL, {wire.NAME: "ECHO"}, MISMATCH),
    ("name as base64", "tools/call", CALL, {wire.NAME: "=?base64?ZWNobw==?="}, OK),
    ("non-ASCII name as base64", "tools/call", with_meta(name="héllo"), {wire.NAME: "=?base64?aMOpbGxv?="}, OK),
    ("non-ASCII name sent raw", "tools/call", with_meta(name="héllo"), {wire.NAME: "h\xc3\xa9llo"}, MISMATCH),
    ("name with a control character", "tools/call", with_meta(name="ec\x01ho"), {wire.NAME: "ec\x01ho"}, MISMATCH),
    ("non-ASCII name equal to the body", "tools/call", with_meta(name="h\xe9llo"), {wire.NAME: "h\xe9llo"}, MISMATCH),
    ("name with DEL equal to the body", "tools/call", with_meta(name="ec\x7fho"), {wire.NAME: "ec\x7fho"}, MISMATCH),
    ("name with a tab inside", "tools/call", with_meta(name="ec\tho"), {wire.NAME: "ec\tho"}, OK),
    ("sentinel-looking name sent plain", "tools/call", with_meta(name="=?base64?echo?="), {}, MISMATCH),
    (
        "sentinel-looking name encoded",
        "tools/call",
        with_meta(name="=?base64?echo?="),
        {wire.NAME: "=?base64?PT9iYXNlNjQ/ZWNobz89?="},
        OK,
    ),
    ("bad base64 name", "tools/call", CALL, {wire.NAME: "=?base64?ZWNobw?="}, MISMATCH),
    ("name header with no name in the body", "tools/call", with_meta(arguments={}), {wire.NAME: TOOL}, MISMATCH),
    ("prompts/get name", "prompts/get", with_meta(name="greet"), {}, OK),
    ("prompts/get name differs", "prompts/get", with_meta(name="greet"), {wire.NAME: "other"}, MISMATCH),
    ("resources/read uri", "resources/read", with_meta(uri="file:///a%20b.txt"), {}, OK),
    ("resources/read uri with a query", "resources/read", with_meta(uri="https://example.com/r?id=123"), {}, OK),
    ("resources/read uri differs", "resources/read", with_meta(uri="file:///a"), {wire.NAME: "file:///b"}, MISMATCH),
    ("resources/read name missing", "resources/read", with_meta(uri="file:///a"), {wire.NAME: DROP}, MISMATCH),
    ("tools/list needs no Mcp-Name", "tools/list", with_meta(), {}, OK),
    ("a stray Mcp-Name on tools/list is ignored", "tools/list", with_meta(), {wire.NAME: "whatever"}, OK),
    # rung 3: the version
    (
        "conformance ServerUnsupportedVersionError (v999.0.0)",
        "server/discover",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: "v999.0.0"}},
        {wire.PROTOCOL_VERSION: "v999.0.0"},
        UNSUPPORTED,
    ),
    (
        "a legacy version with modern _meta",
        "tools/list",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: "2025-11-25"}},
        {wire.PROTOCOL_VERSION: "2025-11-25"},
        UNSUPPORTED,
    ),
    (
        "headers before the version",
        "tools/list",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: "v999.0.0"}},
        {wire.PROTOCOL_VERSION: "v999.0.0", wire.METHOD: "prompts/list"},
        MISMATCH,
    ),
    # rung 5: methods
    *[
        (f"conformance removed method {m}", m, with_meta(), {}, NOT_FOUND)
        for m in ("initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe")
    ],
    ("conformance unknown/method", "unknown/method", with_meta(), {}, NOT_FOUND),
    ("a client-side method", "sampling/createMessage", with_meta(), {}, NOT_FOUND),
    ("tasks/result is not the extension's", "tasks/result", with_meta(taskId="t"), {}, NOT_FOUND),
    ("tasks/list is not the extension's", "tasks/list", with_meta(), {}, NOT_FOUND),
    ("a task method names its task", "tasks/get", with_meta(taskId="t"), {}, OK),
    ("Mcp-Name mirrors the taskId", "tasks/cancel", with_meta(taskId="t"), {wire.NAME: "u"}, MISMATCH),
    ("a task method without Mcp-Name", "tasks/update", with_meta(taskId="t"), {wire.NAME: DROP}, MISMATCH),
    (
        "version before the method",
        "ping",
        {"_meta": {**META, wire.META_PROTOCOL_VERSION: "v999.0.0"}},
        {wire.PROTOCOL_VERSION: "v999.0.0"},
        UNSUPPORTED,
    ),
    ("method header checked before 404", "ping", with_meta(), {wire.METHOD: "tools/list"}, MISMATCH),
]


@pytest.mark.parametrize(
    ("method", "params", "overrides", "expected"), [row[1:] for row in LADDER], ids=[row[0] for row in LADDER]
)
def test_ladder(method: str, params: Any, overrides: dict[str, Any], expected: tuple[int, int] | None) -> None:
    assert outcome(run(method, params, overrides)) == expected


@pytest.mark.parametrize("method", sorted(modern.MODERN_METHODS))
def test_every_modern_method_passes(method: str) -> None:
    params = with_meta(name="n", uri="file:///n", arguments={}, taskId="t")
    assert run(method, params, {}) is None


def test_unsupported_version_data_lists_supported_and_requested() -> None:
    params = {"_meta": {**META, wire.META_PROTOCOL_VERSION: "v999.0.0"}}
    failure = run("server/discover", params, {wire.PROTOCOL_VERSION: "v999.0.0"})
    assert failure is not None
    assert failure.data == {"supported": [V], "requested": "v999.0.0"}
    assert "v999.0.0" in failure.message and V in failure.message


def test_supported_is_a_parameter() -> None:
    later = "2027-01-01"
    params = {"_meta": {**META, wire.META_PROTOCOL_VERSION: later}}
    assert run("tools/list", params, {wire.PROTOCOL_VERSION: later}, supported=(V, later)) is None
    assert outcome(run("tools/list", with_meta(), {}, supported=(later,))) == UNSUPPORTED


# -- Mcp-Param-* -----------------------------------------------------------------------------------------------

PARAMS = {
    "region": "Mcp-Param-Region",
    "priority": "Mcp-Param-Priority",
    "verbose": "Mcp-Param-Verbose",
    "opts.level": "Mcp-Param-Level",
}


def call(**arguments: Any) -> dict[str, Any]:
    return with_meta(name=TOOL, arguments=arguments)


PARAM_ROWS: list[tuple[str, dict[str, Any], dict[str, Any], tuple[int, int] | None]] = [
    ("conformance ServerAcceptsValidBase64", call(region="Hello"), {"Mcp-Param-Region": "=?base64?SGVsbG8=?="}, OK),
    (
        "conformance ServerRejectsInvalidBase64Padding",
        call(region="Hello"),
        {"Mcp-Param-Region": "=?base64?SGVsbG8?="},
        MISMATCH,
    ),
    (
        "conformance ServerRejectsInvalidBase64Chars",
        call(region="Hello"),
        {"Mcp-Param-Region": "=?base64?SGVs!!!bG8=?="},
        MISMATCH,
    ),
    ("conformance ServerLiteralMissingBase64Prefix", call(region="SGVsbG8="), {"Mcp-Param-Region": "SGVsbG8="}, OK),
    (
        "conformance ServerLiteralMissingBase64Suffix",
        call(region="=?base64?SGVsbG8="),
        {"Mcp-Param-Region": "=?base64?SGVsbG8="},
        OK,
    ),
    ("conformance ServerRejectsMissingCustomHeader", call(region="test-value"), {}, MISMATCH),
    (
        "conformance default integer fill",
        call(region="a", priority=0),
        {"Mcp-Param-Region": "a", "Mcp-Param-Priority": "0"},
        OK,
    ),
    ("plain string", call(region="us-west1"), {"Mcp-Param-Region": "us-west1"}, OK),
    ("header name case-insensitive", call(region="us-west1"), {"mcp-param-region": "us-west1"}, OK),
    ("string case differs", call(region="us-west1"), {"Mcp-Param-Region": "US-WEST1"}, MISMATCH),
    ("empty string", call(region=""), {"Mcp-Param-Region": ""}, OK),
    ("empty string, header missing", call(region=""), {}, MISMATCH),
    ("non-ASCII as base64", call(region="Hello, 世界"), {"Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}, OK),
    ("padded as base64", call(region=" padded "), {"Mcp-Param-Region": "=?base64?IHBhZGRlZCA=?="}, OK),
    ("base64 of non-UTF-8", call(region="x"), {"Mcp-Param-Region": "=?base64?/w==?="}, MISMATCH),
    ("raw control character", call(region="a\x01b"), {"Mcp-Param-Region": "a\x01b"}, MISMATCH),
    ("integer", call(priority=42), {"Mcp-Param-Priority": "42"}, OK),
    ("integer as 42.0", call(priority=42), {"Mcp-Param-Priority": "42.0"}, OK),
    ("integer differs", call(priority=42), {"Mcp-Param-Priority": "43"}, MISMATCH),
    ("integer not a number", call(priority=42), {"Mcp-Param-Priority": "forty-two"}, MISMATCH),
    ("negative integer", call(priority=-7), {"Mcp-Param-Priority": "-7"}, OK),
    ("integer as base64", call(priority=42), {"Mcp-Param-Priority": "=?base64?NDI=?="}, OK),
    ("boolean false", call(verbose=False), {"Mcp-Param-Verbose": "false"}, OK),
    ("boolean true", call(verbose=True), {"Mcp-Param-Verbose": "true"}, OK),
    ("boolean capitalised", call(verbose=True), {"Mcp-Param-Verbose": "True"}, MISMATCH),
    ("boolean as 0", call(verbose=False), {"Mcp-Param-Verbose": "0"}, MISMATCH),
    ("boolean missing", call(verbose=False), {}, MISMATCH),
    ("null value, no header", call(verbose=None), {}, OK),
    ("null value, stray header ignored", call(verbose=None), {"Mcp-Param-Verbose": "true"}, OK),
    ("absent value, stray header ignored", call(), {"Mcp-Param-Region": "anything"}, OK),
    ("nested value", call(opts={"level": 3}), {"Mcp-Param-Level": "3"}, OK),
    ("nested value differs", call(opts={"level": 3}), {"Mcp-Param-Level": "4"}, MISMATCH),
    ("nested value missing its header", call(opts={"level": 3}), {}, MISMATCH),
    ("nested parent absent", call(opts={}), {}, OK),
    ("unannotated argument needs no header", call(query="SELECT 1"), {}, OK),
]


@pytest.mark.parametrize(
    ("params", "overrides", "expected"), [row[1:] for row in PARAM_ROWS], ids=[row[0] for row in PARAM_ROWS]
)
def test_param_headers(params: dict[str, Any], overrides: dict[str, Any], expected: tuple[int, int] | None) -> None:
    assert outcome(run("tools/call", params, overrides, param_headers=PARAMS)) == expected


def test_param_headers_only_checked_when_given() -> None:
    assert run("tools/call", call(region="x"), {}) is None
    assert run("tools/call", call(region="x"), {}, param_headers={}) is None


def test_param_headers_from_tool_header_params() -> None:
    schema = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    mapping = modern.tool_header_params(schema)
    assert mapping == {"region": "Mcp-Param-Region"}
    assert outcome(run("tools/call", call(region="eu"), {}, param_headers=mapping)) == MISMATCH
    assert run("tools/call", call(region="eu"), {"Mcp-Param-Region": "eu"}, param_headers=mapping) is None


# -- failure messages ------------------------------------------------------------------------------------------

MESSAGE_ROWS: list[tuple[str, str, Any, dict[str, Any], list[str]]] = [
    (
        "missing version header",
        "tools/list",
        with_meta(),
        {wire.PROTOCOL_VERSION: DROP},
        ["MCP-Protocol-Version", "missing"],
    ),
    (
        "version mismatch",
        "tools/list",
        with_meta(),
        {wire.PROTOCOL_VERSION: "2025-11-25"},
        ["MCP-Protocol-Version", "'2025-11-25'", f"'{V}'"],
    ),
    (
        "method mismatch",
        "tools/list",
        with_meta(),
        {wire.METHOD: "prompts/list"},
        ["Mcp-Method", "'prompts/list'", "'tools/list'"],
    ),
    ("name mismatch", "tools/call", CALL, {wire.NAME: "wrong_tool_name"}, ["Mcp-Name", "'wrong_tool_name'", "'echo'"]),
    ("invalid name", "tools/call", CALL, {wire.NAME: "=?base64?SGVsbG8?="}, ["Mcp-Name", "'=?base64?SGVsbG8?='"]),
    (
        "missing meta field",
        "tools/list",
        meta_without(wire.META_CLIENT_CAPABILITIES),
        {},
        [wire.META_CLIENT_CAPABILITIES],
    ),
    ("unknown method", "ping", with_meta(), {}, ["'ping'"]),
]


@pytest.mark.parametrize(
    ("method", "params", "overrides", "needles"),
    [row[1:] for row in MESSAGE_ROWS],
    ids=[row[0] for row in MESSAGE_ROWS],
)
def test_failure_messages_name_what_disagreed(
    method: str, params: Any, overrides: dict[str, Any], needles: list[str]
) -> None:
    failure = run(method, params, overrides)
    assert failure is not None
    for needle in needles:
        assert needle in failure.message


def test_param_failure_names_the_header_and_both_values() -> None:
    failure = run("tools/call", call(priority=42), {"Mcp-Param-Priority": "43"}, param_headers=PARAMS)
    assert failure is not None
    assert "Mcp-Param-Priority" in failure.message and "'43'" in failure.message and "'42'" in failure.message
    assert failure.data == {"header": "Mcp-Param-Priority"}


def test_long_values_are_cut() -> None:
    long_name = "n" * 5000
    failure = run("tools/call", with_meta(name=long_name), {wire.NAME: "m" * 5000})
    assert failure is not None and failure.code == modern.HEADER_MISMATCH
    assert len(failure.message) < 400
    assert "n" * 100 in failure.message and "m" * 100 in failure.message


# -- notifications ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "headers", "expected"),
    [
        ({"requestId": 1}, {wire.PROTOCOL_VERSION: V}, OK),
        ({"requestId": 1}, {}, MISMATCH),
        ({"requestId": 1}, {wire.PROTOCOL_VERSION: "v999"}, UNSUPPORTED),
        (with_meta(requestId=1), {wire.PROTOCOL_VERSION: "2025-11-25"}, MISMATCH),
        ({"requestId": 1}, {wire.PROTOCOL_VERSION: V, wire.METHOD: "tools/list"}, MISMATCH),
        ({"requestId": 1}, {wire.PROTOCOL_VERSION: V, wire.METHOD: "notifications/cancelled"}, OK),
    ],
)
def test_notifications(params: Any, headers: dict[str, str], expected: tuple[int, int] | None) -> None:
    note = message("notifications/cancelled", params, msg_id=None)
    assert isinstance(note, Notification)
    assert outcome(modern.validate(note, lookup(headers))) == expected


# -- era --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "modern_"),
    [
        ("tools/list", with_meta(), True),
        ("tools/list", {"_meta": {wire.META_PROTOCOL_VERSION: None}}, True),  # any value is evidence
        ("tools/list", meta_without(wire.META_PROTOCOL_VERSION), True),  # clientCapabilities alone
        ("server/discover", DROP, True),
        ("server/discover", {}, True),
        ("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}}, False),
        ("tools/list", DROP, False),
        ("tools/list", {"_meta": {"progressToken": 1}}, False),
        ("tools/list", {"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t"}}}, False),
        ("tools/list", [1], False),
        ("ping", {"_meta": "x"}, False),
    ],
)
def test_is_modern(method: str, params: Any, modern_: bool) -> None:
    assert modern.is_modern(message(method, params)) is modern_


def test_method_tables() -> None:
    assert modern.SUPPORTED_MODERN == (V,)
    assert modern.MRTR_METHODS <= modern.MODERN_METHODS


def test_sentinel_on_a_plain_header_is_a_mismatch_not_a_decode() -> None:
    failure = run("tools/list", with_meta(), {wire.PROTOCOL_VERSION: "=?base64?MjAyNi0wNy0yOA==?="})
    assert failure is not None and "does not match" in failure.message


# -- the well-formed request's shortcut (modern._served) says yes only where the ladder finds nothing --------------

_SHORTCUT_METAS: list[Any] = [
    None,
    5,
    {},
    {wire.META_PROTOCOL_VERSION: V},
    {wire.META_PROTOCOL_VERSION: V, wire.META_CLIENT_CAPABILITIES: {}},
    {wire.META_PROTOCOL_VERSION: "2025-06-18", wire.META_CLIENT_CAPABILITIES: {}},
    {wire.META_PROTOCOL_VERSION: 7, wire.META_CLIENT_CAPABILITIES: {}},
    {wire.META_PROTOCOL_VERSION: V, wire.META_CLIENT_CAPABILITIES: []},
]


@pytest.mark.parametrize("meta", _SHORTCUT_METAS)
@pytest.mark.parametrize("method", ["tools/call", "tools/list", "resources/read", "ping", "tasks/get"])
@pytest.mark.parametrize("name", [None, "echo", "é", "=?base64?ZWNobw==?=", 3])
def test_the_shortcut_agrees_with_the_ladder(meta: Any, method: str, name: Any) -> None:
    params: dict[str, Any] = {} if meta is None else {"_meta": meta}
    if name is not None:
        params.update(name=name, uri=name, taskId=name)
    message = Request(1, method, params, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, None)
    versions_ = [None, V, " 2026-07-28\t", "2025-06-18", "é"]
    methods = [None, method, f" {method} ", "x"]
    names = [None, " echo ", "=?base64?ZWNobw==?=", "é", "=?base64?!!?="]
    for version, sent_method, sent_name in ((v, m, n) for v in versions_ for m in methods for n in names):
        headers = {wire.PROTOCOL_VERSION: version, wire.METHOD: sent_method, wire.NAME: sent_name}
        shortcut = modern._served(message, headers.get, modern.SUPPORTED_MODERN, None)
        ladder_ok = modern.validate(message, headers.get) is None  # the shortcut first, then the ladder
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(modern, "_served", lambda *_args: False)
            assert (modern.validate(message, headers.get) is None) is shortcut is ladder_ok, headers
