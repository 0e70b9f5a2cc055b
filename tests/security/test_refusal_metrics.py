"""Issue 28: what the hostile-network defences refuse is counted in /metrics by kind (mcpgate_refusals_total), so an
operator sees an attack. Each kind is provoked for real against `gunicorn mcpgate.wsgi` (raw sockets for what the
worker refuses before the application: framing, header limits, a slow client; HTTP for the rest: a body too
large, a Host or Origin not allowed, a rate limit) and the scrape after it shows that kind, and only it, one more."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import Gateway, send, serving
from tests.support.oauth import embedded_env
from tests.support.security import USERS, WAIT, answer_and_close, public_client, register

KINDS = ("framing", "header_limits", "slow_client", "host", "origin", "body_too_large", "rate_limit")
SERIES_KINDS = (*KINDS, "connection_budget")  # that one provoked in tests/observe/test_refusal_budget.py
SERIES = re.compile(r'^mcpgate_refusals_total\{kind="([a-z_]+)"\} ([0-9.e+]+)$', re.MULTILINE)
CALLBACK = "http://127.0.0.1:47313/callback"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = embedded_env(
        tmp_path_factory.mktemp("state"),
        USERS,
        MCPGATE_METRICS="true",
        MCPGATE_HEADER_TIMEOUT="1",
        MCPGATE_MAX_FORM_BYTES="1024",
        MCPGATE_OAUTH_REGISTER_LIMIT="1",
    )
    with serving(env, behind=True) as served:
        yield served


def refused(gw: Gateway) -> dict[str, int]:
    reply = gw.request("GET", "/metrics")
    assert reply.status == 200, reply
    return {kind: int(float(count)) for kind, count in SERIES.findall(reply.body.decode())}


def raw(gw: Gateway, data: bytes) -> bytes:
    """`data` on a new connection; what the worker answered before closing it."""
    with socket.create_connection(gw.address(), timeout=WAIT) as sock:
        sock.sendall(data)
        answer, closed = answer_and_close(sock)
    assert closed, answer
    return answer


def framing(gw: Gateway) -> None:
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert raw(gw, head.encode()).startswith(b"HTTP/1.1 400")


def header_limits(gw: Gateway) -> None:
    head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\nX-Long: {'a' * 9000}\r\n\r\n"
    assert raw(gw, head.encode()).startswith(b"HTTP/1.1 400")


def slow_client(gw: Gateway) -> None:
    """Half a head, then nothing: closed at MCPGATE_HEADER_TIMEOUT."""
    raw(gw, f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n".encode())


def host(gw: Gateway) -> None:
    assert send("127.0.0.1", gw.port, "GET", "/healthz", headers={"Host": "rebound.example"}).status == 421


def origin(gw: Gateway) -> None:
    assert send("127.0.0.1", gw.port, "GET", "/healthz", headers={"Origin": "http://evil.example"}).status == 403


def body_too_large(gw: Gateway) -> None:
    assert send("127.0.0.1", gw.port, "POST", "/register", b"{" + b" " * 4096 + b"}", {}).status == 413


def rate_limit(gw: Gateway) -> None:
    assert register(gw.port, public_client(CALLBACK), source="127.0.0.9").status == 201
    assert register(gw.port, public_client(CALLBACK), source="127.0.0.9").status == 429


PROVOKE: dict[str, Callable[[Gateway], None]] = {
    "framing": framing,
    "header_limits": header_limits,
    "slow_client": slow_client,
    "host": host,
    "origin": origin,
    "body_too_large": body_too_large,
    "rate_limit": rate_limit,
}


def test_every_kind_is_a_series_from_the_start(gw: Gateway) -> None:
    assert set(refused(gw)) == set(SERIES_KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_refusal_is_counted_by_its_kind(gw: Gateway, kind: str) -> None:
    before = refused(gw)
    PROVOKE[kind](gw)
    after = refused(gw)
    assert {k: after[k] - before.get(k, 0) for k in after} == {k: int(k == kind) for k in SERIES_KINDS}


def test_the_metric_is_documented() -> None:
    readme = (Path(__file__).resolve().parent.parent.parent / "README.md").read_text()
    assert "mcpgate_refusals_total" in readme
