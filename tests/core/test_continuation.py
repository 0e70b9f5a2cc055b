"""core/continuation: the MRTR continuation machine, driven through scripted steps (time, event, the actions
expected), one table row per scenario."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core import jsonrpc, modern, mrtr
from mcpgate.core.continuation import (
    BAD_ANSWER,
    BAD_RESPONSES,
    ENDED,
    EXPIRED,
    LEFT_OVER,
    OTHER_REQUEST,
    TOO_MANY,
    AnswerChild,
    AskClient,
    Asked,
    CancelCall,
    Cancelled,
    Continuation,
    Deliver,
    Event,
    Finished,
    Forget,
    Limits,
    Phase,
    RefuseChild,
    RefuseRetry,
    Resumed,
    Retried,
    Tick,
    Withdrawn,
    no_candidate,
)

TTL = 10.0
LIMITS = Limits(input_ttl=TTL, gather=0.05, max_pending=2, withdraw_grace=1.0)
ALL: dict[str, Any] = {"elicitation": {}, "sampling": {}, "roots": {}}
GRACE = {"action": "accept", "content": {"name": "Grace"}}


def ask(req_id: jsonrpc.Id, method: str = "elicitation/create", params: Any = None) -> jsonrpc.Request:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id, "method": method}
    if params is not None:
        obj["params"] = params
    return jsonrpc.Request(req_id, method, params, obj)


A, B, C = ask("a"), ask("b"), ask("c", "roots/list")
NAMED = ask("n", params={"_meta": {mrtr.INPUT_KEY: "user_name"}})
URL = ask("u", params={"mode": "url", "url": "https://example.com/x"})
TOOLS = ask("t", "sampling/createMessage", {"messages": [], "tools": [{"name": "x"}]})


def refused_undeclared(request: jsonrpc.Request, missing: dict[str, Any]) -> RefuseChild:
    message = f"the client did not declare the {', '.join(missing)} capability for this request"
    return RefuseChild(request.id, modern.MISSING_CLIENT_CAPABILITY, message, {"requiredCapabilities": missing})


Step = tuple[float, Event[str], list[Any]]
PARK_A: list[Step] = [(0.0, Asked(A), []), (0.05, Tick(), [AskClient(1, {"elicitation-1": A})])]
PARK_AB: list[Step] = [
    (0.0, Asked(A), []),
    (0.01, Asked(B), []),
    (0.04, Tick(), []),  # early: the window is still open
    (0.05, Tick(), [AskClient(1, {"elicitation-1": A, "elicitation-2": B})]),
]

SCENARIOS: list[Any] = [
    pytest.param(PARK_AB, Phase.PARKED, 0.05 + TTL, id="a-round-gathers-every-request-of-the-window"),
    pytest.param(
        [
            *PARK_AB,
            (
                1.0,
                Retried(1, {"elicitation-1": GRACE, "elicitation-2": {"resultType": "complete"}}),
                [Resumed(), AnswerChild("a", GRACE), AnswerChild("b", {})],
            ),
        ],
        Phase.RUNNING,
        None,
        id="a-retry-answers-each-request-without-resultType",
    ),
    pytest.param(
        [
            *PARK_AB,
            (
                1.0,
                Retried(1, {"elicitation-2": GRACE}),
                [Resumed(), AnswerChild("b", GRACE), AskClient(2, {"elicitation-1": A})],
            ),
        ],
        Phase.PARKED,
        1.0 + TTL,
        id="what-a-retry-leaves-unanswered-is-asked-again-at-once",
    ),
    pytest.param(
        [
            *PARK_A,
            (
                1.0,
                Retried(1, {"elicitation-1": "yes"}),
                [Resumed(), RefuseChild("a", jsonrpc.INVALID_PARAMS, BAD_ANSWER)],
            ),
        ],
        Phase.RUNNING,
        None,
        id="an-answer-that-is-no-object-is-refused-to-the-child",
    ),
    pytest.param(
        [*PARK_A, (1.0, Retried(1, None), [Resumed(), AskClient(2, {"elicitation-1": A})])],
        Phase.PARKED,
        1.0 + TTL,
        id="a-retry-without-answers-is-asked-again",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Retried(1, [GRACE]), [RefuseRetry(BAD_RESPONSES)]),
            (2.0, Retried(1, {"elicitation-1": GRACE}), [Resumed(), AnswerChild("a", GRACE)]),
        ],
        Phase.RUNNING,
        None,
        id="responses-not-an-object-refuse-the-retry-only",
    ),
    pytest.param(
        [*PARK_A, (1.0, Retried(2, {}), [RefuseRetry(ENDED)]), (1.0, Retried(0, {}), [RefuseRetry(ENDED)])],
        Phase.PARKED,
        0.05 + TTL,
        id="another-round-is-refused",
    ),
    pytest.param(
        [*PARK_A, (1.0, Retried(1, {}, same_request=False), [RefuseRetry(OTHER_REQUEST)])],
        Phase.PARKED,
        0.05 + TTL,
        id="another-request-is-refused",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Retried(1, {"elicitation-1": GRACE}), [Resumed(), AnswerChild("a", GRACE)]),
            (1.5, Retried(1, {"elicitation-1": GRACE}), [RefuseRetry(ENDED)]),
        ],
        Phase.RUNNING,
        None,
        id="a-state-is-used-once",
    ),
    pytest.param([(0.0, Retried(0, {}), [RefuseRetry(ENDED)])], Phase.RUNNING, None, id="a-running-call-has-no-retry"),
    pytest.param(
        [(0.0, Finished("result"), [Deliver("result"), Forget()]), (1.0, Finished("late"), [])],
        Phase.ENDED,
        None,
        id="finished-running-delivers-once",
    ),
    pytest.param(
        [
            (0.0, Asked(A), []),
            (0.01, Finished("result"), [Deliver("result"), Forget()]),
            (0.05, Tick(), []),
            (1.01, Tick(), [RefuseChild("a", jsonrpc.REQUEST_CANCELLED, LEFT_OVER)]),
        ],
        Phase.ENDED,
        None,
        id="finished-in-the-window-never-asks-and-refuses-the-left-over-after-the-grace",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Finished("result"), []),
            (2.0, Tick(), [RefuseChild("a", jsonrpc.REQUEST_CANCELLED, LEFT_OVER)]),
            (3.0, Retried(1, {"elicitation-1": GRACE}), [Resumed(), Deliver("result"), Forget()]),
        ],
        Phase.ENDED,
        None,
        id="finished-parked-is-held-for-the-retry",
    ),
    pytest.param(
        [
            *PARK_A,
            (0.05 + TTL, Tick(), [CancelCall(EXPIRED), Forget()]),
            (1.05 + TTL, Tick(), [RefuseChild("a", jsonrpc.REQUEST_CANCELLED, LEFT_OVER)]),
            (2.0 + TTL, Retried(1, {}), [RefuseRetry(ENDED)]),
        ],
        Phase.ENDED,
        None,
        id="nobody-retries-within-the-ttl-the-call-is-cancelled",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Finished("result"), []),
            (0.05 + TTL, Tick(), [RefuseChild("a", jsonrpc.REQUEST_CANCELLED, LEFT_OVER), Forget()]),
        ],
        Phase.ENDED,
        None,
        id="an-answered-call-expires-without-a-cancel",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Withdrawn("a"), []),
            (1.5, Cancelled("evicted"), [CancelCall("evicted"), Forget()]),
            (3.0, Tick(), []),
            (4.0, Cancelled("again"), []),
        ],
        Phase.ENDED,
        None,
        id="cancelled-parked-once-nothing-left-over-after-a-withdrawal",
    ),
    pytest.param(
        [(0.0, Asked(A), []), (0.01, Withdrawn("a"), []), (0.05, Tick(), [])],
        Phase.RUNNING,
        None,
        id="a-withdrawn-request-is-never-asked",
    ),
    pytest.param(
        [*PARK_A, (1.0, Cancelled("gone"), [CancelCall("gone"), Forget()]), (1.5, Withdrawn("a"), [])],
        Phase.ENDED,
        None,
        id="a-left-over-request-withdrawn-is-not-refused",
    ),
    pytest.param(
        [
            *PARK_A,
            (1.0, Asked(B), []),
            (1.0, Asked(C), [RefuseChild("c", jsonrpc.INTERNAL_ERROR, TOO_MANY)]),
            (
                2.0,
                Retried(1, {"elicitation-1": GRACE}),
                [Resumed(), AnswerChild("a", GRACE), AskClient(2, {"elicitation-2": B})],
            ),
        ],
        Phase.PARKED,
        2.0 + TTL,
        id="asked-while-parked-waits-for-the-retry-bounded",
    ),
    pytest.param(
        [(0.0, Asked(NAMED), []), (0.05, Tick(), [AskClient(1, {"user_name": NAMED})])],
        Phase.PARKED,
        0.05 + TTL,
        id="a-child-may-name-its-key",
    ),
    pytest.param(
        [(0.0, Finished("result"), [Deliver("result"), Forget()]), (0.1, Asked(A), [no_candidate(A)])],
        Phase.ENDED,
        None,
        id="asked-after-the-end-as-if-there-were-no-call",
    ),
    pytest.param(
        [
            (0.0, Asked(URL), [refused_undeclared(URL, {"elicitation": {"url": {}}})]),
            (0.0, Asked(TOOLS), [refused_undeclared(TOOLS, {"sampling": {"tools": {}}})]),
        ],
        Phase.RUNNING,
        None,
        id="a-mode-or-tools-the-client-did-not-declare-is-refused",
    ),
]


@pytest.mark.parametrize(("steps", "phase", "deadline"), SCENARIOS)
def test_scenario(steps: list[Step], phase: Phase, deadline: float | None) -> None:
    machine: Continuation[str] = Continuation(LIMITS, ALL)
    for now, event, expected in steps:
        assert machine.handle(event, now) == expected, (now, event)
    assert machine.phase is phase
    assert machine.deadline == pytest.approx(deadline) if deadline is not None else machine.deadline is None


@pytest.mark.parametrize(
    ("capabilities", "request_", "expected"),
    [
        pytest.param({}, A, [refused_undeclared(A, {"elicitation": {"form": {}}})], id="nothing-declared"),
        pytest.param({"sampling": {}}, C, [refused_undeclared(C, {"roots": {}})], id="another-declared"),
        pytest.param(
            {"elicitation": {"url": {}}},
            A,
            [refused_undeclared(A, {"elicitation": {"form": {}}})],
            id="url-only-is-no-form",
        ),
        pytest.param({"elicitation": {"form": {}, "url": {}}}, URL, [], id="url-declared"),
        pytest.param({"sampling": {"tools": {}}}, TOOLS, [], id="tools-declared"),
    ],
)
def test_capabilities(capabilities: dict[str, Any], request_: jsonrpc.Request, expected: list[Any]) -> None:
    machine: Continuation[str] = Continuation(LIMITS, capabilities)
    assert machine.handle(Asked(request_), 0.0) == expected


@pytest.mark.parametrize(
    ("answers", "asks", "expected", "pending"),
    [
        pytest.param({"elicitation-1": GRACE}, [A], [[AnswerChild("a", GRACE)]], [], id="minted-key"),
        pytest.param(
            {"user_name": GRACE},
            [NAMED, NAMED],
            [[AnswerChild("n", GRACE)], []],
            ["user_name"],
            id="each-answer-used-once",
        ),
        pytest.param({"elicitation-1": "no"}, [A], [[]], ["elicitation-1"], id="not-an-object-is-asked"),
        pytest.param(
            {"elicitation-2": GRACE}, [A, B], [[], [AnswerChild("b", GRACE)]], ["elicitation-1"], id="only-its-own-key"
        ),
    ],
)
def test_answers_carried_ahead(
    answers: dict[str, Any], asks: list[jsonrpc.Request], expected: list[list[Any]], pending: list[str]
) -> None:
    machine: Continuation[str] = Continuation(LIMITS, ALL, dict(answers))
    assert [machine.handle(Asked(request), 0.0) for request in asks] == expected
    assert list(machine.pending) == pending


def test_answers_carried_ahead_are_forgotten_at_the_first_retry() -> None:
    machine: Continuation[str] = Continuation(LIMITS, ALL, {"elicitation-2": GRACE})
    machine.handle(Asked(A), 0.0)
    assert machine.handle(Tick(), 0.05) == [AskClient(1, {"elicitation-1": A})]
    machine.handle(Retried(1, {"elicitation-1": GRACE}), 1.0)
    assert machine.handle(Asked(B), 1.0) == [] and list(machine.pending) == ["elicitation-2"]


def test_the_pending_requests_a_round_asks_for_are_a_snapshot() -> None:
    machine: Continuation[str] = Continuation(LIMITS, ALL)
    machine.handle(Asked(A), 0.0)
    (asked,) = machine.handle(Tick(), 0.05)
    machine.handle(Asked(B), 1.0)
    assert isinstance(asked, AskClient) and list(asked.requests) == ["elicitation-1"]
    assert machine.parked_at == 0.05 and machine.parked


def test_no_candidate_names_the_capability() -> None:
    assert no_candidate(C) == refused_undeclared(C, {"roots": {}})
