"""core/mrtr: the MRTR pieces both bridges share."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import jsonrpc, mrtr


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
