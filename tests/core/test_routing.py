"""Router: which stream each message from the child belongs to."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Id, Notification, Request, Response, parse
from mcpgate.core.routing import BUFFER, DROP, Buffer, Drop, DuplicateRequestId, Route, Router


def msg(obj: dict[str, Any]) -> Any:
    message = parse(json.dumps({"jsonrpc": "2.0", **obj}).encode())
    assert isinstance(message, (Request, Notification, Response)), message
    return message


def request(request_id: Id, token: Id | None = None, method: str = "tools/call") -> Request:
    params: dict[str, Any] = {"name": "x"}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    message = msg({"id": request_id, "method": method, "params": params})
    assert isinstance(message, Request)
    return message


def response(request_id: Id | None, error: bool = False) -> Response:
    body: dict[str, Any] = {"error": {"code": -1, "message": "x"}} if error else {"result": {}}
    message = msg({"id": request_id, **body})
    assert isinstance(message, Response)
    return message


def progress(token: Any) -> Notification:
    message = msg({"method": "notifications/progress", "params": {"progressToken": token, "progress": 1}})
    assert isinstance(message, Notification)
    return message


def new_router() -> Router[str]:
    return Router(CancelTracker(ttl=30.0))


@pytest.mark.parametrize("request_id", [1, "1", 0, "", "abc", 2**70])
def test_response_goes_to_its_stream_and_completes(request_id: Id) -> None:
    router = new_router()
    router.open_stream("post-A")
    router.open_request(request(request_id), "post-A")
    router.open_stream("post-B")
    router.open_request(request("other"), "post-B")
    assert router.route(response(request_id), 0.0) == Route("post-A", done=True)
    assert router.in_flight == 1
    again = router.route(response(request_id), 0.0)
    assert again.target is DROP and not again.done


@pytest.mark.parametrize("error", [False, True])
def test_error_response_also_completes(error: bool) -> None:
    router = new_router()
    router.open_request(request(7), "s")
    assert router.route(response(7, error=error), 0.0) == Route("s", done=True)


def test_error_response_without_id_is_dropped() -> None:
    router = new_router()
    router.open_request(request(1), "s")
    route = router.route(response(None, error=True), 0.0)
    assert route.target is DROP and route.reason
    assert router.in_flight == 1


@pytest.mark.parametrize(
    ("first", "second", "duplicate"),
    [
        (1, 1, True),
        ("1", "1", True),
        ("1", 1, False),
        (1, "1", False),
        (0, "", False),
        (0, "0", False),
    ],
)
def test_duplicate_in_flight_id_refused(first: Id, second: Id, duplicate: bool) -> None:
    router = new_router()
    router.open_request(request(first), "a")
    if duplicate:
        with pytest.raises(DuplicateRequestId) as info:
            router.open_request(request(second), "b")
        assert info.value.request_id == second
        assert router.in_flight == 1
        assert router.route(response(first), 0.0).target == "a"  # the original is untouched
    else:
        router.open_request(request(second), "b")
        assert router.in_flight == 2


def test_same_id_after_completion_is_fine() -> None:
    router = new_router()
    router.open_request(request(1), "a")
    assert router.route(response(1), 0.0).target == "a"
    router.open_request(request(1), "b")
    assert router.route(response(1), 1.0) == Route("b", done=True)


def test_string_and_int_ids_are_different_requests() -> None:
    router = new_router()
    router.open_request(request("1"), "str-stream")
    router.open_request(request(1), "int-stream")
    assert router.route(response(1), 0.0).target == "int-stream"
    assert router.route(response("1"), 0.0).target == "str-stream"
    assert router.in_flight == 0


@pytest.mark.parametrize(
    ("token", "sent_token", "target"),
    [
        pytest.param("tok", "tok", "owner", id="string-token"),
        pytest.param(5, 5, "owner", id="int-token"),
        pytest.param(5, "5", DROP, id="int-token-string-progress"),
        pytest.param("5", 5, DROP, id="string-token-int-progress"),
        pytest.param("tok", "other", DROP, id="unknown-token"),
        pytest.param("tok", None, DROP, id="null-token"),
        pytest.param(1, True, DROP, id="bool-token"),
        pytest.param(1, 1.0, DROP, id="float-token"),
        pytest.param(None, 1, DROP, id="request-had-no-token"),
    ],
)
def test_progress_goes_to_owning_stream(token: Id | None, sent_token: Any, target: str | Drop) -> None:
    router = new_router()
    router.open_stream("get")
    router.get_stream = "get"
    router.open_stream("owner")
    router.open_request(request(1, token), "owner")
    route = router.route(progress(sent_token), 0.0)
    assert route.target == target
    if target is DROP:
        assert route.reason


def test_progress_after_response_is_dropped() -> None:
    router = new_router()
    router.open_request(request(1, "tok"), "owner")
    router.route(response(1), 0.0)
    assert router.route(progress("tok"), 0.0).target is DROP


def test_progress_without_params_is_dropped() -> None:
    router = new_router()
    router.open_request(request(1, "tok"), "owner")
    bare = msg({"method": "notifications/progress"})
    assert router.route(bare, 0.0).target is DROP


def test_reused_progress_token_stays_with_first_owner() -> None:
    router = new_router()
    router.open_request(request(1, "tok"), "first")
    router.open_request(request(2, "tok"), "second")
    assert router.route(progress("tok"), 0.0).target == "first"
    router.route(response(1), 0.0)
    assert router.route(progress("tok"), 0.0).target is DROP
    assert router.route(response(2), 0.0).target == "second"


SERVER_REQUEST = {"id": "srv-1", "method": "sampling/createMessage", "params": {}}
LOG = {"method": "notifications/message", "params": {"level": "info", "data": "x"}}
LIST_CHANGED = {"method": "notifications/tools/list_changed"}


@pytest.mark.parametrize("message", [SERVER_REQUEST, LOG, LIST_CHANGED], ids=["server-request", "log", "list-changed"])
@pytest.mark.parametrize(
    ("get_stream", "open_streams", "closed", "target"),
    [
        pytest.param("get", ["p1", "p2"], [], "get", id="get-stream-wins"),
        pytest.param("get", [], [], "get", id="get-stream-only"),
        pytest.param(None, ["p1", "p2"], [], "p2", id="newest-open-request-stream"),
        pytest.param(None, ["p1", "p2"], ["p2"], "p1", id="newest-closed-falls-back"),
        pytest.param(None, ["p1"], ["p1"], BUFFER, id="all-closed-buffer"),
        pytest.param(None, [], [], BUFFER, id="nothing-open-buffer"),
        pytest.param("get", ["p1"], ["get"], "p1", id="get-closed-falls-back"),
        pytest.param("get", [], ["get"], BUFFER, id="get-closed-nothing-else"),
    ],
)
def test_general_routing(
    message: dict[str, Any], get_stream: str | None, open_streams: list[str], closed: list[str], target: str | Buffer
) -> None:
    router = new_router()
    for stream in open_streams:
        router.open_stream(stream)
    if get_stream is not None:
        router.open_stream(get_stream)
        router.get_stream = get_stream
    for stream in closed:
        router.close_stream(stream)
    route = router.route(msg(message), 0.0)
    assert route == Route(target)
    assert router.general_target() == target


def test_close_stream_of_get_stream() -> None:
    router = new_router()
    router.open_stream("get")
    router.get_stream = "get"
    router.close_stream("get")
    assert router.get_stream is None
    assert router.general_target() is BUFFER
    router.close_stream("get")  # closing twice is harmless
    router.close_stream("never-opened")


def test_closing_another_stream_keeps_get_stream() -> None:
    router = new_router()
    router.get_stream = "get"
    router.open_stream("p1")
    router.close_stream("p1")
    assert router.get_stream == "get"


@pytest.mark.parametrize(
    ("late_at", "target"),
    [
        pytest.param(0.0, DROP, id="at-once"),
        pytest.param(29.0, DROP, id="inside-ttl"),
        pytest.param(31.0, DROP, id="after-ttl-still-no-request"),
    ],
)
def test_cancel_returns_stream_and_late_response_is_dropped(late_at: float, target: Drop) -> None:
    router = new_router()
    router.open_request(request(9, "tok"), "s")
    assert router.cancel(9, 0.0) == "s"
    assert router.in_flight == 0
    assert router.route(progress("tok"), 0.0).target is DROP
    late = router.route(response(9), late_at)
    assert late.target == target and not late.done
    expected_reason = "cancelled" if late_at < 30.0 else "no request"
    assert expected_reason in late.reason


def test_cancel_unknown_or_twice_returns_none() -> None:
    router = new_router()
    assert router.cancel(1, 0.0) is None
    router.open_request(request(1), "s")
    assert router.cancel("1", 0.0) is None  # a different id
    assert router.cancel(1, 0.0) == "s"
    assert router.cancel(1, 0.0) is None


def test_reusing_a_cancelled_id_routes_the_new_response() -> None:
    router = new_router()
    router.open_request(request(3), "old")
    router.cancel(3, 0.0)
    router.open_request(request(3), "new")
    assert router.route(response(3), 1.0) == Route("new", done=True)
    assert router.route(response(3), 1.0).target is DROP


def test_abandon_all_lists_waiting_ids() -> None:
    router = new_router()
    router.open_request(request(1, "t1"), "a")
    router.open_request(request("1"), "b")
    router.open_request(request(2), "a")
    router.route(response(2), 0.0)
    router.open_request(request(3), "c")
    router.cancel(3, 0.0)
    waiting = router.abandon_all()
    assert sorted(waiting, key=repr) == sorted([(1, "a"), ("1", "b")], key=repr)
    assert [type(i) for i, _ in waiting] == [int, str]
    assert router.in_flight == 0
    assert router.abandon_all() == []
    assert router.route(progress("t1"), 0.0).target is DROP


@pytest.mark.parametrize("name", ["buffer", "drop", "BUFFER", "DROP"])
def test_a_stream_named_like_a_target_is_still_a_stream(name: str) -> None:
    router = new_router()
    router.open_stream(name)
    router.open_request(request(1), name)
    assert router.general_target() == name and router.general_target() is not BUFFER
    answered = router.route(response(1), 0.0)
    assert answered.target is not DROP and answered.target == name and answered.done
    router.close_stream(name)
    assert router.general_target() is BUFFER


def test_the_targets_are_singletons_of_their_own_types() -> None:
    assert isinstance(BUFFER, Buffer) and isinstance(DROP, Drop)
    targets: tuple[object, ...] = (BUFFER, DROP)
    assert "buffer" not in targets and "drop" not in targets


@pytest.mark.parametrize("stream", ["post-A", "", 0, ("a", 1), frozenset({"x"})])
@pytest.mark.parametrize("request_id", [1, "1", 2**70])
def test_a_requests_route_made_without_its_new_is_the_one_its_class_makes(stream: Any, request_id: Id) -> None:
    router: Router[Any] = Router(CancelTracker(ttl=30.0))
    router.open_request(request(request_id), stream)
    route = router.route(response(request_id), 0.0)
    made = Route(stream, "", True)
    assert type(route) is Route
    assert route == made == Route(stream, done=True)
    assert (route.target, route.reason, route.done) == (made.target, made.reason, made.done) == (stream, "", True)
    assert repr(route) == repr(made)


@pytest.mark.parametrize(
    "meta",
    [
        {"progressToken": "tok"},
        {"progressToken": 7, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {"progressToken": True},
        {"progressToken": None},
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        {},
        None,
        "tok",
    ],
)
def test_a_requests_progress_token_is_the_one_progress_token_reads(meta: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """open_request routes the token jsonrpc.progress_token reads (the general path), and asks it only when _meta
    holds a progressToken key (a traced request's _meta holds its traceparent alone)."""
    from mcpgate.core import jsonrpc, routing

    message = msg({"id": 1, "method": "tools/call", "params": {"name": "x", "_meta": meta}})
    asked: list[Any] = []

    def counted(request: Request) -> Any:
        asked.append(request.id)
        return jsonrpc.progress_token(request)

    monkeypatch.setattr(routing, "progress_token", counted)
    router = new_router()
    router.open_stream("owner")
    router.open_request(message, "owner")
    token = jsonrpc.progress_token(message)
    assert router._tokens == ({("n", 1): jsonrpc.id_key(token)} if token is not None else {})
    assert asked == ([1] if isinstance(meta, dict) and "progressToken" in meta else [])
