"""mcpgate.core.modern_client: the headers a 2026-07-28 POST carries (request_headers) and the
params of a request in 2026-07-28 form (modern_params). Every header set request_headers builds passes the
server side's validate."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, modern_client, modern_rewrites, wire
from mcpgate.core.header_values import decode_header_value, tool_header_params
from mcpgate.core.jsonrpc import Notification, Request

V = "2026-07-28"
META = {wire.META_PROTOCOL_VERSION: V, wire.META_CLIENT_CAPABILITIES: {}}
B64 = "=?base64?"

# A tool whose schema mirrors four arguments, one of them nested.
SCHEMA = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "x-mcp-header": "Region"},
        "count": {"type": "integer", "x-mcp-header": "Count"},
        "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
        "opts": {"type": "object", "properties": {"zone": {"type": ["string", "null"], "x-mcp-header": "Zone"}}},
        "other": {"type": "string"},
    },
}
PARAM_HEADERS = tool_header_params(SCHEMA)


def request(method: str, params: dict[str, Any] | None, msg_id: int | None = 1) -> Request | Notification:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        obj["id"] = msg_id
    if params is not None:
        obj["params"] = params
    parsed = jsonrpc.parse(json.dumps(obj))
    assert isinstance(parsed, (Request, Notification))
    return parsed


def call(arguments: dict[str, Any], name: str = "t") -> Request | Notification:
    return request("tools/call", {"name": name, "arguments": arguments, "_meta": META})


def lookup(headers: dict[str, str]) -> Any:
    folded = {name.lower(): value for name, value in headers.items()}
    return lambda name: folded.get(name.lower())


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (request("tools/list", {"_meta": META}), {"MCP-Protocol-Version": V, "Mcp-Method": "tools/list"}),
        (request("server/discover", {"_meta": META}), {"MCP-Protocol-Version": V, "Mcp-Method": "server/discover"}),
        (
            request("prompts/get", {"name": "greet", "_meta": META}),
            {"MCP-Protocol-Version": V, "Mcp-Method": "prompts/get", "Mcp-Name": "greet"},
        ),
        (
            request("resources/read", {"uri": "file:///a b.txt", "_meta": META}),
            {"MCP-Protocol-Version": V, "Mcp-Method": "resources/read", "Mcp-Name": "file:///a b.txt"},
        ),
        (call({"other": "x"}), {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": "t"}),
        (
            call({"region": "eu-west", "count": 42, "dry": True, "opts": {"zone": "b"}}),
            {
                "MCP-Protocol-Version": V,
                "Mcp-Method": "tools/call",
                "Mcp-Name": "t",
                "Mcp-Param-Region": "eu-west",
                "Mcp-Param-Count": "42",
                "Mcp-Param-Dry-Run": "true",
                "Mcp-Param-Zone": "b",
            },
        ),
        # null and absent arguments: no header
        (
            call({"region": None, "dry": False, "opts": {"zone": None}}),
            {"MCP-Protocol-Version": V, "Mcp-Method": "tools/call", "Mcp-Name": "t", "Mcp-Param-Dry-Run": "false"},
        ),
        # no _meta version: no MCP-Protocol-Version (the server refuses; the client does not invent one)
        (request("tools/list", {}), {"Mcp-Method": "tools/list"}),
        (request("notifications/cancelled", {"requestId": 1}, None), {"Mcp-Method": "notifications/cancelled"}),
    ],
)
def test_request_headers(message: Request | Notification, expected: dict[str, str]) -> None:
    assert modern_client.request_headers(message, PARAM_HEADERS) == expected


@pytest.mark.parametrize(
    "value",
    [
        "Zürich",  # not ASCII
        "日本",
        " padded",  # leading whitespace
        "padded ",  # trailing whitespace
        "tab\tinside",
        "line\nbreak",
        "\x7f",  # a control character
        "=?base64?SGk=?=",  # looks like the sentinel
        "=?base64?not base64?=",
        "",
    ],
)
def test_values_that_need_base64(value: str) -> None:
    headers = modern_client.request_headers(call({"region": value}, name=value), PARAM_HEADERS)
    for name in ("Mcp-Name", "Mcp-Param-Region"):
        if value == "":
            assert headers[name] == ""  # an empty value is plain
            continue
        assert headers[name].startswith(B64) and headers[name].endswith("?="), headers[name]
        assert decode_header_value(headers[name]) == value


@pytest.mark.parametrize("value", ["plain", "a b", "x=?base64?", "?=", "!#$%&'*+-.^_`|~", "42.5"])
def test_plain_values_stay_plain(value: str) -> None:
    headers = modern_client.request_headers(call({"region": value}, name=value), PARAM_HEADERS)
    assert headers["Mcp-Name"] == headers["Mcp-Param-Region"] == value


def test_no_param_headers_without_annotations_or_off_tools_call() -> None:
    assert "Mcp-Param-Region" not in modern_client.request_headers(call({"region": "x"}), None)
    assert "Mcp-Param-Region" not in modern_client.request_headers(call({"region": "x"}), {})
    prompt = request("prompts/get", {"name": "p", "arguments": {"region": "x"}, "_meta": META})
    assert "Mcp-Param-Region" not in modern_client.request_headers(prompt, PARAM_HEADERS)


ROUND_TRIP = [
    call({"region": "eu-west", "count": 42, "dry": True, "opts": {"zone": "b"}}),
    call({"region": "Zürich", "count": -7, "dry": False}),
    call({"region": " x ", "count": 9007199254740991}),
    call({"region": "=?base64?SGk=?=", "opts": {"zone": "ä"}}),
    call({"count": 42.0}),  # a float that is an integer: compared numerically
    call({"region": None, "opts": None}),
    call({}, name="naïve tool"),
    call({"region": "x"}, name=" spaced "),
    request("tools/list", {"cursor": "c", "_meta": META}),
    request("server/discover", {"_meta": META}),
    request("resources/read", {"uri": "mem://é", "_meta": META}),
    request("prompts/get", {"name": "=?base64?x?=", "_meta": META}),
    request("subscriptions/listen", {"notifications": {"toolsListChanged": True}, "_meta": META}),
]


@pytest.mark.parametrize("message", ROUND_TRIP)
def test_round_trip_through_validate(message: Request | Notification) -> None:
    headers = modern_client.request_headers(message, PARAM_HEADERS)
    assert modern.validate(message, lookup(headers), param_headers=PARAM_HEADERS) is None


@pytest.mark.parametrize("message", ROUND_TRIP[:4])
def test_round_trip_fails_without_the_param_headers(message: Request | Notification) -> None:
    """The round trip is not vacuous: the same headers without Mcp-Param-* fail validate."""
    headers = {k: v for k, v in modern_client.request_headers(message, PARAM_HEADERS).items() if "Param" not in k}
    failure = modern.validate(message, lookup(headers), param_headers=PARAM_HEADERS)
    assert failure is not None and failure.code == modern.HEADER_MISMATCH


def test_modern_params_adds_the_meta() -> None:
    params = {"name": "t", "arguments": {"a": 1}, "_meta": {"progressToken": 7}}
    out = modern_client.modern_params(
        params, version=V, capabilities={"sampling": {}}, client_info={"name": "h", "version": "1"}, log_level="info"
    )
    assert out == {
        "name": "t",
        "arguments": {"a": 1},
        "_meta": {
            "progressToken": 7,
            wire.META_PROTOCOL_VERSION: V,
            wire.META_CLIENT_CAPABILITIES: {"sampling": {}},
            wire.META_CLIENT_INFO: {"name": "h", "version": "1"},
            wire.META_LOG_LEVEL: "info",
        },
    }
    assert params == {"name": "t", "arguments": {"a": 1}, "_meta": {"progressToken": 7}}  # not changed


@pytest.mark.parametrize("params", [None, [], {}])
def test_modern_params_without_params_or_optional_fields(params: Any) -> None:
    out = modern_client.modern_params(params, version=V, capabilities={}, client_info=None)
    assert out == {"_meta": {wire.META_PROTOCOL_VERSION: V, wire.META_CLIENT_CAPABILITIES: {}}}


def test_modern_params_pass_validate_and_round_trip_back() -> None:
    legacy = {"name": "t", "arguments": {"region": "x"}, "_meta": {"progressToken": "p"}}
    params = modern_client.modern_params(legacy, version=V, capabilities={}, client_info={"name": "h", "version": "1"})
    message = request("tools/call", params)
    assert modern.is_modern(message)
    headers = modern_client.request_headers(message, PARAM_HEADERS)
    assert modern.validate(message, lookup(headers), param_headers=PARAM_HEADERS) is None
    assert modern_rewrites.legacy_params(params) == legacy
