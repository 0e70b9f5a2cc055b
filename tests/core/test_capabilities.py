"""The client capabilities of the 2026-07-28 era (mcpgate.core.capabilities): what a request declares, what an
input request needs, and rung 4's error, as tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core import capabilities, jsonrpc, wire
from mcpgate.core.jsonrpc import Request

META = {
    wire.META_PROTOCOL_VERSION: "2026-07-28",
    wire.META_CLIENT_INFO: {"name": "t", "version": "1"},
    wire.META_CLIENT_CAPABILITIES: {},
}
DROP = object()  # "send no params"


def request(params: Any) -> Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    if params is not DROP:
        obj["params"] = params
    parsed = jsonrpc.parse(json.dumps(obj))
    assert isinstance(parsed, Request)
    return parsed


@pytest.mark.parametrize(
    ("params", "declared"),
    [
        ({"_meta": META}, {}),
        ({"_meta": {**META, wire.META_CLIENT_CAPABILITIES: {"sampling": {}}}}, {"sampling": {}}),
        ({"_meta": {**META, wire.META_CLIENT_CAPABILITIES: ["sampling"]}}, {}),
        (DROP, {}),
    ],
)
def test_client_capabilities(params: Any, declared: dict[str, Any]) -> None:
    assert capabilities.client_capabilities(request(params)) == declared


@pytest.mark.parametrize(
    ("needed", "declared", "missing"),
    [
        (["sampling"], {}, {"sampling": {}}),
        (["sampling"], {"sampling": {}}, {}),
        (["elicitation/create"], {}, {"elicitation": {}}),
        (["elicitation/create", "roots/list"], {"elicitation": {"form": {}}}, {"roots": {}}),
        (["sampling/createMessage", "sampling"], {}, {"sampling": {}}),
        (["roots"], {"roots": None}, {"roots": {}}),
        ([], {}, {}),
    ],
)
def test_missing_capabilities(needed: list[str], declared: dict[str, Any], missing: dict[str, Any]) -> None:
    assert capabilities.missing_capabilities(needed, declared) == missing


def test_capability_failure_is_the_schema_error() -> None:
    failure = capabilities.capability_failure({"sampling": {}})
    assert (failure.status, failure.code) == (400, -32021)
    assert failure.data == {"requiredCapabilities": {"sampling": {}}}  # conformance: an object, not a list
    assert "sampling" in failure.message


@pytest.mark.parametrize(
    ("method", "params", "needed"),
    [
        ("elicitation/create", {"message": "m", "requestedSchema": {}}, {"elicitation": {"form": {}}}),
        ("elicitation/create", {"mode": "form"}, {"elicitation": {"form": {}}}),
        ("elicitation/create", {"mode": "url", "url": "https://x"}, {"elicitation": {"url": {}}}),
        ("sampling/createMessage", {"messages": [], "maxTokens": 1}, {"sampling": {}}),
        ("sampling/createMessage", {"messages": [], "tools": [{"name": "t"}]}, {"sampling": {"tools": {}}}),
        ("roots/list", None, {"roots": {}}),
        ("tools/call", {}, {}),
    ],
)
def test_input_requirement(method: str, params: Any, needed: dict[str, Any]) -> None:
    assert capabilities.input_requirement(method, params) == needed


@pytest.mark.parametrize(
    ("method", "params", "declared", "missing"),
    [
        ("elicitation/create", {}, {}, {"elicitation": {"form": {}}}),
        ("elicitation/create", {}, {"elicitation": {}}, {}),  # {} means form mode
        ("elicitation/create", {}, {"elicitation": {"form": {}}}, {}),
        ("elicitation/create", {}, {"elicitation": {"url": {}}}, {"elicitation": {"form": {}}}),
        ("elicitation/create", {"mode": "url"}, {"elicitation": {}}, {"elicitation": {"url": {}}}),
        ("elicitation/create", {"mode": "url"}, {"elicitation": {"url": {}}}, {}),
        ("elicitation/create", {}, {"elicitation": True}, {"elicitation": {"form": {}}}),
        ("sampling/createMessage", {}, {}, {"sampling": {}}),
        ("sampling/createMessage", {}, {"sampling": {}}, {}),
        ("sampling/createMessage", {"tools": [{}]}, {"sampling": {}}, {"sampling": {"tools": {}}}),
        ("sampling/createMessage", {"tools": [{}]}, {"sampling": {"tools": {}}}, {}),
        ("roots/list", {}, {"roots": {"listChanged": True}}, {}),
        ("roots/list", {}, {"sampling": {}}, {"roots": {}}),
        ("tools/list", {}, {}, {}),
    ],
)
def test_missing_for_input(method: str, params: Any, declared: dict[str, Any], missing: dict[str, Any]) -> None:
    assert capabilities.missing_for_input(method, params, declared) == missing


def test_input_tables() -> None:
    assert {"elicitation/create", "sampling/createMessage", "roots/list"} == capabilities.INPUT_METHODS
    assert set(capabilities.INPUT_CAPABILITY.values()) == {"elicitation", "sampling", "roots"}
