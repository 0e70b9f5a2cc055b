"""A request the worker refuses is one line in the error log, and one in the access log when it is on (issue 20,
finding 16): no traceback, whatever the refusal (the request line, a header, a request line past its limit, a
body cut short), against a real gunicorn over raw sockets, with gunicorn's access log on and off."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from tests.support import Gateway, wait_for
from tests.support.security import WAIT, answer_and_close

MCP = "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
ACCESS_LINE = re.compile(r'^127\.0\.0\.1 - - \[[^]]+\] "(?P<request>[^"]*)" (?P<status>\d{3}) ')


class Case(NamedTuple):
    data: bytes  # {host} is filled in
    status: str  # of the answer, and of the access-log line
    reason: str  # the end of the error-log line
    request: str  # the access-log line's request field


CASES = {
    "a request line with two spaces": Case(
        b"GET  /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n", "400", "Invalid request line", "- GET  /healthz HTTP/1.1 -"
    ),
    "a NUL in a field": Case(
        b"GET /healthz HTTP/1.1\r\nHost: {host}\r\nX-Thing: a\x00b\r\n\r\n",
        "400",
        "Invalid headers status: 'Invalid header value'",
        "GET /healthz HTTP/1.1",
    ),
    "a request line past its limit": Case(
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: {host}\r\n\r\n", "414", "Request line too long", "- GET /aaa"
    ),
    "a body cut short": Case(
        f"POST /mcp HTTP/1.1\r\nHost: {{host}}\r\n{MCP}Content-Length: 100\r\n\r\n{{".encode(),
        "400",
        "unexpected end of file while reading request at position 1",
        "POST /mcp HTTP/1.1",
    ),
}


class Logging(NamedTuple):
    gw: Gateway
    access: bool  # gunicorn's access log is on (to stderr, so in the gateway's log)


@pytest.fixture(scope="module", params=["access log on", "access log off"])
def logging(request: pytest.FixtureRequest) -> Iterator[Logging]:
    access = request.param == "access log on"
    gw = Gateway({"MCPGATE_ACCESS_LOG": "-"} if access else {})
    try:
        gw.wait_ready()
        if access:  # the readiness probe's line is written once its answer is sent: not to count in a test's
            assert wait_for(lambda: '"GET /healthz HTTP/1.1" 200' in gw.log(), WAIT), gw.log_tail()
        yield Logging(gw, access)
    finally:
        gw.stop()


def send(gw: Gateway, data: bytes) -> bytes:
    """Send `data` on a new connection, close the sending side, and read until the worker closes."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=WAIT) as sock:
        sock.sendall(data.replace(b"{host}", f"127.0.0.1:{gw.port}".encode()))
        sock.shutdown(socket.SHUT_WR)
        received, _ = answer_and_close(sock)
    return received


@pytest.mark.parametrize("name", CASES)
def test_a_refused_request_is_one_line_per_log(logging: Logging, name: str) -> None:
    case, (gateway, access) = CASES[name], logging
    start = len(gateway.log())
    answer = send(gateway, case.data)
    assert answer.startswith(f"HTTP/1.1 {case.status} ".encode()), answer
    expected = 2 if access else 1

    def logged() -> list[str]:
        return gateway.log()[start:].splitlines()

    assert wait_for(lambda: len(logged()) >= expected, WAIT), logged()
    lines = logged()
    assert "Traceback" not in "\n".join(lines) and len(lines) == expected, lines
    errors = [line for line in lines if "[WARNING] Invalid request from ip=127.0.0.1: " in line]
    assert len(errors) == 1 and errors[0].endswith(case.reason), lines
    if access:
        found = [match for line in lines if (match := ACCESS_LINE.match(line))]
        assert len(found) == 1 and found[0]["status"] == case.status, lines
        assert found[0]["request"].startswith(case.request), lines
