"""The router's shortcuts against the full reading: a request's id key and progress token as jsonrpc reads them,
and the route a response takes, made when its request was sent, equal to the one made for it."""

from __future__ import annotations

from typing import Any

import pytest

from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Id, Notification, Request, Response, id_key, progress_token
from mcpgate.core.routing import DROP, Route, Router

PARAMS: list[Any] = [
    None,
    [],
    [1, 2],
    "text",
    {},
    {"name": "x"},
    {"_meta": None},
    {"_meta": []},
    {"_meta": {}},
    {"_meta": {"other": 1}},
    {"_meta": {"progressToken": None}},
    {"_meta": {"progressToken": True}},
    {"_meta": {"progressToken": 1.5}},
    {"_meta": {"progressToken": [1]}},
    {"_meta": {"progressToken": 0}},
    {"_meta": {"progressToken": 7}},
    {"_meta": {"progressToken": "7"}},
    {"_meta": {"progressToken": ""}},
    {"_meta": {"progressToken": 2**70}},
]
IDS: list[Id] = [0, 1, -1, 2**70, "", "1", "abc"]


def make(request_id: Id, params: Any) -> Request:
    obj = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return Request(request_id, "tools/call", params, obj)


def progress_target(router: Router[str], token: Any) -> Any:
    """Where a progress notification naming `token` goes (as the router routes one)."""
    params = {"progressToken": token, "progress": 1}
    obj = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
    return router.route(Notification("notifications/progress", params, obj), 0.0).target


@pytest.mark.parametrize("params", PARAMS, ids=repr)
def test_a_request_routes_progress_exactly_when_jsonrpc_reads_a_token(params: Any) -> None:
    router: Router[str] = Router(CancelTracker(ttl=30.0))
    router.open_request(make(1, params), "s")
    token = progress_token(make(1, params))
    if token is None:
        assert router._tokens == {} and router._progress == {}
    else:
        assert router._tokens == {id_key(1): id_key(token)} and progress_target(router, token) == "s"
    assert router.route(Response(1, {"jsonrpc": "2.0", "id": 1, "result": {}}), 0.0) == Route("s", done=True)
    assert router._tokens == {} and router._progress == {}
    if token is not None:
        assert progress_target(router, token) is DROP


@pytest.mark.parametrize("request_id", IDS, ids=repr)
def test_the_inlined_id_key_is_id_key(request_id: Id) -> None:
    router: Router[str] = Router(CancelTracker(ttl=30.0))
    router.open_request(make(request_id, None), "s")
    assert list(router._in_flight) == [id_key(request_id)]
    other: Id = str(request_id) if isinstance(request_id, int) else len(request_id)
    assert router.route(Response(other, {"jsonrpc": "2.0", "id": other, "result": {}}), 0.0).target is DROP
    answered = router.route(Response(request_id, {"jsonrpc": "2.0", "id": request_id, "result": {}}), 0.0)
    assert answered == Route("s", "", True) and answered.target == "s" and answered.done and not answered.reason
    assert router.in_flight == 0


def test_a_token_reused_while_in_flight_stays_with_its_first_request_and_goes_with_it() -> None:
    router: Router[str] = Router(CancelTracker(ttl=30.0))
    meta = {"_meta": {"progressToken": "t"}}
    router.open_request(make(1, meta), "a")
    router.open_request(make(2, meta), "b")
    assert progress_target(router, "t") == "a"
    assert router.cancel(2, 0.0) == "b"
    assert progress_target(router, "t") == "a"  # the second never owned it
    assert router.cancel(1, 0.0) == "a"
    assert progress_target(router, "t") is DROP
    router.open_request(make(3, meta), "c")
    assert progress_target(router, "t") == "c"
    assert router.abandon_all() == [(3, "c")]
    assert progress_target(router, "t") is DROP and router._tokens == {}


CANCELLED: list[list[Id]] = [[], [1], ["1"], [2, 1, "x"], [3]]


@pytest.mark.parametrize("cancelled", CANCELLED)
@pytest.mark.parametrize("request_id", [1, "1", 3])
def test_a_request_sent_forgets_its_cancelled_key_as_forget_does(cancelled: list[Id], request_id: Id) -> None:
    """open_request calls forget only when something is cancelled: what is left cancelled equals forget's, in order,
    and a response to the request routes to its stream either way."""
    tracker, general = CancelTracker(), CancelTracker()
    for n, cancelled_id in enumerate(cancelled):
        tracker.cancel(id_key(cancelled_id), float(n))
        general.cancel(id_key(cancelled_id), float(n))
    router: Router[str] = Router(tracker)
    router.open_request(make(request_id, None), "s")
    general.forget(id_key(request_id))
    assert list(tracker.deadlines.items()) == list(general.deadlines.items())
    response = Response(request_id, {"jsonrpc": "2.0", "id": request_id, "result": {}})
    assert router.route(response, 0.0) == Route("s", done=True)
