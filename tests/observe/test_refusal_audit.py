"""Issue 28: what the worker's reader refuses before any request reaches the Endpoint (a request framed two ways, a
header past its limit, a head not sent in time) and a connection closed for the waiting-connections budget each
have a line in the audit log, as the Endpoint's refusals do: event "refused", the kind /metrics counts it under,
the status answered (none for the budget's: closed unanswered), the remote address; nothing the client sent.
Provoked for real with raw sockets against `gunicorn mcpgate.wsgi`."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Gateway, serving, wait_for
from tests.support.security import WAIT, answer_and_close

SECRET = "refused-request-secret-4711"  # in what each refused client sends: never in the log
BUDGET = 2


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    path = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    env = {
        "MCPGATE_AUDIT_LOG": str(path),
        "MCPGATE_INSTANCE_ID": "refusals-i1",
        "MCPGATE_HEADER_TIMEOUT": "1",
        "MCPGATE_IDLE_CONNECTIONS": str(BUDGET),
    }
    with serving(env) as gw:
        yield gw, path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def raw(gw: Gateway, data: bytes) -> bytes:
    """`data` on a new connection; what the worker answered before closing it."""
    with socket.create_connection(gw.address(), timeout=WAIT) as sock:
        sock.sendall(data)
        answer, closed = answer_and_close(sock)
    assert closed, answer
    return answer


def refused_since(path: Path, before: int, count: int) -> list[dict[str, Any]]:
    wait_for(lambda: len(lines(path)) >= before + count, timeout=30, what="the refusals' audit lines")
    return [line for line in lines(path)[before:] if line["event"] == "refused"]


def test_the_readers_refusals_have_a_line_each(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))
    host = f"Host: 127.0.0.1:{gw.port}\r\nAuthorization: Bearer {SECRET}\r\n"
    framed_twice = f"POST /mcp?{SECRET} HTTP/1.1\r\n{host}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert raw(gw, framed_twice.encode()).startswith(b"HTTP/1.1 400")
    too_long = f"GET /healthz HTTP/1.1\r\n{host}X-Long: {SECRET}{'a' * 9000}\r\n\r\n"
    assert raw(gw, too_long.encode()).startswith(b"HTTP/1.1 400")
    raw(gw, f"GET /healthz?{SECRET} HTTP/1.1\r\n{host}".encode())  # half a head: closed at the header timeout
    written = refused_since(path, before, 3)
    assert [(line["kind"], line["status"]) for line in written] == [
        ("framing", 400),
        ("header_limits", 400),
        ("slow_client", 400),
    ]
    for line in written:
        assert line["outcome"] == "refused" and line["instance"] == "refusals-i1" and line["time"].endswith("Z")
        assert line["remote"] == "127.0.0.1" and line["method"] is None and line["principal"] is None
    assert SECRET not in path.read_text()


def test_a_connection_closed_for_the_budget_has_a_line(audited: tuple[Gateway, Path]) -> None:
    gw, path = audited
    before = len(lines(path))
    waiting = [socket.create_connection(gw.address(), timeout=WAIT) for _ in range(BUDGET + 1)]
    try:
        ready, _, _ = select.select(waiting, [], [], WAIT)  # one more than the budget: the longest-waiting closed
        assert ready, "no connection was closed for the budget"
        written = refused_since(path, before, 1)
    finally:
        for sock in waiting:
            sock.close()
    budget = [line for line in written if line["kind"] == "connection_budget"]
    assert budget and budget[0]["status"] is None and budget[0]["remote"] == "127.0.0.1"
