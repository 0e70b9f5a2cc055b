"""core/tasks: the tasks extension's pure decisions and the bounded holds of a pooled child."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, tasks

EXT = tasks.EXTENSION


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        ({}, False),
        ({"extensions": {}}, False),
        ({"extensions": {EXT: {}}}, True),
        ({"extensions": {EXT: {"anything": 1}}}, True),
        ({"extensions": {EXT: None}}, False),
        ({"extensions": {EXT: True}}, False),  # not an object
        ({"extensions": [EXT]}, False),
        ({"tasks": {}}, False),  # the 2025-11-25 slot is not the extension
        ({"elicitation": {}, "extensions": {"other/ext": {}}}, False),
    ],
)
def test_declares(capabilities: dict[str, Any], expected: bool) -> None:
    assert tasks.declares(capabilities) is expected


def test_missing_extension_is_the_extensions_32021() -> None:
    failure = tasks.missing_extension("tasks/get")
    assert (failure.status, failure.code) == (400, modern.MISSING_CLIENT_CAPABILITY) == (400, -32021)
    assert failure.data == {"requiredCapabilities": {"extensions": {EXT: {}}}}
    assert "tasks/get" in failure.message


@pytest.mark.parametrize("failure", [tasks.unknown_task(), tasks.unknown_task("x"), tasks.lost_task("gone")])
def test_unknown_and_lost_tasks_are_invalid_params(failure: modern.Failure) -> None:
    assert (failure.status, failure.code) == (400, jsonrpc.INVALID_PARAMS)


@pytest.mark.parametrize(
    ("params", "expected"),
    [({"taskId": "t1"}, "t1"), ({"taskId": ""}, None), ({"taskId": 5}, None), ({}, None), (None, None), ("x", None)],
)
def test_task_id(params: object, expected: str | None) -> None:
    assert tasks.task_id(params) == expected


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"resultType": "task", "taskId": "t", "status": "working"}, True),
        ({"resultType": "task"}, False),  # no taskId
        ({"resultType": "complete", "taskId": "t"}, False),
        ({"resultType": "input_required", "inputRequests": {}}, False),
        ({"task": {"taskId": "t"}}, False),  # the 2025-11-25 nested shape
        (None, False),
    ],
)
def test_is_created(result: object, expected: bool) -> None:
    assert tasks.is_created(result) is expected


@pytest.mark.parametrize(
    ("method", "result", "expected"),
    [
        ("tools/call", {"resultType": "task", "taskId": "t"}, True),
        ("tools/call", {"resultType": "complete", "content": []}, False),
        ("prompts/get", {"resultType": "task", "taskId": "t"}, False),  # not a request tasks may answer
        ("tasks/get", {"taskId": "t", "status": "working"}, True),
        ("tasks/cancel", {}, True),
        ("tasks/update", {"resultType": "complete"}, True),
    ],
)
def test_names_task(method: str, result: dict[str, Any], expected: bool) -> None:
    assert tasks.names_task(method, result) is expected


def test_with_task_id_copies() -> None:
    result = {"resultType": "task", "taskId": "child", "status": "working"}
    assert tasks.with_task_id(result, "wrapped") == {**result, "taskId": "wrapped"}
    assert result["taskId"] == "child"


@pytest.mark.parametrize(
    ("ttl", "limit", "expected"),
    [
        (60_000, 3600.0, 60.0),
        (7_200_000, 3600.0, 3600.0),  # capped
        (None, 3600.0, 3600.0),  # unlimited: the limit
        (0, 10.0, 10.0),
        (-5, 10.0, 10.0),
        (1.5, 10.0, 10.0),  # not an integer
        (True, 10.0, 10.0),
        ("60000", 10.0, 10.0),
    ],
)
def test_hold_for(ttl: object, limit: float, expected: float) -> None:
    assert tasks.hold_for({"ttlMs": ttl}, limit) == expected


def test_hold_for_absent_ttl() -> None:
    assert tasks.hold_for({}, 12.0) == 12.0


@pytest.mark.parametrize(
    ("status", "expected"),
    [("completed", True), ("failed", True), ("cancelled", True), ("working", False), ("input_required", False)],
)
def test_is_terminal(status: str, expected: bool) -> None:
    assert tasks.is_terminal({"status": status}) is expected


def test_holds_live_until_the_last_deadline() -> None:
    holds = tasks.Holds(4)
    assert not holds.live(0.0)
    holds.add("a", 10.0)
    holds.add("b", 20.0)
    assert holds.live(9.9) and holds.holds("a", 9.9)
    assert holds.live(10.0) and not holds.holds("a", 10.0) and len(holds) == 1
    assert not holds.live(20.0) and len(holds) == 0


def test_holds_a_later_deadline_wins_and_an_earlier_is_ignored() -> None:
    holds = tasks.Holds(4)
    holds.add("a", 10.0)
    holds.add("a", 30.0)
    holds.add("a", 5.0)
    assert holds.live(25.0) and holds.holds("a", 25.0)
    assert len(holds) == 1


def test_holds_bounded_the_first_due_goes() -> None:
    holds = tasks.Holds(2)
    assert holds.add("a", 30.0) is None
    assert holds.add("b", 10.0) is None
    assert holds.add("c", 20.0) == "b"
    assert len(holds) == 2 and holds.holds("a", 0.0) and holds.holds("c", 0.0)
    assert holds.add("a", 40.0) is None  # held already: no room needed


def test_holds_release() -> None:
    holds = tasks.Holds(2)
    holds.add("a", 10.0)
    holds.release("a")
    holds.release("never")
    assert not holds.live(0.0)


def test_holds_heap_stays_bounded() -> None:
    holds = tasks.Holds(3)
    for i in range(1000):
        holds.add("a", float(i + 1))
    assert len(holds) == 1 and len(holds._heap) <= 2 * len(holds) + 17


def test_holds_need_room_for_one() -> None:
    with pytest.raises(ValueError):
        tasks.Holds(0)
