"""The rewrites between the eras of mcpgate.core.modern_rewrites: a legacy child's params, a 2026-07-28 result's
stamp, the DiscoverResult made of an InitializeResult, and how a 2026-07-28 peer's answers are recognised."""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import msgspec
import pytest

from mcpgate.core import jsonrpc, modern, modern_rewrites, wire

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


# -- a child request's params written by a fast encoder (msgspec's, as the worker gives it) ------------------------

FAST = msgspec.json.Encoder().encode
FLOATS = [0.0, -0.0, 1.5, 0.1, 1e16, 1e15, 1e-05, 1e-04, 2.5e-07, 1.5e300, 5e-324, 1.7976931348623157e308, -1e22]
FAST_PARAMS: list[Any] = [
    {"name": "echo", "arguments": {"message": "hello"}},
    {},
    {"name": "été 😀 \u2028\u2029 \x7f", "arguments": {"t": '\x00\x01\x1f\n\r\t\b\f"\\/'}},
    {"arguments": {"big": 2**64, "small": -(2**63) - 1, "huge": 10**40, "flags": [True, False]}},
    {"arguments": {"nested": [[[{"a": []}]], {}], "k\u00e9y\n": 1}},
    *({"arguments": {"x": value}} for value in FLOATS),
    {"arguments": {"none": None}},  # a null: json's bytes (the same)
    {"arguments": {"past": float("inf"), "below": -float("inf")}},  # 1e400 decoded by json: json's Infinity kept
    {"arguments": {"nan": float("nan")}},
    {"arguments": {"lone": "\ud800"}},  # json escapes the whole text as ASCII; msgspec refuses it
    {"_meta": {"progressToken": "mcpgate-p1"}, "name": "x"},
]


def same(a: Any, b: Any) -> bool:
    """The same decoded JSON: equal values of the same types, a float's sign and a NaN included, keys in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def holds_float(value: Any) -> bool:
    if isinstance(value, dict):
        return any(holds_float(item) for item in value.values())
    if isinstance(value, list):
        return any(holds_float(item) for item in value)
    return isinstance(value, float)


def check_fast(params: Any) -> None:
    expected = modern_rewrites.child_request("mcpgate-7", "tools/call", params)  # json's, as before
    got = modern_rewrites.child_request("mcpgate-7", "tools/call", params, FAST)
    if not holds_float(params):
        assert got == expected
    else:
        assert same(json.loads(got), json.loads(expected)), (got, expected)
    assert json.loads(got)["id"] == "mcpgate-7"


@pytest.mark.parametrize("params", FAST_PARAMS)
def test_fast_params_decode_as_json_s(params: Any) -> None:
    check_fast(params)


def test_fast_params_are_taken_unless_json_s_must_be() -> None:
    """The fast bytes are the ones sent when they can be (the table above would pass with json's alone)."""
    plain = {"name": "echo", "arguments": {"x": 1e16}}
    assert modern_rewrites.child_request("m", "tools/call", plain, FAST).endswith(FAST(plain) + b"}")
    assert FAST(plain) != jsonrpc.encode(plain)
    for kept in ({"x": float("inf")}, {"x": "\udfff"}):
        assert modern_rewrites.child_request("m", "tools/call", kept, FAST).endswith(jsonrpc.encode(kept) + b"}")


def text(rng: random.Random) -> str:
    """ASCII, controls and any code point of the first planes (a lone surrogate too)."""
    return "".join(chr(rng.choice([rng.randrange(0x80), rng.randrange(0x11000)])) for _ in range(rng.randrange(9)))


def generated(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.choice([rng.randrange(-1000, 1000), rng.getrandbits(70) - 2**69])
    if kind == 2:
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]  # any double, NaN and inf too
    if kind == 3:
        return rng.choice([rng.uniform(-1e6, 1e6), rng.uniform(-1e-3, 1e-3), float(rng.getrandbits(60))])
    if kind in (4, 5):
        return text(rng)
    if kind in (6, 7):
        return {text(rng) + str(i): generated(rng, depth + 1) for i in range(rng.randrange(4))}
    return [generated(rng, depth + 1) for _ in range(rng.randrange(4))]


def test_generated_params_decode_as_json_s() -> None:
    rng = random.Random(2026)
    for _ in range(3000):
        check_fast({"name": "t", "arguments": {"v": generated(rng)}})
