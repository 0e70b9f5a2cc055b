"""core/mrtr: the MRTR pieces both bridges share."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, mrtr, subscriptions
from mcpgate.core.capabilities import INPUT_CAPABILITY


def request(method: str = "elicitation/create", params: Any = None, req_id: jsonrpc.Id = 7) -> jsonrpc.Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
    if params is not None:
        obj["params"] = params
    return jsonrpc.Request(req_id, method, params, obj)


@pytest.mark.parametrize(
    ("params", "taken", "counter", "expected"),
    [
        (None, (), 0, ("elicitation-1", 1)),
        ({"_meta": {mrtr.INPUT_KEY: "user_name"}}, (), 0, ("user_name", 0)),
        ({"_meta": {mrtr.INPUT_KEY: "user_name"}}, ("user_name",), 0, ("elicitation-1", 1)),  # taken: minted
        ({"_meta": {mrtr.INPUT_KEY: ""}}, (), 3, ("elicitation-4", 4)),  # empty: minted
        ({"_meta": {mrtr.INPUT_KEY: "x" * 129}}, (), 0, ("elicitation-1", 1)),  # too long: minted
        ({"_meta": {mrtr.INPUT_KEY: 5}}, (), 0, ("elicitation-1", 1)),  # not a string: minted
        ({"_meta": "nope"}, (), 0, ("elicitation-1", 1)),
        (None, ("elicitation-1", "elicitation-2"), 0, ("elicitation-3", 3)),  # skips keys in use
    ],
)
def test_input_key(params: Any, taken: tuple[str, ...], counter: int, expected: tuple[str, int]) -> None:
    assert mrtr.input_key(request(params=params), "elicitation", set(taken), counter) == expected


def test_input_required_result_lists_every_pending_request_and_the_state() -> None:
    pending = {"a": request(params={"message": "hi"}), "b": request("roots/list", req_id=8)}
    result = mrtr.input_required_result(pending, "mg1.state")
    assert result == {
        "resultType": "input_required",
        "inputRequests": {
            "a": {"method": "elicitation/create", "params": {"message": "hi"}},
            "b": {"method": "roots/list"},
        },
        "requestState": "mg1.state",
    }
    assert mrtr.is_input_required(result)
    assert "requestState" not in mrtr.input_required_result(pending, None)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"action": "accept", "content": {"name": "Ada"}}, {"action": "accept", "content": {"name": "Ada"}}),
        ({"resultType": "complete", "roots": []}, {"roots": []}),
        (12345, None),
        (None, None),
        ([{"action": "accept"}], None),
        ("accept", None),
    ],
)
def test_legacy_answer(answer: Any, expected: Any) -> None:
    assert mrtr.legacy_answer(answer) == expected


@pytest.mark.parametrize(
    ("result", "expected"),
    [({"resultType": "input_required"}, True), ({"resultType": "complete"}, False), ({}, False), (None, False)],
)
def test_is_input_required(result: Any, expected: bool) -> None:
    assert mrtr.is_input_required(result) is expected


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"name": "t", "inputResponses": {"a": {}}, "requestState": "s"}, {"name": "t"}),
        ({"name": "t", "requestState": "s"}, {"name": "t"}),
        ({"name": "t"}, {"name": "t"}),
        (None, None),
        ([1, 2], [1, 2]),
    ],
)
def test_without_mrtr(params: Any, expected: Any) -> None:
    before = repr(params)
    assert mrtr.without_mrtr(params) == expected
    assert repr(params) == before  # not changed


@pytest.mark.parametrize(
    ("params", "responses", "state", "expected"),
    [
        (
            {"name": "t"},
            {"k": {"action": "accept"}},
            "s1",
            {"name": "t", "inputResponses": {"k": {"action": "accept"}}, "requestState": "s1"},
        ),
        ({"name": "t"}, {"k": {}}, None, {"name": "t", "inputResponses": {"k": {}}}),  # no state given: none echoed
        (
            {"name": "t", "requestState": "old", "inputResponses": {"x": {}}},
            {},
            "new",
            {"name": "t", "requestState": "new"},
        ),
        (None, {}, None, {}),
        ({"name": "t"}, {}, 5, {"name": "t"}),  # a state that is not a string is not one
    ],
)
def test_retry_params(params: Any, responses: dict[str, Any], state: object, expected: dict[str, Any]) -> None:
    assert mrtr.retry_params(params, responses, state) == expected


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"inputRequests": {"a": {"method": "roots/list"}}}, {"a": ("roots/list", None)}),
        (
            {"inputRequests": {"e": {"method": "elicitation/create", "params": {"message": "hi"}}}},
            {"e": ("elicitation/create", {"message": "hi"})},
        ),
        ({"requestState": "s"}, {}),  # state only: nothing to ask
        ({"inputRequests": []}, None),
        ({"inputRequests": {"a": "roots/list"}}, None),
        ({"inputRequests": {"a": {"method": "tools/call"}}}, None),  # not an input method
        ({"inputRequests": {"a": {"method": "roots/list", "params": [1]}}}, None),
    ],
)
def test_input_requests(result: dict[str, Any], expected: Any) -> None:
    assert mrtr.input_requests(result) == expected


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "ask"}, "ask"),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "demo://readme", "name": "x"}, "demo://readme"),
        ("tools/list", {"name": "x"}, None),
        ("tools/call", None, None),
    ],
)
def test_call_name(method: str, params: Any, expected: object) -> None:
    assert mrtr.call_name(method, params) == expected


def test_state_binding_tells_calls_apart() -> None:
    ask = mrtr.state_binding("tools/call", {"name": "ask", "arguments": {"x": 1}})
    assert ask == mrtr.state_binding("tools/call", {"name": "ask", "arguments": {"x": 2}})  # the arguments may differ
    assert ask != mrtr.state_binding("tools/call", {"name": "other"})
    assert ask != mrtr.state_binding("prompts/get", {"name": "ask"})
    assert mrtr.state_binding("tools/call", {"name": "a\x00b"}) != mrtr.state_binding("tools/call", {"name": "a"})


@pytest.mark.parametrize(
    ("wanted", "level", "expected"),
    [
        ("info", "warning", True),
        ("info", "info", True),
        ("warning", "debug", False),
        (None, "emergency", False),  # no opt-in: nothing
        ("loud", "error", False),
        ("debug", "bogus", False),
    ],
)
def test_level_allows(wanted: object, level: object, expected: bool) -> None:
    assert mrtr.level_allows(wanted, level) is expected


SUB = "io.modelcontextprotocol/subscriptionId"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"_meta": {SUB: 3}, "uri": "a://b"}, {"uri": "a://b"}),
        ({"_meta": {SUB: 3, "k": 1}}, {"_meta": {"k": 1}}),
        ({"uri": "a://b"}, {"uri": "a://b"}),
        (None, None),
    ],
)
def test_without_subscription_id(params: Any, expected: Any) -> None:
    assert subscriptions.without_subscription_id(params) == expected


def test_bridged_capabilities_cover_every_input_method() -> None:
    assert set(mrtr.BRIDGED_CAPABILITIES) == set(INPUT_CAPABILITY.values())


INFO = "io.modelcontextprotocol/serverInfo"
FALLBACK = {"name": "relay", "version": "0"}


@pytest.mark.parametrize(
    ("discover", "requested", "expected"),
    [
        (
            {"capabilities": {"tools": {}}, "_meta": {INFO: {"name": "s", "version": "1"}}, "instructions": "hi"},
            "2025-06-18",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "s", "version": "1"},
                "instructions": "hi",
            },
        ),
        (  # a revision no handshake speaks: the latest; no serverInfo: the fallback
            {"capabilities": {}, "supportedVersions": ["2026-07-28"]},
            "2026-07-28",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": FALLBACK},
        ),
        (
            {"capabilities": "bad", "instructions": 5, "_meta": "bad"},
            None,
            {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": FALLBACK},
        ),
    ],
)
def test_initialize_from_discover(discover: dict[str, Any], requested: object, expected: dict[str, Any]) -> None:
    assert mrtr.initialize_from_discover(discover, requested, FALLBACK) == expected


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ({"toolsListChanged": True, "promptsListChanged": False}, (frozenset({"toolsListChanged"}), None)),
        ({"resourceSubscriptions": ["a://x", "a://y", "a://x"]}, (frozenset(), ("a://x", "a://y"))),
        ({}, (frozenset(), None)),
        ({"bogus": True}, (frozenset(), None)),  # unknown fields are not asked for
        ({"toolsListChanged": "yes"}, -32602),
        ({"resourceSubscriptions": "a://x"}, -32602),
        ({"resourceSubscriptions": [1]}, -32602),
        ([], -32602),
    ],
)
def test_parse_listen_filter(wanted: object, expected: object) -> None:
    parsed = subscriptions.parse_listen_filter(wanted)
    if isinstance(expected, int):
        assert isinstance(parsed, modern.Failure) and parsed.code == expected and parsed.status == 400
    else:
        assert parsed == expected


def test_listen_frame_and_end_carry_the_subscription_id() -> None:
    framed = subscriptions.listen_frame("notifications/resources/updated", {"uri": "a://x", "_meta": {"k": 1}}, "L")
    assert framed == {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "a://x", "_meta": {"k": 1, SUB: "L"}},
    }
    assert subscriptions.listen_frame("notifications/tools/list_changed", None, 7)["params"] == {"_meta": {SUB: 7}}
    assert subscriptions.listen_end(7) == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {"resultType": "complete", "_meta": {SUB: 7}},
    }
    assert subscriptions.without_subscription_id(framed["params"]) == {"uri": "a://x", "_meta": {"k": 1}}


def test_missing_capability_and_answered_result() -> None:
    """What both bridges to a modern server decide before asking a legacy client and with its answer."""
    asks: dict[str, tuple[str, dict[str, Any] | None]] = {
        "a": ("roots/list", None),
        "b": ("sampling/createMessage", {}),
    }
    assert mrtr.missing_capability(asks, {"roots": {}, "sampling": {}}) is None
    assert mrtr.missing_capability(asks, {"roots": {}}) == ("sampling/createMessage", {"sampling": {}})
    assert mrtr.answered_result({"result": {"roots": []}}) == {"roots": []}
    assert mrtr.answered_result({"error": {"code": -1, "message": "no"}}) == "no"
    assert mrtr.answered_result({}) == "no result"


def test_bridged_filter_asks_for_what_the_server_declares() -> None:
    """The listen both bridges to a modern server open for a legacy client."""
    declared = {"tools": {"listChanged": True}, "resources": {}, "logging": {}}
    assert subscriptions.bridged_filter(declared, []) == {"toolsListChanged": True, "resourcesListChanged": True}
    assert subscriptions.bridged_filter(None, ["a://x"]) == {"resourceSubscriptions": ["a://x"]}
