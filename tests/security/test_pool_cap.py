"""A global cap on pooled children across principals (issue 20, finding 15): MCPGATE_POOL_CHILDREN bounds one
principal's children, MCPGATE_POOL_CHILDREN_TOTAL all of them together, so N principals cannot start N times
the per-principal limit.

A real gunicorn in OAuth resource-server mode (tests/fixtures/oidc_issuer.py mints a token per principal) with
the bundled demo child; the test counts the worker's real child processes all along (a sampler thread), not
what the gateway says it has. Past the cap the least recently used idle child of another principal is stopped
to make room; when every child is busy, a request waits MCPGATE_POOL_WAIT and gets 503 with Retry-After."""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import Gateway, Reply, direct_children, modern_body, modern_headers, reply_message, serving
from tests.support.oauth import principal_tokens, resource_server_env

TOTAL = 2
PRINCIPALS = ("ann", "ben", "cat", "dan")
MADE_ROOM = re.compile(r"pooled child (\S+) stopped to make room")
FOR_PRINCIPAL = re.compile(r"pooled child (\S+) started for principal \S+#(\w+) ")


@pytest.fixture(scope="module")
def gw(issuer: str) -> Iterator[Gateway]:
    pool = {
        "MCPGATE_POOL_CHILDREN": "2",
        "MCPGATE_POOL_CHILDREN_TOTAL": str(TOTAL),
        "MCPGATE_POOL_CHILD_REQUESTS": "1",
        "MCPGATE_POOL_SPARES": "0",
        "MCPGATE_POOL_WAIT": "2",
    }
    with serving(resource_server_env(issuer, **pool), behind=True) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def tokens(issuer: str, gw: Gateway) -> dict[str, str]:
    return principal_tokens(issuer, gw, PRINCIPALS)


class ProcessCount:
    """The most child processes the gateway's worker had at once, sampled by a thread until stop()."""

    def __init__(self, gw: Gateway) -> None:
        [self.worker] = direct_children(gw.proc.pid)
        self.most = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def now(self) -> int:
        return len(direct_children(self.worker))

    def _sample(self) -> None:
        while not self._done.wait(0.01):
            self.most = max(self.most, self.now())

    def stop(self) -> int:
        self._done.set()
        self._thread.join(10)
        return self.most


@pytest.fixture
def count(gw: Gateway) -> Iterator[ProcessCount]:
    counter = ProcessCount(gw)
    try:
        yield counter
    finally:
        counter.stop()


def headers(token: str, body: dict[str, Any]) -> dict[str, str]:
    return {**modern_headers(body["method"], body["params"].get("name")), "Authorization": f"Bearer {token}"}


def echo(gw: Gateway, token: str, msg_id: str) -> Reply:
    body = modern_body(msg_id, "tools/call", {"name": "echo", "arguments": {"message": msg_id}})
    return gw.request("POST", body=body, headers=headers(token, body))


def echoed(reply: Reply, msg_id: str) -> None:
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and msg_id in json.dumps(message.get("result")), reply


class Busy:
    """A long `slow` call holding one child of `token`'s principal: open once its first progress has arrived."""

    def __init__(self, gw: Gateway, token: str, msg_id: str) -> None:
        body = modern_body(msg_id, "tools/call", {"name": "slow", "arguments": {"seconds": 60, "steps": 60}})
        body["params"]["_meta"]["progressToken"] = msg_id
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        self.conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=headers(token, body))
        self.resp = self.conn.getresponse()  # SSE from the first progress notification on: the child works on it
        assert self.resp.status == 200 and self.resp.getheader("content-type", "").startswith("text/event-stream")

    def close(self) -> None:
        self.conn.close()


def owners(gw: Gateway) -> dict[str, str]:
    """Each pooled child's principal (its label -> the token's subject), from the gateway's log."""
    return dict(FOR_PRINCIPAL.findall(gw.log()))


def test_principals_past_the_total_take_the_least_recently_used_idle_child(
    gw: Gateway, tokens: dict[str, str], count: ProcessCount
) -> None:
    for name in PRINCIPALS:  # four principals, one after another: each needs a child, two fit
        echoed(echo(gw, tokens[name], f"{name}-1"), f"{name}-1")
    echoed(echo(gw, tokens["ann"], "ann-2"), "ann-2")  # ann's child went for cat's: she gets one back
    assert count.stop() <= TOTAL, gw.log_tail()
    made_room = [owners(gw)[label] for label in MADE_ROOM.findall(gw.log())]
    assert made_room == ["ann", "ben", "cat"], gw.log_tail()  # always the least recently used one


def test_when_every_child_is_busy_a_request_waits_then_gets_503(
    gw: Gateway, tokens: dict[str, str], count: ProcessCount
) -> None:
    busy = [Busy(gw, tokens["ann"], "ann-busy"), Busy(gw, tokens["ben"], "ben-busy")]
    try:
        reply = echo(gw, tokens["cat"], "cat-wait")
        assert reply.status == 503 and reply.headers.get("retry-after"), reply
        error = reply_message(reply)
        assert error.get("id") == "cat-wait" and error["error"]["code"] == -32603, reply
        assert "MCPGATE_POOL_CHILDREN_TOTAL" in error["error"]["message"], reply
        assert count.now() <= TOTAL
    finally:
        for call in busy:
            call.close()
    # once a busy call is cancelled (its stream closed), its child is idle again and makes room
    reply = echo(gw, tokens["cat"], "cat-after")
    echoed(reply, "cat-after")
    assert count.stop() <= TOTAL, gw.log_tail()
