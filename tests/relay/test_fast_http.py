"""The relay's own HTTP/1.1 path (relay/fast_http.py) against a loopback server that writes exact reply bytes.

Framing (Content-Length, chunked, to the connection's end, 1xx skipped), a compressed body decoded, kept-alive
connections reused and dropped ones replaced, and failures mapped to the same errors urllib3's would be.
"""

from __future__ import annotations

import gzip
import socket
from collections.abc import Callable, Iterator

import pytest

from mcpgate.relay import errors
from mcpgate.relay.http_client import HttpClient
from tests.support import wait_for
from tests.support.raw_server import Answer, RawServer
from tests.support.relay import HANG_GUARD, http_options

BODY = b'{"jsonrpc":"2.0","id":1,"result":{}}'


def plain(body: bytes = BODY, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body),
        extra,
        body,
    )


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(answer: Answer, per_connection: int = 1000) -> RawServer:
        server = RawServer(answer, per_connection).__enter__()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.__exit__()


def post(http: HttpClient, url: str) -> tuple[int, bytes]:
    resp = http.send("POST", url, {"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    try:
        return resp.status_code, http.read_body(resp, url)
    finally:
        http.done(resp)


def test_requests_on_one_kept_alive_connection_carry_the_same_head(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda head: plain())
    http = HttpClient(http_options(bearer_token="tok"), server.url)
    try:
        assert [post(http, server.url) for _ in range(3)] == [(200, BODY)] * 3
    finally:
        http.close()
    assert server.connections == 1
    lines = server.heads[0].decode("latin-1").split("\r\n")
    assert lines[0] == "POST /mcp HTTP/1.1"
    assert {
        f"Host: 127.0.0.1:{server.port}",
        "Accept-Encoding: identity",
        "Authorization: Bearer tok",
        "User-Agent: mcpgate-relay",
        "Content-Type: application/json",
        "Content-Length: 40",
    } <= set(lines)


def test_chunked_and_gzip_bodies_are_unframed_and_decoded(serve: Callable[..., RawServer]) -> None:
    packed = gzip.compress(BODY)
    halves = (packed[:10], packed[10:])
    chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(part), part) for part in halves) + b"0\r\nX-Trailer: 1\r\n\r\n"
    head = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    server = serve(lambda _: head + b"Transfer-Encoding: chunked\r\nContent-Encoding: gzip\r\n\r\n" + chunked)
    http = HttpClient(http_options(), server.url)
    try:
        assert post(http, server.url) == (200, BODY)
        assert post(http, server.url) == (200, BODY)
    finally:
        http.close()
    assert server.connections == 1  # the chunked body was read to its end: the connection was reused


def test_a_reply_without_length_is_read_to_the_end_and_its_connection_not_reused(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda _: b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY, per_connection=1)
    http = HttpClient(http_options(), server.url)
    try:
        assert post(http, server.url) == (200, BODY)
        assert post(http, server.url) == (200, BODY)
    finally:
        http.close()
    assert server.connections == 2


def test_connection_close_and_a_server_closed_idle_connection_are_replaced(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda _: plain(extra=b"Connection: close\r\n"), per_connection=1)
    quiet = serve(lambda _: plain(), per_connection=1)  # closes after one reply without saying so
    http = HttpClient(http_options(tries=1), server.url)
    try:
        assert [post(http, server.url) for _ in range(2)] == [(200, BODY)] * 2
        assert post(http, quiet.url) == (200, BODY)
        # The server's close reaches the relay's idle connection before the next request is written.
        assert wait_for(lambda: _closed_by_peer(http), HANG_GUARD)
        assert post(http, quiet.url) == (200, BODY)
    finally:
        http.close()
    assert (server.connections, quiet.connections) == (2, 2)


def _closed_by_peer(http: HttpClient) -> bool:
    pools = {route.fast for route in http._routes._routes.values() if route.fast is not None}
    return all(conn.dropped() for pool in pools for conn in pool._idle)


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (None, errors.MaybeSent, "closed the connection"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{", errors.MaybeSent, "broke mid-reply"),
        (b"garbage\r\n\r\n", errors.MaybeSent, "bad status line"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nxx", errors.MaybeSent, "br"),
    ],
)
def test_broken_replies_fail_as_urllib3_failures_do(
    serve: Callable[..., RawServer], reply: bytes | None, kind: type[errors.RelayError], words: str
) -> None:
    server = serve(lambda _: reply, per_connection=1)
    http = HttpClient(http_options(tries=1), server.url)
    try:
        with pytest.raises(kind) as failed:
            post(http, server.url)
    finally:
        http.close()
    assert words in failed.value.message


def test_a_refused_connection_is_not_sent_and_a_silent_server_times_out() -> None:
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    http = HttpClient(http_options(tries=1, read_timeout=0.2), url)
    try:
        with pytest.raises(errors.MaybeSent) as silent:  # accepted by the kernel, never answered
            post(http, url)
        assert "read timeout" in silent.value.message
        sock.close()
        with pytest.raises(errors.NotSent) as refused:
            post(http, url)
        assert "cannot reach upstream" in refused.value.message and "refused" in refused.value.message
    finally:
        http.close()
        sock.close()
