"""Slow bodies (issue 20, finding 2) against a real gunicorn, over raw sockets: sockets that send a request head
and then trickle its body a byte at a time must not lock everyone out, a body must arrive at a minimum rate, and
a request refused before its body was read is answered and closed, never drained at the client's pace.

The attack is the issue's 2,000 sockets scaled to a worker of 40 connections whose budget of waiting connections
is 10: 60 sockets, each trickling one body byte per round and reopened when the worker closes it, and a bystander
that opens a session and calls a tool, each call served within the issue's second throughout.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Callable

import pytest

from tests.support import Gateway, call, open_session, sse_messages
from tests.support.security import WAIT, answer_and_close

BYSTANDER_BOUND = 1.0  # seconds: the bound on serving the bystander while the attack runs
MCP = "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
DECLARED = 100_000  # bytes each slow body declares (under every cap: only its pace is wrong)
ROUNDS = 20


def head(port: int, path: str, length: int) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{MCP}Content-Length: {length}\r\n\r\n".encode()


class Trickle:
    """`count` sockets, each sending a head (for `paths` in turn) and then one body byte per `tick`; one the worker
    answered or closed is reopened, so the attack keeps its size."""

    def __init__(self, port: int, count: int, paths: list[str]) -> None:
        self.port, self.paths = port, paths
        self.socks: list[socket.socket | None] = [None] * count
        self.reopened = 0

    def _open(self, index: int) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        sock.sendall(head(self.port, self.paths[index % len(self.paths)], DECLARED))
        self.socks[index] = sock

    def tick(self) -> None:
        """Reopen the sockets the worker answered or closed, then send one body byte on each."""
        live = [sock for sock in self.socks if sock is not None]
        answered = set(select.select(live, [], [], 0)[0]) if live else set()
        for index, sock in enumerate(self.socks):
            if sock is not None and sock not in answered:
                try:
                    sock.sendall(b" ")
                    continue
                except OSError:
                    pass
            if sock is not None:
                sock.close()
                self.reopened += 1
            self._open(index)
            self.socks[index].sendall(b" ")  # type: ignore[union-attr]

    def close(self) -> None:
        for sock in self.socks:
            if sock is not None:
                sock.close()


def bystander_call(gw: Gateway, headers: dict[str, str], message: str, timeout: float) -> None:
    reply = gw.request("POST", body=call("echo", {"message": message}), headers=headers, timeout=timeout)
    assert reply.status == 200, (reply, gw.log_tail())
    body = sse_messages(reply.body)[-1] if reply.content_type.startswith("text/event-stream") else reply.json()
    assert body["result"]["content"][0]["text"] == message, reply


def test_slow_bodies_cannot_lock_out_a_bystander(gateway_factory: Callable[..., Gateway]) -> None:
    """More slow-body sockets than the worker has connections (the header and pause timeouts long, so only the
    budget can help): the longest-waiting ones are closed, and the bystander is served within the bound."""
    gw = gateway_factory(
        {
            "MCPGATE_WORKER_CONNECTIONS": "40",
            "MCPGATE_IDLE_CONNECTIONS": "10",
            "MCPGATE_HEADER_TIMEOUT": "600",
            "MCPGATE_BODY_TIMEOUT": "600",
        }
    )
    attack = Trickle(gw.port, 60, ["/mcp", "/healthz"])  # an endpoint's body and a page's
    try:
        attack.tick()
        headers = open_session(gw)
        for round_no in range(ROUNDS):
            attack.tick()
            bystander_call(gw, headers, f"round {round_no}", BYSTANDER_BOUND)
        assert attack.reopened > 0  # the worker closed slow bodies to make room
    finally:
        attack.close()


def test_a_body_below_the_minimum_rate_is_cut_off(gateway_factory: Callable[..., Gateway]) -> None:
    """One byte at a time, each well inside the pause allowed: the body's minimum rate still ends it (400)."""
    gw = gateway_factory({"MCPGATE_BODY_TIMEOUT": "2", "MCPGATE_BODY_MIN_RATE": "100"})
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(head(gw.port, "/mcp", DECLARED))
        sock.settimeout(0.25)  # a byte per quarter second, until the worker answers
        answer, sent = b"", 0
        while not answer and sent < WAIT / 0.25:
            try:
                sock.sendall(b" ")
                sent += 1
                answer = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
        assert answer.startswith(b"HTTP/1.1 400"), (sent, answer, gw.log_tail())
    assert "Invalid request from ip=127.0.0.1: timed out" in gw.log()


@pytest.mark.parametrize(("path", "status"), [("/mcp", 401), ("/healthz", 413)])
def test_a_refused_body_is_not_drained(gateway_factory: Callable[..., Gateway], path: str, status: int) -> None:
    """A request refused before its body was read (no token; a page's body over its cap) is answered, then the
    connection closes at once: the body it declared is never waited for."""
    gw = gateway_factory({"MCPGATE_AUTH_TOKEN": "t" * 40, "MCPGATE_BODY_TIMEOUT": "600"})
    with socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(head(gw.port, path, 1_000_000) + b"{")
        answer, closed = answer_and_close(sock)
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer
    assert b"\r\nConnection: close\r\n" in answer and closed, (answer, closed)
