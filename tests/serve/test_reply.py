"""The reply machine (serve/front/reply.py) through gunicorn mcpgate.wsgi: keepalive comments on every kind of
SSE reply (each test reads a `: keepalive` comment, which nothing but a keepalive writes), and a departed
client noticed as its connection closes, not at the next keepalive (MCPGATE_KEEPALIVE is ten minutes there)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support import (
    Gateway,
    call,
    direct_children,
    modern_body,
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
    with serving({"MCPGATE_KEEPALIVE": "0.2", "MCPGATE_SSE_AFTER": "0.2"}) as gw:
        yield gw


@pytest.fixture(scope="module")
def quiet() -> Iterator[Gateway]:
    """A keepalive every ten minutes: a departed client can only be noticed by watching its connection."""
    with serving({"MCPGATE_KEEPALIVE": "600"}) as gw:
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
