"""A large result in an SSE reply, through a real gateway: its event is sent apart from its chunk's framing
(serve/front/writing.py `_write`, a chunk of more than JOINED bytes) and encoded with one copy (core/sse.py),
and still reads as the one event it is, on both eras' SSE replies (every reply SSE: MCPGATE_SSE_AFTER=0)."""

from __future__ import annotations

import http.client
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mcpgate.core.sse import SseDecoder
from mcpgate.serve.front.writing import JOINED
from tests.support import Gateway

BENCH = Path(__file__).resolve().parent.parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import mcpclient  # noqa: E402

CHILD = [sys.executable, "-S", str(BENCH / "child_server.py")]


def sse_messages(resp: http.client.HTTPResponse) -> list[dict]:
    """The messages of an SSE reply, read by the gateway's own strict decoder (http.client undoes the chunks)."""
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream")
    assert resp.getheader("Transfer-Encoding") == "chunked"
    decoder = SseDecoder(16 * 1024 * 1024)
    events = decoder.feed(resp.read()) + decoder.feed(b"")
    return [json.loads(event.data) for event in events if event.data]


@pytest.mark.parametrize("kind", ["2025", "2026"])
@pytest.mark.parametrize("size", [JOINED - 200, JOINED + 1, 3 * 1024 * 1024 + 5])
def test_a_large_result_is_one_sse_event(gateway_factory: Callable[..., Gateway], kind: str, size: int) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": shlex.join(CHILD), "MCPGATE_SSE_AFTER": "0"})
    client = {"2025": mcpclient.HttpSession, "2026": mcpclient.StatelessSession}[kind](gw.port)
    try:
        client.initialize()
        if kind == "2025":
            body, headers = mcpclient.blob_body(7, size), client.headers
        else:
            body, headers = mcpclient.modern_blob_body(7, size), client.blob_headers
        client.conn.request("POST", "/mcp", body, headers)
        messages = sse_messages(client.conn.getresponse())
        answers = [m for m in messages if m.get("id") == 7]
        assert len(answers) == 1
        assert answers[0]["result"]["content"][0]["text"] == ("0123456789abcdef" * (size // 16 + 1))[:size]
        client.echo("after")  # the connection carries the next request: the chunked body ended where it said
    finally:
        client.close()
