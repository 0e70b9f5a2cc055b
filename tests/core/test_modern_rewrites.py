"""The rewrites between the eras of mcpgate.core.modern_rewrites: a legacy child's params, a 2026-07-28 result's
stamp, the DiscoverResult made of an InitializeResult, and how a 2026-07-28 peer's answers are recognised."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import modern, modern_rewrites, wire

V = "2026-07-28"
META = {
    wire.META_PROTOCOL_VERSION: V,
    wire.META_CLIENT_INFO: {"name": "t", "version": "1"},
    wire.META_CLIENT_CAPABILITIES: {},
}


def with_meta(**params: Any) -> dict[str, Any]:
    return {**params, "_meta": dict(META)}


def test_cacheable_methods_are_modern() -> None:
    assert modern_rewrites.CACHEABLE <= modern.MODERN_METHODS


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (None, None),
        ({}, {}),
        ({"name": "x"}, {"name": "x"}),
        (with_meta(name="x"), {"name": "x"}),
        ({"_meta": {**META, "progressToken": 7}, "name": "x"}, {"_meta": {"progressToken": 7}, "name": "x"}),
        ({"_meta": {**META, wire.META_LOG_LEVEL: "debug"}}, {}),
        ({"_meta": {**META, "com.example/trace": "t"}}, {"_meta": {"com.example/trace": "t"}}),
        ({"_meta": {}}, {}),
        ({"_meta": "odd"}, {"_meta": "odd"}),
        (
            {"_meta": {**META, wire.META_CLIENT_INFO: {"name": "c"}}, "arguments": {"_meta": META}},
            {"arguments": {"_meta": META}},
        ),
        ({"_meta": {"progressToken": "t"}, "name": "x"}, {"_meta": {"progressToken": "t"}, "name": "x"}),
        ({"_meta": {wire.META_CLIENT_INFO: {}, "x": None}}, {"_meta": {"x": None}}),
    ],
)
def test_legacy_params(params: dict[str, Any] | None, expected: dict[str, Any] | None) -> None:
    before = json.dumps(params)
    assert modern_rewrites.legacy_params(params) == expected
    assert json.dumps(params) == before  # the argument is not changed


INFO = {"name": "child", "version": "1"}
INFO_KEY = wire.META_SERVER_INFO


@pytest.mark.parametrize(
    ("method", "result", "server_info", "expected"),
    [
        (
            "tools/list",
            {"tools": []},
            None,
            {"tools": [], "resultType": "complete", "ttlMs": 5, "cacheScope": "private"},
        ),
        (
            "tools/list",
            {"tools": [], "ttlMs": 0, "cacheScope": "public"},
            None,
            {"tools": [], "ttlMs": 0, "cacheScope": "public", "resultType": "complete"},
        ),
        (
            "resources/read",
            {"contents": [], "ttlMs": -1, "cacheScope": "shared"},
            None,
            {"contents": [], "ttlMs": 5, "cacheScope": "private", "resultType": "complete"},
        ),
        (
            "prompts/list",
            {"prompts": [], "ttlMs": 1.5},
            None,
            {"prompts": [], "ttlMs": 5, "cacheScope": "private", "resultType": "complete"},
        ),
        (
            "tools/list",
            {"tools": [], "ttlMs": True},
            None,
            {"tools": [], "ttlMs": 5, "cacheScope": "private", "resultType": "complete"},
        ),
        ("tools/call", {"content": []}, None, {"content": [], "resultType": "complete"}),
        ("tools/call", {"content": []}, INFO, {"content": [], "resultType": "complete", "_meta": {INFO_KEY: INFO}}),
        (
            "tools/call",
            {"content": [], "_meta": {"k": 1}},
            INFO,
            {"content": [], "resultType": "complete", "_meta": {"k": 1, INFO_KEY: INFO}},
        ),
        (
            "tools/call",
            {"content": [], "_meta": {INFO_KEY: {"name": "own"}}},
            INFO,
            {"content": [], "resultType": "complete", "_meta": {INFO_KEY: {"name": "own"}}},
        ),
        (
            "resources/read",
            {"resultType": "input_required", "requestState": "s"},
            INFO,
            {"resultType": "input_required", "requestState": "s", "_meta": {INFO_KEY: INFO}},
        ),
        (
            "server/discover",
            {"supportedVersions": [V], "capabilities": {}},
            INFO,
            {
                "supportedVersions": [V],
                "capabilities": {},
                "resultType": "complete",
                "ttlMs": 5,
                "cacheScope": "private",
                "_meta": {INFO_KEY: INFO},
            },
        ),
    ],
)
def test_stamp_result(method: str, result: dict[str, Any], server_info: Any, expected: dict[str, Any]) -> None:
    before = json.dumps(result)
    assert modern_rewrites.stamp_result(method, result, ttl_ms=5, server_info=server_info) == expected
    assert json.dumps(result) == before


@pytest.mark.parametrize("method", sorted(modern_rewrites.CACHEABLE))
def test_stamp_result_gives_every_cacheable_method_hints(method: str) -> None:
    """conformance caching: ttlMs an integer >= 0 and cacheScope public/private on each of them."""
    stamped = modern_rewrites.stamp_result(method, {}, ttl_ms=0, server_info=None)
    assert stamped["ttlMs"] == 0 and stamped["cacheScope"] == "private" and stamped["resultType"] == "complete"


def test_discover_from_initialize() -> None:
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "serverInfo": INFO,
        "instructions": "Use it well.",
    }
    result = modern_rewrites.discover_from_initialize(init, (V,))
    assert result == {
        "resultType": "complete",
        "supportedVersions": [V],
        "capabilities": {"tools": {"listChanged": True}, "logging": {}},
        "instructions": "Use it well.",
        "_meta": {INFO_KEY: INFO},
    }
    assert modern_rewrites.is_discover_result(result)
    bare = modern_rewrites.discover_from_initialize({"capabilities": None}, (V,))
    assert bare == {"resultType": "complete", "supportedVersions": [V], "capabilities": {}}


@pytest.mark.parametrize(
    ("result", "answer"),
    [
        ({"supportedVersions": [V], "capabilities": {}}, True),
        ({"supportedVersions": [], "capabilities": {"tools": {}}}, True),
        ({"supportedVersions": [V]}, False),
        ({"supportedVersions": V, "capabilities": {}}, False),
        ({"supportedVersions": [1], "capabilities": {}}, False),
        ({"supportedVersions": [V], "capabilities": []}, False),
        ({"protocolVersion": "2025-11-25", "capabilities": {}}, False),  # an InitializeResult
        (None, False),
        ([V], False),
    ],
)
def test_is_discover_result(result: object, answer: bool) -> None:
    assert modern_rewrites.is_discover_result(result) is answer


@pytest.mark.parametrize(
    ("error", "answer"),
    [
        ({"code": -32020, "message": "m"}, True),
        ({"code": -32021, "message": "m"}, True),
        ({"code": -32022, "message": "m", "data": {"supported": [V]}}, True),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -32022, "message": "m"}}, True),
        ({"code": -32601, "message": "Method not found"}, False),  # a legacy child answers this too
        ({"code": -32602, "message": "m"}, False),
        ({"code": -32000, "message": "m"}, False),
        ({"code": "-32020"}, False),
        ({"code": -32020.0}, False),
        ({}, False),
        (None, False),
        ("-32022", False),
    ],
)
def test_recognised_modern_error(error: object, answer: bool) -> None:
    assert modern_rewrites.recognised_modern_error(error) is answer
