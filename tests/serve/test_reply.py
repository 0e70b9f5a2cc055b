"""The reply machine (serve/front/reply.py) through gunicorn mcpgate.wsgi: keepalive comments on every kind of
SSE reply (each test reads a `: keepalive` comment, which nothing but a keepalive writes), and a departed
client noticed as its connection closes, not at the next keepalive (MCPGATE_KEEPALIVE is ten minutes there).
In process: the wait before switching to SSE and the owed count, and serve/errors.py's table."""

from __future__ import annotations

import gc
import json
import socket
import time
import weakref
from collections.abc import Iterator
from typing import Any

import gevent
import pytest

from mcpgate.child.spawn import ChildSpawnError
from mcpgate.core.jsonrpc import Request
from mcpgate.core.routing import DuplicateRequestId
from mcpgate.core.sessions import SessionLimitReached
from mcpgate.serve import errors
from mcpgate.serve.cluster.caps import PrincipalLimitReached
from mcpgate.serve.front import reply
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest, Refusal
from mcpgate.serve.sessions.stream import Stream, StreamLimits
from tests.support import (
    Gateway,
    call,
    direct_children,
    modern_body,
    modern_headers,
    open_session,
    post_modern,
    serving,
    wait_dead,
    wait_for,
)

KEEPALIVE = b": keepalive"
NOTICED = 10.0  # seconds: generous; the reply notices a closed connection within about one (its probe's tick)


@pytest.fixture(scope="module")
def chatty() -> Iterator[Gateway]:
    """Keepalives every 0.2 s, replies turning SSE after 0.2 s."""
    with serving({"MCPGATE_KEEPALIVE": "0.2", "MCPGATE_SSE_AFTER": "0.2"}, behind=True) as gw:
        yield gw


@pytest.fixture(scope="module")
def quiet() -> Iterator[Gateway]:
    """A keepalive every ten minutes: a departed client can only be noticed by watching its connection."""
    with serving({"MCPGATE_KEEPALIVE": "600"}, behind=True) as gw:
        yield gw


def raw_get(gw: Gateway, path: str, headers: dict[str, str] | None = None) -> socket.socket:
    """A GET on a raw connection (its reply read by the caller); text/event-stream accepted."""
    sock = socket.create_connection((gw.host, gw.port), timeout=15)
    fields = {"Host": f"{gw.host}:{gw.port}", "Accept": "text/event-stream", **(headers or {})}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    sock.sendall(f"GET {path} HTTP/1.1\r\n{head}\r\n".encode())
    return sock


def read_until(sock: socket.socket, wanted: bytes) -> bytes:
    """What the connection sends up to and including `wanted` (socket.timeout when it does not come)."""
    seen = b""
    while wanted not in seen:
        chunk = sock.recv(4096)
        if not chunk:
            raise EOFError(f"the connection closed before {wanted!r}: {seen!r}")
        seen += chunk
    return seen


def session_headers(gw: Gateway) -> dict[str, str]:
    return {name: value for name, value in open_session(gw).items() if name.lower().startswith("mcp-")}


def test_an_http_sse_stream_carries_keepalives(chatty: Gateway) -> None:
    sock = raw_get(chatty, "/sse")
    try:
        assert b"event: endpoint" in read_until(sock, b"event: endpoint")
        read_until(sock, KEEPALIVE)
    finally:
        sock.close()


def test_a_get_stream_carries_keepalives(chatty: Gateway) -> None:
    sock = raw_get(chatty, "/mcp", session_headers(chatty))
    try:
        assert b"200 OK" in read_until(sock, b"\r\n\r\n")
        read_until(sock, KEEPALIVE)
    finally:
        sock.close()


def test_a_slow_reply_turned_sse_carries_keepalives(chatty: Gateway) -> None:
    headers = open_session(chatty)
    reply = chatty.request("POST", body=call("slow", {"seconds": 1.5, "steps": 1}), headers=headers)
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream"), reply
    assert KEEPALIVE in reply.body, reply.body


def test_a_slow_2026_reply_carries_keepalives(chatty: Gateway) -> None:
    body = modern_body(1, "tools/call", {"name": "slow", "arguments": {"seconds": 1.5, "steps": 1}})
    reply = post_modern(chatty, body)
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream"), reply
    assert KEEPALIVE in reply.body, reply.body


def session_child(gw: Gateway, before: set[int]) -> int:
    """The one child of the gateway's worker that was not there `before`."""
    assert wait_for(lambda: bool(worker_children(gw) - before))
    [child] = worker_children(gw) - before
    return child


def worker_children(gw: Gateway) -> set[int]:
    [worker] = direct_children(gw.proc.pid)
    return set(direct_children(worker))


def test_a_departed_http_sse_client_ends_its_session_at_once(quiet: Gateway) -> None:
    """The client closes its stream's connection: the session ends and its child stops, long before the next
    keepalive (ten minutes away) could find the client gone."""
    before = worker_children(quiet)
    sock = raw_get(quiet, "/sse")
    try:
        url = read_until(sock, b"event: endpoint").split(b"data: ", 1)[1].split(b"\n", 1)[0].decode().strip()
        child = session_child(quiet, before)
    finally:
        sock.close()
    assert wait_dead([child], timeout=NOTICED) == [], quiet.log_tail()
    assert "the client closed its HTTP+SSE stream" in quiet.log()
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert quiet.request("POST", url, body=ping, headers={"Content-Type": "application/json"}).status == 404


def test_a_departed_get_client_frees_the_sessions_get_stream(quiet: Gateway) -> None:
    """A session has one GET stream: while a departed client's still held it, another GET is refused 409. Its
    connection closed, the stream is released at once, not at the next keepalive."""
    headers = session_headers(quiet)
    first = raw_get(quiet, "/mcp", headers)
    try:
        assert b"200 OK" in read_until(first, b"\r\n\r\n")
        assert status_of(quiet, headers) == 409  # the first still holds it
    finally:
        first.close()
    assert wait_for(lambda: status_of(quiet, headers) == 200, timeout=NOTICED), quiet.log_tail()


def status_of(gw: Gateway, headers: dict[str, str]) -> int:
    """The status of a GET stream's request (a stream that opens is closed at once)."""
    sock = raw_get(gw, "/mcp", headers)
    try:
        line = read_until(sock, b"\r\n").split(b" ", 2)
        return int(line[1])
    finally:
        sock.close()


def post_on(sock: socket.socket, gw: Gateway, body: dict[str, Any]) -> None:
    """A 2026-07-28 POST on a kept-alive raw connection (its reply read by the caller)."""
    data = json.dumps(body).encode()
    params = body.get("params") or {}
    fields = {"Host": f"{gw.host}:{gw.port}", **modern_headers(body["method"], params.get("name"))}
    fields["Content-Length"] = str(len(data))
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    sock.sendall(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + data)


def test_a_kept_alive_connections_later_call_is_cancelled_as_it_closes(quiet: Gateway) -> None:
    """The connection's one watch (made on its first request, started again for each) sees the client leave
    during the second request on the same connection: the slow call is cancelled in the child."""
    mark = "cancelled; no response sent"  # what the demo child writes when a call is cancelled
    before = quiet.log().count(mark)
    sock = socket.create_connection((quiet.host, quiet.port), timeout=15)
    try:
        post_on(sock, quiet, modern_body(1, "tools/call", {"name": "echo", "arguments": {"message": "hi"}}))
        assert b"200 OK" in read_until(sock, b'"hi"')
        slow = modern_body(2, "tools/call", {"name": "slow", "arguments": {"seconds": 30, "steps": 60}})
        slow["params"]["_meta"]["progressToken"] = "p"
        post_on(sock, quiet, slow)
        assert b"notifications/progress" in read_until(sock, b"notifications/progress")  # the child works on it
    finally:
        sock.close()
    assert wait_for(lambda: quiet.log().count(mark) > before, timeout=NOTICED), quiet.log_tail()


def test_a_connection_has_one_watch_and_a_new_socket_on_its_fd_a_new_one() -> None:
    first, peer = socket.socketpair()
    try:
        watch = reply.PeerWatch.of(first)
        assert watch is not None and reply.PeerWatch.of(first) is watch
        fd = first.fileno()
        first.close()
        again, other = socket.socketpair()
        try:
            if again.fileno() == fd:  # the fd is used again at once (usually): its old watch is not reused
                assert reply.PeerWatch.of(again) is not watch
        finally:
            again.close()
            other.close()
    finally:
        peer.close()
    assert reply.PeerWatch.of(object()) is None  # nothing to watch (no socket)


def test_a_requests_stop_leaves_a_later_requests_watch_alone() -> None:
    """A reply that ends after the next request's began (its generator closed late) does not stop that watch."""
    sock, peer = socket.socketpair()
    try:
        earlier, later = reply.Client(sock), reply.Client(sock)
        earlier.watch(lambda: None)
        later.watch(lambda: None)
        earlier.stop()
        watch = reply.PeerWatch.of(sock)
        assert watch is not None and watch._on_gone is not None
        later.stop()
        assert watch._on_gone is None
    finally:
        sock.close()
        peer.close()


def test_a_client_watched_again_runs_only_its_latest_callback() -> None:
    """watch() on a Client already watching replaces its callback (the first is stopped); a fresh Client's first
    watch has nothing to stop: the peer's end runs the one callback given last, once."""
    sock, peer = socket.socketpair()
    ran: list[str] = []
    try:
        client = reply.Client(sock)
        client.watch(lambda: ran.append("first"))
        client.watch(lambda: ran.append("second"))
        watch = reply.PeerWatch.of(sock)
        assert watch is not None
        peer.close()
        deadline = time.monotonic() + NOTICED
        while not client.departed and time.monotonic() < deadline:
            gevent.sleep(0.01)  # the watch's callback runs in the hub
        assert client.departed
        assert ran == ["second"]
        client.stop()
        assert watch._on_gone is None
    finally:
        sock.close()
        peer.close()


def test_a_stopped_client_keeps_no_cycle_and_its_callback_goes_with_it() -> None:
    """A reply's Client is freed by its last reference (no reference cycle left for the collector), and what
    its callback holds (the call, its stream) with it."""

    class Callback:
        def __call__(self) -> None:
            pass

    sock, peer = socket.socketpair()
    collecting = gc.isenabled()
    gc.disable()  # only reference counting frees below
    try:
        callback = Callback()
        held = weakref.ref(callback)
        client = reply.Client(sock)
        client.watch(callback)
        watch = reply.PeerWatch.of(sock)
        assert watch is not None and watch._on_gone is not None
        client.stop()
        assert watch._on_gone is None
        del callback, client
        assert held() is None
    finally:
        if collecting:
            gc.enable()
        sock.close()
        peer.close()


# -- in process: the wait before switching, the owed count -------------------------------------------------------

LIMITS = StreamLimits(messages=8, bytes=1 << 16, stall_timeout=0.0, replay_events=8, replay_bytes=1 << 16)


def test_every_response_first_is_a_json_reply_and_owes_nothing() -> None:
    stream = Stream(LIMITS, expected=2)
    stream.deliver(b"a", done=True)
    stream.deliver(b"b", done=True)
    answers = reply.answer_or_switch(stream, 0.0)
    assert isinstance(answers, list) and [item.data for item in answers] == [b"a", b"b"]
    assert stream.expected == 0


def test_another_message_first_switches_to_sse_and_puts_back_what_was_taken() -> None:
    stream = Stream(LIMITS, expected=2)
    stream.deliver(b"answer", done=True)
    stream.deliver(b"progress")
    assert reply.answer_or_switch(stream, 0.0) is reply.Turn.SSE
    assert stream.expected == 2  # the answer taken is owed again: the SSE reply sends it
    stream.end()  # then the stream ends (as a session's end ends it)
    sent = list(reply.events(stream, keepalive=60.0, client=None))
    assert [b"data: answer" in sent[0], b"data: progress" in sent[1], len(sent)] == [True, True, 2], sent
    assert stream.expected == 1  # one answer sent; the other is still owed


def test_the_wait_running_out_is_sse_and_an_ended_stream_or_a_gone_client_is_gone() -> None:
    assert reply.answer_or_switch(Stream(LIMITS, expected=1), 0.0) is reply.Turn.SSE
    ended = Stream(LIMITS, expected=1)
    ended.close()
    assert reply.answer_or_switch(ended, 5.0) is reply.Turn.GONE
    assert reply.answer_or_switch(Stream(LIMITS, expected=1), 5.0, reply.Client(probe=lambda: True)) is reply.Turn.GONE


def test_a_woken_reply_looks_at_its_client_at_once() -> None:
    stream = Stream(LIMITS)
    client = reply.Client()
    events = reply.events(stream, keepalive=600.0, client=client, answers=False, opening=[b": open\n\n"])
    assert next(events) == b": open\n\n"
    client.departed = True
    stream.wake()  # what the socket's watch does when the connection reads as ended
    assert list(events) == []
    assert stream.next(0.0) is None and not stream.closed


# -- in process: the one table from domain exceptions to refusals ---------------------------------------------

TABLE = [
    (SessionLimitReached(3), 503, -32603, "Service Unavailable: session limit reached", {"Retry-After": "30"}, 7),
    (PrincipalLimitReached(2), 503, -32603, "Service Unavailable: this principal", {"Retry-After": "30"}, 7),
    (ChildSpawnError("/no/such: not found"), 502, -32603, errors.CANNOT_START, {}, 7),
    (DuplicateRequestId("x"), 400, -32600, "Invalid Request: request id 'x' is already", {}, "x"),
]


@pytest.mark.parametrize("exc,status,code,message,headers,answer_id", TABLE)
def test_a_domain_exception_is_refused_once_at_the_endpoint(
    exc: Exception, status: int, code: int, message: str, headers: dict[str, str], answer_id: Any
) -> None:
    def handler(_gw: Any, request: HttpRequest) -> Any:
        context(request.environ).message = Request(7, "tools/call", {}, {"jsonrpc": "2.0", "id": 7})
        raise exc

    try:
        errors.answered(handler)(None, HttpRequest({"REQUEST_METHOD": "POST"}))
    except Refusal as refused:
        response = refused.response()
    else:
        raise AssertionError("not refused")
    assert response.status == status and isinstance(response.body, bytes)
    answer = json.loads(response.body)
    assert answer["id"] == answer_id and answer["error"]["code"] == code, answer
    assert answer["error"]["message"].startswith(message), answer
    assert set(headers.items()) <= set(response.headers)
    assert "/no/such" not in response.body.decode()  # the spawn failure's detail goes to the log only


def test_a_named_refusal_carries_its_class_decisions() -> None:
    refused = errors.ShuttingDown(5).response()
    assert refused.status == 503 and ("Retry-After", "5") in refused.headers
    assert json.loads(refused.body)["id"] == 5  # type: ignore[arg-type]
    allow = errors.MethodNotAllowed("POST").response()
    assert allow.status == 405 and ("Allow", "POST") in allow.headers
