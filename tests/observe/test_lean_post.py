"""The span export's lean post (observe/span_batches.py LeanPost): a batch written on a socket of its own and the
answer's head read there. A table of answers (status, and whether the connection can carry the next request), a
table of headers it writes as they are or leaves to the SDK's client, and a keep-alive receiver that gets every
batch on one connection."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from mcpgate.observe.span_batches import MOST_HEAD, LeanPost, answer, plain_header
from tests.support.otlp import endpoint

ANSWERS: list[tuple[bytes, int, bool]] = [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, True),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 200, True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", 200, False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, False),
    (b"HTTP/1.1 200 OK\r\n\r\n", 200, False),  # a body until the connection closes
    (b"HTTP/1.1 204 No Content\r\n\r\n", 204, True),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, True),
    (b"HTTP/1.1 503 Unavailable\r\nContent-Length: 4\r\n\r\nbusy", 503, True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nok", 200, False),  # more than it said
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nbad", 400, False),  # less: the connection closes
]


def answered(reply: bytes) -> tuple[int, bool]:
    mine, theirs = socket.socketpair()
    try:
        mine.settimeout(5)
        theirs.sendall(reply)
        theirs.shutdown(socket.SHUT_WR)
        return answer(mine)
    finally:
        mine.close()
        theirs.close()


@pytest.mark.parametrize(("reply", "status", "kept"), ANSWERS)
def test_an_answers_status_and_whether_its_connection_is_kept(reply: bytes, status: int, kept: bool) -> None:
    assert answered(reply) == (status, kept)


@pytest.mark.parametrize(
    "reply", [b"", b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 2x OK\r\n\r\n", b"HTTP/1.1 200 OK\r\n" + b"x" * MOST_HEAD]
)
def test_no_http_answer_is_an_error(reply: bytes) -> None:
    with pytest.raises((ValueError, OSError)):
        answered(reply)


HEADERS: list[tuple[Any, Any, bool]] = [
    ("x-tenant", "t1", True),
    ("Authorization", "Bearer abc.def", True),
    ("x-tenant", "t1\r\nX-Injected: 1", False),
    ("x tenant", "t1", False),
    ("Host", "elsewhere", False),
    ("content-length", "1", False),
    ("x-tenant", "\u20ac", False),
    (b"x-tenant", "t1", False),
]


@pytest.mark.parametrize(("name", "value", "plain"), HEADERS)
def test_a_header_is_written_as_it_is_or_left_to_the_sdk(name: Any, value: Any, plain: bool) -> None:
    assert plain_header(name, value) is plain


class Client:
    """What LeanPost.of reads of the SDK's HTTP client."""

    def __init__(self, endpoint: str, headers: dict[str, str]) -> None:
        self._endpoint, self._headers, self._timeout = endpoint, headers, 5.0
        self._compression = type("Compression", (), {"value": "none"})()


@pytest.fixture
def kept_receiver() -> Iterator[tuple[str, list[tuple[int, str, bytes]]]]:
    """An HTTP/1.1 receiver keeping its connections: each POST's client port, x-tenant header and body."""
    got: list[tuple[int, str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append((self.client_address[1], self.headers.get("x-tenant", ""), body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with endpoint(Handler) as url:
        yield url, got


def test_batches_go_on_one_kept_connection(kept_receiver: tuple[str, list[tuple[int, str, bytes]]]) -> None:
    url, got = kept_receiver
    lean = LeanPost.of(Client(url, {"x-tenant": "t1", "Content-Type": "application/x-protobuf"}))
    assert lean is not None
    try:
        assert all(lean.post(bytes([n]) * 70_000) for n in range(3))
    finally:
        lean.close()
    assert [(tenant, body) for _, tenant, body in got] == [("t1", bytes([n]) * 70_000) for n in range(3)]
    assert len({port for port, _, _ in got}) == 1


def test_headers_or_an_endpoint_it_cannot_write_leave_the_post_to_the_sdk() -> None:
    assert LeanPost.of(Client("http://127.0.0.1:9/v1/traces", {"x-tenant": "a\nb"})) is None
    assert LeanPost.of(Client("http://127.0.0.1:9/v1/tr aces", {})) is None
    assert LeanPost.of(Client("http://127.0.0.1:9/v1/traces", {})) is not None
