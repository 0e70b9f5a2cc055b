"""serve/cluster/exchange.py speaks the exchange with an owner itself (issue 24): the request in one write, the
reply's head parsed as bytes, its body framed by Content-Length, chunks or the connection's end. Each test gives
a real loopback socket one scripted reply and reads it through an OwnerConnection, as the Forwarder does."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from mcpgate.core import http1
from mcpgate.serve.cluster.exchange import OwnerConnection, Reply, message

JSON = b'{"jsonrpc":"2.0","id":1,"result":{}}'


class Owner:
    """A loopback listener that answers each request on its first connection with the next scripted reply."""

    def __init__(self, *replies: bytes, close_after: bool = False) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.replies, self.close_after = list(replies), close_after
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            for reply in self.replies:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(data)
                conn.sendall(reply)
            if self.close_after:
                conn.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def connect() -> Iterator[list[Owner]]:
    owners: list[Owner] = []
    yield owners
    for owner in owners:
        owner.close()


def exchange(owners: list[Owner], *replies: bytes, close_after: bool = False) -> OwnerConnection:
    owner = Owner(*replies, close_after=close_after)
    owners.append(owner)
    return OwnerConnection("127.0.0.1", owner.port, timeout=10)


def send(conn: OwnerConnection, method: str = "POST") -> Reply:
    conn.send_request(message(method, "/mcp", [("Host", "mcp.test"), ("Content-Length", "2")], b"{}"))
    return conn.head(method)


def test_a_reply_with_a_length_then_another_on_the_same_connection(connect: list[Owner]) -> None:
    whole = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(JSON), JSON)
    conn = exchange(connect, whole, whole)
    for _ in range(2):
        reply = send(conn)
        assert (reply.status, reply.length, reply.chunked, reply.will_close) == (200, len(JSON), False, False)
        assert ("Content-Type", "application/json") in reply.headers
        assert conn.body(len(JSON)) == JSON
    assert connect[0].requests[0].startswith(b"POST /mcp HTTP/1.1\r\nHost: mcp.test\r\nContent-Length: 2\r\n\r\n{}")
    conn.close()


def test_a_chunked_reply_comes_chunk_by_chunk_with_its_trailers_read(connect: list[Owner]) -> None:
    chunked = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"
        b"5;ext=1\r\nevent\r\n3\r\n: x\r\n0\r\nTrailer: y\r\n\r\n"
    )
    conn = exchange(connect, chunked)
    reply = send(conn)
    assert (reply.status, reply.length, reply.chunked) == (200, None, True)
    assert [value for name, value in reply.headers if name == "Set-Cookie"] == ["a=1", "b=2"]
    assert list(conn.chunks(reply)) == [b"event", b": x"]
    conn.close()


def test_a_reply_without_length_lasts_until_the_connection_ends(connect: list[Owner]) -> None:
    conn = exchange(connect, b"HTTP/1.0 200 OK\r\n\r\nuntil the end", close_after=True)
    reply = send(conn)
    assert reply.length is None and not reply.chunked and reply.will_close
    assert b"".join(conn.chunks(reply)) == b"until the end"
    conn.close()


def test_a_head_reply_has_no_body(connect: list[Owner]) -> None:
    conn = exchange(connect, b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
    assert send(conn, "HEAD").length == 0
    conn.close()


def test_a_cut_chunk_and_a_closed_connection_are_errors(connect: list[Owner]) -> None:
    conn = exchange(connect, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nshort", close_after=True)
    reply = send(conn)
    with pytest.raises(http.client.IncompleteRead):
        list(conn.chunks(reply))
    conn.close()
    silent = exchange(connect, b"", close_after=True)
    with pytest.raises(http.client.RemoteDisconnected):
        send(silent)
    silent.close()


def test_the_head_is_bounded(connect: list[Owner], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http1, "MAX_HEADERS", 3)
    many = exchange(connect, b"HTTP/1.1 200 OK\r\n" + b"X-A: 1\r\n" * 4 + b"\r\n")
    with pytest.raises(http.client.HTTPException, match="more than 3 headers"):
        send(many)
    many.close()
    monkeypatch.setattr("mcpgate.serve.cluster.exchange.MAX_LINE", 64)
    long = exchange(connect, b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100 + b"\r\n\r\n")
    with pytest.raises(http.client.LineTooLong):
        send(long)
    long.close()


def test_a_header_that_would_break_the_framing_is_not_sent() -> None:
    with pytest.raises(ValueError):
        message("POST", "/mcp", [("X-A", "1\r\nX-Injected: 2")], b"")
    with pytest.raises(ValueError):
        message("POST", "/mcp", [("X-A: b", "1")], b"")
