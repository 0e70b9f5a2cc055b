"""Request bodies have a cap on every path (issue 20, finding 1), against a real gunicorn over raw sockets.

The pages (the embedded authorization server's /register, /token, /revoke, /authorize, and any other path that
is not an MCP endpoint) take at most MCPGATE_MAX_FORM_BYTES, the MCP endpoints MCPGATE_MAX_BODY_BYTES; a body
past its cap is answered 413 while the client is still sending it, chunked or declared, and the connection is
closed rather than read to the end. The attack of the issue was a chunked POST /register of 300 MiB, read whole
into the worker; here the body goes on for up to SENT_MAX bytes unless the gateway answers first.
"""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mcpgate.serve.oauth import passwords
from tests.support import Gateway, serving
from tests.support.oauth import embedded_env
from tests.support.security import WAIT, answer_and_close

CAP = 64 * 1024  # MCPGATE_MAX_FORM_BYTES's default
PIECE = 64 * 1024  # bytes of each chunk sent
SENT_MAX = 16 * 1024 * 1024  # bytes of body sent at most before giving up on an answer
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
MCP = "Accept: application/json, text/event-stream\r\n"
PAGES = {  # path: the content type its clients send
    "/register": JSON,
    "/token": FORM,
    "/revoke": FORM,
    "/authorize": FORM,
    "/healthz": JSON,
    "/no-such-page": JSON,
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    state: Path = tmp_path_factory.mktemp("bodies") / "state"
    users = f"alice:{passwords.make_hash('correct horse battery staple')}"
    with serving(
        embedded_env(state, users, MCPGATE_BODY_TIMEOUT="600"), behind=True
    ) as gw:  # only the cap may end a body here
        yield gw


def head(port: int, path: str, content_type: str, framing: str, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n{extra}{framing}\r\n"
    ).encode()


def chunked_until_answered(port: int, path: str, content_type: str, extra: str = "") -> tuple[bytes, int, bool]:
    """A chunked body of PIECE-byte chunks, sent until the gateway answers (or SENT_MAX bytes, never ended): the
    answer, the bytes sent, and whether the connection was closed."""
    piece = b"%x\r\n" % PIECE + b"a" * PIECE + b"\r\n"
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(head(port, path, content_type, "Transfer-Encoding: chunked\r\n", extra))
        while sent < SENT_MAX and not select.select([sock], [], [], 0)[0]:
            try:
                sock.sendall(piece)
            except OSError:  # the gateway closed the connection: its answer is there to read
                break
            sent += PIECE
        answer, closed = answer_and_close(sock)
    return answer, sent, closed


def json_body(answer: bytes) -> dict[str, object]:
    head_bytes, _, body = answer.partition(b"\r\n\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in head_bytes, answer
    value = json.loads(body)
    assert isinstance(value, dict), answer
    return value


@pytest.mark.parametrize("path", PAGES)
def test_a_chunked_page_body_past_the_cap_is_refused_before_it_ends(embedded: Gateway, path: str) -> None:
    answer, sent, closed = chunked_until_answered(embedded.port, path, PAGES[path])
    assert sent < SENT_MAX, f"no answer to {path} before {sent} bytes of body were sent"
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert json_body(answer)["error"] == "invalid_request", answer
    assert b"\r\nConnection: close\r\n" in answer and closed, answer


@pytest.mark.parametrize("path", PAGES)
def test_a_declared_page_body_past_the_cap_is_refused_at_once(embedded: Gateway, path: str) -> None:
    with socket.create_connection(("127.0.0.1", embedded.port), timeout=WAIT) as sock:
        sock.sendall(head(embedded.port, path, PAGES[path], f"Content-Length: {CAP + 1}\r\n") + b"a")
        answer, closed = answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert json_body(answer)["error"] == "invalid_request", answer
    assert b"\r\nConnection: close\r\n" in answer and closed, answer


def test_bodies_within_the_cap_still_register_a_client(embedded: Gateway) -> None:
    """A registration under the cap is served, declared or chunked (read whole before the page runs)."""
    metadata = {
        "client_name": "Bodies test",
        "redirect_uris": ["http://127.0.0.1:47111/callback"],
        "token_endpoint_auth_method": "none",
    }
    raw = json.dumps(metadata).encode()
    for framing, body in (
        (f"Content-Length: {len(raw)}\r\n", raw),
        ("Transfer-Encoding: chunked\r\n", b"%x\r\n%s\r\n0\r\n\r\n" % (len(raw), raw)),
    ):
        with socket.create_connection(("127.0.0.1", embedded.port), timeout=WAIT) as sock:
            sock.sendall(head(embedded.port, "/register", JSON, framing, "Connection: close\r\n") + body)
            answer, _ = answer_and_close(sock)
        assert answer.startswith(b"HTTP/1.1 201"), answer
        assert json_body(answer)["client_name"] == "Bodies test", answer


def test_a_chunked_endpoint_body_past_its_cap_is_refused_and_closed(gateway_factory: Callable[..., Gateway]) -> None:
    """The MCP endpoint's own cap (MCPGATE_MAX_BODY_BYTES): 413 with a JSON-RPC error, and closed, not drained."""
    gw = gateway_factory({"MCPGATE_MAX_BODY_BYTES": str(4 * PIECE), "MCPGATE_BODY_TIMEOUT": "600"})
    answer, sent, closed = chunked_until_answered(gw.port, "/mcp", JSON, MCP)
    assert sent < SENT_MAX and answer.startswith(b"HTTP/1.1 413"), answer
    assert json_body(answer)["error"] == {
        "code": -32600,
        "message": f"Payload Too Large: the body exceeds {4 * PIECE} bytes",
    }, answer
    assert b"\r\nConnection: close\r\n" in answer and closed, answer
