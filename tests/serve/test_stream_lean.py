"""A session's reply stream, its shortcuts against the full path: a Delivery made without its __new__ equals one made
with it, and the bytes a session passes on for a message equal what jsonrpc.raw_bytes gives for it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mcpgate.core import jsonrpc
from mcpgate.core.framing import LineDecoder
from mcpgate.core.routing import DuplicateRequestId
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.serve.front import reply
from mcpgate.serve.sessions.session import Session
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import END, Delivery, Stream, StreamLimits

LIMITS = StreamLimits(100, 1 << 20, 0.1, 10, 1 << 16)

LINES = [
    b'{"jsonrpc":"2.0","id":1,"result":{}}\n',
    b'{"jsonrpc":"2.0","id":1,"result":{"text":"a\\nb"}}\n',
    b'{"jsonrpc":"2.0","id":1,"result":{}}\r\n',
    b' {"jsonrpc" : "2.0", "id" : 1, "result" : {"x":[1,2]}}\n',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}\n',
    b'{"id":1,"jsonrpc":"2.0","result":{"a":"\\r"}}\n',
]


def session() -> Session:
    spec = ChildSpec(("true",), None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0)
    return Session(
        "s" * 32,
        "owner",
        spec,
        buffer_messages=10,
        buffer_bytes=1 << 16,
        limits=LIMITS,
        replay_streams=2,
        on_end=lambda _session, _reason: None,
    )


@pytest.mark.parametrize("done", [False, True])
@pytest.mark.parametrize("data", [b"", b"{}", b"x" * 1000])
def test_a_delivered_message_is_the_delivery_made_in_full(data: bytes, done: bool) -> None:
    stream = Stream(LIMITS, 1)
    assert stream.deliver(data, done)
    item = stream.next(0)
    made = Delivery(data, done)
    assert isinstance(item, Delivery) and type(item) is Delivery
    assert item == made and (item.data, item.done) == (made.data, made.done) and hash(item) == hash(made)
    assert stream.deliver(data)
    assert stream.next(0) == Delivery(data)


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("bare_word", [True, False])
def test_a_routed_answer_carries_raw_bytes(line: bytes, bare_word: bool) -> None:
    """Whatever the splitter said of the line, the stream gets what raw_bytes gives for the message."""
    decoder = LineDecoder(1 << 20)
    (text,) = decoder.feed(line)
    message = jsonrpc.parse_line(text, bare=decoder.bare and bare_word)
    assert isinstance(message, jsonrpc.Response)
    live = session()
    request = jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}')
    assert isinstance(request, jsonrpc.Request)
    stream = live.open_stream([request])
    live.route(message)
    item = stream.next(0)
    assert item == Delivery(jsonrpc.raw_bytes(message), True)
    live.close_stream(stream)


def test_open_stream_takes_any_iterable_as_a_list() -> None:
    live = session()
    made = [jsonrpc.parse(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % n) for n in (1, 2)]
    requests = [message for message in made if isinstance(message, jsonrpc.Request)]
    from_list = live.open_stream(requests)
    from_iterator = live.open_stream(iter([jsonrpc.Request(3, "ping", None, {}), jsonrpc.Request(4, "ping", None, {})]))
    assert from_list.expected == from_iterator.expected == 2
    assert live.router.in_flight == 4
    live.close_stream(from_list)
    live.close_stream(from_iterator)
    assert live.router.general_target() is not from_list


def state(live: Session) -> tuple[object, ...]:
    router = live.router
    return (
        router.in_flight,
        sorted(router._in_flight, key=repr),
        sorted(router._tokens.items(), key=repr),
        sorted(router._progress, key=repr),
        live._init_key,
        sorted(live._tool_lists, key=repr),
    )


def opened_in_full(live: Session, requests: list[jsonrpc.Request]) -> Stream:
    """open_stream's work by add_requests' loop (what an iterable of any length takes)."""
    stream = Stream(LIMITS, len(requests))
    live.add_requests(iter(requests), stream)
    live.router.open_stream(stream)
    return stream


REQUESTS = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}',
    b'{"jsonrpc":"2.0","id":"1","method":"tools/list"}',
    b'{"jsonrpc":"2.0","id":2,"method":"initialize","params":{}}',
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"_meta":{"progressToken":"t"}}}',
]


@pytest.mark.parametrize("body", REQUESTS)
@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("taken", [False, True])
def test_one_request_registers_as_any_number_does(body: bytes, filtered: bool, taken: bool) -> None:
    """A one-request list (open_stream's and add_requests' shortcuts) leaves the session as add_requests' loop over
    the same request does, and a duplicate id is refused by each with nothing registered."""
    request = jsonrpc.parse(body)
    assert isinstance(request, jsonrpc.Request)
    ways: list[Any] = [
        lambda live: live.open_stream([request]),
        lambda live: live.open_stream(iter([request])),
        lambda live: live.add_requests([request], Stream(LIMITS, 1)),
        lambda live: opened_in_full(live, [request]),
    ]
    results = []
    for way in ways:
        live = session()
        live.tools = ToolFilter.of(("x",), ()) if filtered else None
        if taken:
            opened_in_full(live, [request])
        try:
            way(live)
            results.append(("opened", state(live)))
        except DuplicateRequestId:
            results.append(("refused", state(live)))
    assert all(result == results[-1] for result in results), results
    assert results[0][0] == ("refused" if taken else "opened")


# -- answer_or_switch waits in its own frame: the same as next_within's wait, response after response ---------------


def next_within(stream: Stream, within: float, client: Any) -> Any:
    """The wait answer_or_switch made a call for each response, before it waited in its own frame."""
    deadline = time.monotonic() + within
    while True:
        left = deadline - time.monotonic()
        item = stream.next(max(0.0, left) if client is None else max(0.0, min(reply.TICK, left)))
        if item is not None:
            return item
        if client is not None and client.gone():
            return reply.Turn.GONE
        if left <= 0:
            return reply.Turn.SSE


def general_answer_or_switch(
    stream: Stream, within: float, client: Any = None, early: tuple[Delivery, ...] = ()
) -> Any:
    """answer_or_switch as it was, a next_within call for each response."""
    collected = list(early)
    while stream.expected > 0:
        item = next_within(stream, within, client)
        if isinstance(item, Delivery) and item.done:
            collected.append(item)
            stream.expected -= 1
            continue
        if isinstance(item, Delivery):
            collected.append(item)
        stream.expected += sum(1 for taken in collected if taken.done)
        stream.requeue(collected)
        return reply.Turn.SSE if isinstance(item, Delivery) else reply.Turn.GONE if item is END else item
    return collected


REPLIES: list[tuple[str, int, list[tuple[bytes, bool]], str, float, bool | None, bool]] = [
    # (name, owed, delivered (data, done), then: "" / "end" / "close", within, client gone (None: no client), early)
    ("one answer", 1, [(b"a", True)], "", 0.0, None, False),
    ("two answers", 2, [(b"a", True), (b"b", True)], "", 0.0, None, False),
    ("answers and early", 2, [(b"a", True), (b"b", True)], "", 0.0, False, True),
    ("progress first", 1, [(b"p", False), (b"a", True)], "", 0.0, None, False),
    ("answer then progress", 2, [(b"a", True), (b"p", False)], "", 0.0, None, True),
    ("nothing within", 1, [], "", 0.0, None, False),
    ("nothing within, a client there", 1, [], "", 0.0, False, False),
    ("one of two within", 2, [(b"a", True)], "", 0.0, False, False),
    ("ended", 1, [], "end", 5.0, None, False),
    ("closed after an answer", 2, [(b"a", True)], "close", 5.0, None, False),
    ("client gone", 1, [], "", 5.0, True, False),
    ("client gone after an answer", 2, [(b"a", True)], "", 5.0, True, True),
    ("owes nothing", 0, [(b"a", True)], "", 0.0, None, True),
]


def reply_stream(owed: int, delivered: list[tuple[bytes, bool]], then: str) -> Stream:
    stream = Stream(LIMITS, owed)
    for data, done in delivered:
        assert stream.deliver(data, done)
    if then == "end":
        stream.end()
    elif then == "close":
        stream.close()
    return stream


def drained(stream: Stream) -> list[Any]:
    stream.end()
    out: list[Any] = []
    while (item := stream.next(0)) is not None and item is not END:
        out.append(item)
    return out


@pytest.mark.parametrize(
    ("owed", "delivered", "then", "within", "gone", "early"),
    [case[1:] for case in REPLIES],
    ids=[case[0] for case in REPLIES],
)
def test_answer_or_switch_waits_as_next_within_does(
    monkeypatch: pytest.MonkeyPatch,
    owed: int,
    delivered: list[tuple[bytes, bool]],
    then: str,
    within: float,
    gone: bool | None,
    early: bool,
) -> None:
    monkeypatch.setattr(reply, "TICK", 0.01)  # a gone client is seen at the first probe, both ways
    seen: list[Any] = []
    for way in (reply.answer_or_switch, general_answer_or_switch):
        stream = reply_stream(owed, delivered, then)
        client = None if gone is None else reply.Client(probe=lambda gone=gone: gone)
        given = (Delivery(b"early", True),) if early else ()
        answer = way(stream, within, client, given)
        seen.append((answer, stream.expected, drained(stream)))
    assert seen[0] == seen[1]


# -- a session's open_stream and close_stream do the router's part themselves: as Router.open_stream and close_stream

STEPS: list[list[tuple[str, int]]] = [
    [("open", 0)],
    [("open", 0), ("open", 1)],
    [("open", 0), ("open", 1), ("close", 1)],
    [("open", 0), ("open", 1), ("close", 0), ("open", 2)],
    [("open", 0), ("close", 0)],
    [("open", 0), ("close", 0), ("open", 1), ("close", 1)],
    [("get", 9), ("open", 0), ("close", 9)],
    [("get", 9), ("open", 0), ("close", 0)],
    [("open", 0), ("get", 9), ("close", 0), ("close", 9), ("open", 1)],
]


@pytest.mark.parametrize("steps", STEPS)
def test_a_session_opens_and_closes_its_stream_in_the_router_as_the_router_does(steps: list[tuple[str, int]]) -> None:
    """After the same opens and closes, the router's open streams (oldest first), its GET stream and the target of a
    message for no request are the same, whichever way each stream was opened and closed."""
    seen: list[Any] = []
    for shortcut in (True, False):
        live = session()
        streams: dict[int, Stream] = {}
        for step, n in steps:
            if step == "get":
                streams[n] = live.open_get_stream()  # type: ignore[assignment]
            elif step == "close" and shortcut:
                live.close_stream(streams[n])
            elif step == "close":
                streams[n].close()
                live.router.close_stream(streams[n])
            elif shortcut:
                streams[n] = live.open_stream([request_of(n)])
            else:
                streams[n] = stream = Stream(LIMITS, 1)
                live.add_requests([request_of(n)], stream)
                live.router.open_stream(stream)
        order = {id(stream): n for n, stream in streams.items()}
        router = live.router
        named = [order.get(id(target), target) for target in (router.get_stream, router.general_target())]
        seen.append(([order[id(s)] for s in router.open_streams], named))
    assert seen[0] == seen[1]


def request_of(n: int) -> jsonrpc.Request:
    return jsonrpc.Request(n, "tools/call", None, {"jsonrpc": "2.0", "id": n, "method": "tools/call"})


# -- a session routes a message with the clock read only when something is cancelled (Session.route) ---------------

ROUTED: list[list[tuple[str, Any]]] = [
    [("open", 1), ("answer", 1)],
    [("open", 1), ("answer", 2), ("answer", 1), ("answer", 1)],
    [("open", 1), ("cancel", 1), ("answer", 1)],  # a late answer to a cancelled request: dropped
    [("open", 1), ("cancel", 1), ("tick", 61.0), ("answer", 1)],  # past the tracker's ttl: no request in flight
    [("open", 1), ("open", 2), ("cancel", 1), ("answer", 2), ("answer", 1)],
    [("open", 1), ("cancel", 1), ("tick", 61.0), ("open", 2), ("cancel", 2), ("answer", 1), ("answer", 2)],
    [("open", 3), ("progress", "t"), ("note", 0), ("answer", 3), ("progress", "t")],
    [("note", 0), ("open", 1), ("cancel", 1), ("note", 0), ("progress", "t")],
    [("open", 1), ("cancel", 1), ("open", 1), ("answer", 1)],  # an id used again after its cancel
]


def routed_message(step: str, n: Any) -> jsonrpc.Notification | jsonrpc.Response:
    if step == "answer":
        return jsonrpc.Response(n, {"jsonrpc": "2.0", "id": n, "result": {}})
    method = "notifications/progress" if step == "progress" else "notifications/message"
    params = {"progressToken": n, "progress": 1} if step == "progress" else {}
    return jsonrpc.Notification(method, params, {"jsonrpc": "2.0", "method": method, "params": params})


def progress_request(n: int) -> jsonrpc.Request:
    params = {"_meta": {"progressToken": "t"}}
    obj = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params}
    return jsonrpc.Request(n, "tools/call", params, obj)


def routes_of(steps: list[tuple[str, Any]], shortcut: bool) -> list[tuple[object, str, bool]]:
    """Each route a message took over the steps: by Session.route (`shortcut`) or by the router given the clock's
    time; Session.route is held to reading the clock only while something is cancelled."""
    now = [1000.0]
    reads: list[bool] = []
    live = session()

    def clock() -> float:
        reads.append(bool(live.router.cancelled.deadlines))
        return now[0]

    live._clock = clock
    routes: list[Any] = []
    full = live.router.route

    def recorded(message: Any, at: float) -> Any:
        routes.append(full(message, at))
        return routes[-1]

    live.router.route = recorded  # type: ignore[method-assign]
    streams: dict[int, Stream] = {}
    for step, n in steps:
        if step == "open":
            streams[n] = live.open_stream([progress_request(n) if n == 3 else request_of(n)])
        elif step == "cancel":
            live.cancel(n)
        elif step == "tick":
            now[0] += n
        elif shortcut:
            before = len(reads)
            live.route(routed_message(step, n))
            assert all(reads[before:]), "the clock was read with nothing cancelled"
        else:  # the full way: the router given the clock's time, whatever is cancelled
            routes.append(full(routed_message(step, n), clock()))
    order = {id(stream): n for n, stream in streams.items()}
    return [(order.get(id(route.target), route.target), route.reason, route.done) for route in routes]


@pytest.mark.parametrize("steps", ROUTED)
def test_a_session_routes_as_its_router_does_with_the_time(steps: list[tuple[str, Any]]) -> None:
    """Each message a session routes goes where its router sends it at the clock's time (the time read only while
    something is cancelled: a late answer to a cancelled request is dropped, one past the tracker's ttl is not)."""
    assert routes_of(steps, shortcut=True) == routes_of(steps, shortcut=False)


# -- the bytes a session sends its child for a client's message (Session.send_message) -----------------------------

SENT = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\\nb"}}',
    b'{"jsonrpc":"2.0",\n"id":1,"method":"tools/call","params":{}}',
    b'{"jsonrpc":"2.0",\r"id":1,"method":"ping"}',
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
    b'{"jsonrpc":"2.0","id":7,"result":{}}',
]


@pytest.mark.parametrize("text", SENT)
@pytest.mark.parametrize("how", ["parsed", "bare", "re-encoded"])
def test_a_sent_message_is_what_raw_bytes_gives(text: bytes, how: str) -> None:
    """Whatever the message's raw and bare say, the child is sent what jsonrpc.raw_bytes gives for the message."""
    message = jsonrpc.parse(text)
    assert isinstance(message, (jsonrpc.Request, jsonrpc.Notification, jsonrpc.Response))
    if how == "bare" and 10 not in text and 13 not in text:
        message.bare = text
    elif how == "re-encoded":
        message.raw = None
    live = session()
    sent: list[bytes] = []

    def send(data: bytes) -> bool:
        sent.append(data)
        return True

    live.child.send = send  # type: ignore[method-assign]
    assert live.send_message(message)
    assert sent == [jsonrpc.raw_bytes(message)] and 10 not in sent[0] and 13 not in sent[0]
