"""The worker's lean reads and writes (serve/front/reading.py, writing.py, connection.py), each against the full
path it shortens: a reply's head and body in one join are pywsgi's bytes; a plain gevent socket is read and written
through its own socket with gevent's waits (the same bytes, the same refusal in non-blocking mode), any other
socket (TLS) through its own methods; a body's `done` is its `whole` after every read."""

from __future__ import annotations

import io
import time
from typing import Any

import gevent
import gevent.ssl
import pytest
from gevent import socket as gsocket
from gevent.pywsgi import format_date_time

from mcpgate.serve.front import writing
from mcpgate.serve.front.http import HttpResponse, json_response
from mcpgate.serve.front.reading import Body, TimedReader
from mcpgate.serve.front.writing import LeanWrites, _head
from tests.serve.test_writing import pywsgi_head

HEADS = [
    (b"200 OK", []),
    (b"200 OK", [(b"Content-Type", b"application/json"), (b"Content-Length", b"87")]),
    (b"204 No Content", [(b"Date", b"Thu, 03 Dec 2026 07:00:00 GMT")]),
    (b"421", [(b"X-Empty", b""), (b"Mcp-Session-Id", b"abc"), (b"Connection", b"close")]),
    (b"200 OK", [(b"Content-Type", b"text/event-stream"), (b"X-Accel-Buffering", b"no")]),
]
BODIES = [b"", b"{}", b'{"jsonrpc":"2.0","id":1,"result":{}}', b"\r\n\r\n", bytes(range(256))]


@pytest.mark.parametrize("body", BODIES)
def test_a_head_joined_with_its_body_is_pywsgis_bytes(body: bytes) -> None:
    for _ in range(2):  # the status line made, then remembered
        for status, headers in HEADS:
            assert _head(status, headers) == pywsgi_head(status, headers)
            assert _head(status, headers, body) == pywsgi_head(status, headers) + body
            assert _head(status, [list(pair) for pair in headers], body) == pywsgi_head(status, headers) + body


def test_only_gevents_plain_socket_is_read_through_its_own() -> None:
    a, b = gsocket.socketpair()
    try:
        assert TimedReader(a).raw is a._sock
        assert issubclass(gevent.ssl.SSLSocket, gsocket.socket)  # a TLS socket is a subclass: never read raw

        class Wrapped(gsocket.socket):  # type: ignore[misc]
            pass

        wrapped = Wrapped(gsocket.AF_UNIX, gsocket.SOCK_STREAM)
        try:
            assert TimedReader(wrapped).raw is None
        finally:
            wrapped.close()
    finally:
        a.close()
        b.close()


def test_the_readers_shut_flag_is_rfile_closed() -> None:
    a, b = gsocket.socketpair()
    try:
        reader = TimedReader(a)
        rfile = io.BufferedReader(reader)
        assert (rfile.closed, reader.shut) == (False, False)
        rfile.close()
        assert (rfile.closed, reader.shut) == (True, True)
        other = TimedReader(b)
        other.close()  # the raw reader closed by itself
        assert (other.closed, other.shut) == (True, True)
    finally:
        a.close()
        b.close()


def test_a_read_waits_for_bytes_that_come_later_as_gevents_does() -> None:
    a, b = gsocket.socketpair()
    try:
        reader = TimedReader(a)
        sender = gevent.spawn_later(0.05, b.sendall, b"later")
        buffer = bytearray(16)
        count = reader.recv_into(buffer)
        assert bytes(buffer[:count]) == b"later"
        sender.join()
        b.sendall(b"now")
        assert reader.recv_into(buffer) == 3 and bytes(buffer[:3]) == b"now"
        b.close()
        assert reader.recv_into(buffer) == 0  # the peer's end, as gevent's recv_into reads it
    finally:
        a.close()


def test_a_socket_in_non_blocking_mode_refuses_to_wait_as_gevents_does() -> None:
    a, b = gsocket.socketpair()
    try:
        a.settimeout(0.0)
        reader = TimedReader(a)
        with pytest.raises(BlockingIOError):
            a.recv_into(bytearray(4))
        with pytest.raises(BlockingIOError):
            reader.recv_into(bytearray(4))
    finally:
        a.close()
        b.close()


class Writer(LeanWrites):
    def __init__(self, sock: Any, raw: Any) -> None:
        self.socket, self.raw, self.code, self.response_length = sock, raw, 200, 0


@pytest.mark.parametrize("size", [1, 1000, 4 * 1024 * 1024])
@pytest.mark.parametrize("lean", [True, False])
def test_a_send_delivers_every_byte(size: int, lean: bool) -> None:
    a, b = gsocket.socketpair()
    try:
        data = bytes(n % 251 for n in range(size))
        writer = Writer(a, a._sock if lean else None)
        received = bytearray()

        def drain() -> None:
            while len(received) < size:
                received.extend(b.recv(65536))

        reading = gevent.spawn(drain)
        writer._sendall(data)
        reading.join(timeout=30)
        assert bytes(received) == data
        assert writer.response_length == size
    finally:
        a.close()
        b.close()


class Connection:
    close_connection = False

    def __init__(self) -> None:
        self.told = 0

    def body_read(self) -> None:
        self.told += 1


CHUNKED = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"


@pytest.mark.parametrize(
    "raw,length,chunked",
    [
        (b"", None, False),
        (b"", 0, False),
        (b"hello world", 11, False),
        (b"hello world and more", 11, False),
        (CHUNKED, None, True),
        (b"5\r\nhel", None, True),  # cut short
    ],
)
@pytest.mark.parametrize("step", [1, 4, None])
@pytest.mark.parametrize("lines", [False, True])
def test_done_is_whole_after_every_read(
    raw: bytes, length: int | None, chunked: bool, step: int | None, lines: bool
) -> None:
    body = Body(io.BufferedReader(io.BytesIO(raw)), length, None, chunked)
    body.connection = connection = Connection()
    body.done = not chunked and not length  # as the worker makes it
    assert body.done == body.whole
    for _ in range(64):
        try:
            data = body.readline(step) if lines else body.read(step)
        except (ValueError, OSError):
            break
        assert body.done == body.whole
        if not data:
            break
    assert connection.told >= (1 if body.whole and (chunked or length) else 0)
    body._discard()
    assert connection.close_connection == (not body.whole)


@pytest.mark.parametrize("body", [b"", b"{}", b'{"jsonrpc":"2.0","id":1,"result":{}}', bytearray(b"{}"), iter([b"{}"])])
@pytest.mark.parametrize("status", [200, 202, 400, 503])
@pytest.mark.parametrize("headers", [None, {}, {"Mcp-Session-Id": "abc"}, {"Retry-After": "30", "Allow": "POST"}])
def test_a_json_response_is_the_full_constructions(body: Any, status: int, headers: dict[str, str] | None) -> None:
    made, full = json_response(body, status, headers), HttpResponse(status, body, "application/json", headers)
    assert (made.status, made.body, made.headers) == (full.status, full.body, full.headers)
    assert type(made) is HttpResponse


class Started(LeanWrites):
    """What start_response leaves: pywsgi's attributes _started sets."""

    def __init__(self, version: str, close: bool) -> None:
        self.request_version, self.close_connection = version, close
        self.status = self._orig_status = self.provided_date = self.provided_content_length = None
        self.response_headers, self.code = [], 0

    def state(self) -> tuple[Any, ...]:
        return (
            self.status,
            self._orig_status,
            self.response_headers,
            self.code,
            self.provided_date,
            self.provided_content_length,
            self.close_connection,
        )


JSON_TYPE = json_response(b"{}").headers[0]
STARTED_HEADERS: list[Any] = [
    json_response(b"{}").headers,
    json_response(b'{"jsonrpc":"2.0","id":1,"result":{}}', 400).headers,
    json_response(b"{}", headers={"Mcp-Session-Id": "abc"}).headers,
    [JSON_TYPE, ("Content-Length", "0")],
    [JSON_TYPE, ("Content-Length", "")],
    [JSON_TYPE, ("Content-Length", "\u00b2")],  # a superscript two: a digit to str.isdigit, latin-1 encodable
    [JSON_TYPE, ("Content-Length", "12\r\n")],
    [JSON_TYPE, ("Content-Length", "1 2")],
    [JSON_TYPE, ("content-length", "12")],
    [JSON_TYPE, ("Content-Length", 12)],
    [JSON_TYPE, ("Date", "Thu, 03 Dec 2026 07:00:00 GMT")],
    [JSON_TYPE, ("Connection", "close")],
    [JSON_TYPE, ["Content-Length", "12"]],
    [("Content-Type", "application/json"), ("Content-Length", "12")],  # equal, not json_response's own
    [JSON_TYPE, ("Content-Length", "12"), ("X-Other", "y")],
    (JSON_TYPE, ("Content-Length", "12")),
]


@pytest.mark.parametrize("headers", STARTED_HEADERS)
@pytest.mark.parametrize(
    "status", ["200 OK", "204 No Content", "304 Not Modified", "400 Bad Request", "599 Odd", "20x"]
)
@pytest.mark.parametrize(("version", "close"), [("HTTP/1.1", False), ("HTTP/1.0", False), ("HTTP/1.0", True)])
def test_a_json_replys_headers_taken_at_once_are_what_each_one_checked_gives(
    headers: Any, status: str, version: str, close: bool
) -> None:
    for _ in range(2):  # the status line and names made, then remembered
        lean, full = Started(version, close), Started(version, close)
        assert lean._started(status, headers) == full._started_any(status, headers)
        assert lean.state() == full.state()


class Whole(LeanWrites):
    """What _write_whole reads of a started reply, and the bytes it sends."""

    def __init__(self) -> None:
        self.status, self.code, self.command, self.provided_content_length = b"200 OK", 200, "POST", "2"
        self.provided_date, self.response_headers = None, []
        self.sent: list[bytes] = []

    def _sendall(self, data: Any) -> None:
        self.sent.append(bytes(data))


CLOCK = [1_000.0, 1_000.9, 1_001.0, 1_001.5, 999.99, 999.1, 5_000.0, 5_000.0]  # a second gone back among them


def test_a_replys_date_is_the_clocks_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """_write_whole takes the Date formatted for the clock's second without DATE.now()'s call while the second is
    the one formatted: each reply's Date is the second's, as DATE.now() gives it, however the clock moves."""
    readings = iter(CLOCK * 2)
    now = [0.0]

    def clock() -> float:
        return now[0]

    monkeypatch.setattr(writing, "DATE", writing.HttpDate())
    monkeypatch.setattr(time, "time", clock)  # the module's own clock (writing.py reads time.time)
    for reading in readings:
        now[0] = reading
        reply = Whole()
        reply._write_whole(b"{}")
        (head,) = reply.sent
        date = next(line for line in head.split(b"\r\n") if line.startswith(b"Date: "))
        assert date == b"Date: " + format_date_time(int(reading))
        assert writing.HttpDate().now() == format_date_time(int(reading))
