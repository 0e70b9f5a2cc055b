"""Nothing lost or late on the pooled path (issue 22), through gunicorn mcpgate.wsgi and a legacy stdio child of the
tests' own (tests/fixtures/order_server.py: fast, and it names on stderr, in order, what it receives):

- progress: twelve concurrent 2026-07-28 tools/calls with four progress steps each, a hundred rounds; half of them
  ask their client for roots mid-call without waiting (as server-everything asks on its own), so the bridge parks
  the call while the child goes on writing progress: every step reaches the call's client, in order, under the
  token of the request whose stream carries it (the retry's, after the retry), before the result;
- cancellation: a client that closes its response stream (a JSON reply still pending, or an SSE stream) and at
  once sends another request: the child hears notifications/cancelled before that request."""

from __future__ import annotations

import http.client
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import (
    FIXTURES,
    Gateway,
    lazy_gateways,
    modern_body,
    modern_headers,
    post_modern,
    reply_message,
    reply_messages,
    wait_for,
)

ORDER = f"{sys.executable} {FIXTURES / 'order_server.py'}"
CALLS = 12
ROUNDS = 100
STEPS = 4
ENVS = {
    # room for every call at once: a call that may ask its client for input takes a legacy child to itself
    "progress": {"MCPGATE_COMMAND": ORDER, "MCPGATE_POOL_CHILDREN": str(CALLS), "MCPGATE_POOL_SPARES": "0"},
    "cancel": {"MCPGATE_COMMAND": ORDER},
}


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways(ENVS) as get:
        yield get


def steps_call(tag: str, token: str, ask_roots: bool) -> dict[str, Any]:
    # the pause after asking outlasts the bridge's gathering of input requests (50 ms): the rest of the progress
    # is written while the call is parked
    arguments = {"tag": tag, "n": STEPS, "delay": 0.005, "ask_roots": ask_roots, "pause": 0.08}
    # only a client that declared roots may be asked for them: a call that will ask needs a child to itself
    caps = {"roots": {}} if ask_roots else None
    body = modern_body(tag, "tools/call", {"name": "steps", "arguments": arguments}, caps=caps)
    body["params"]["_meta"]["progressToken"] = token
    return body


def one_call(gw: Gateway, tag: str, ask_roots: bool) -> list[int]:
    """The progress steps the call's client saw, over its request and its retry; the tokens and result checked."""
    body, token, seen = steps_call(tag, f"t-{tag}", ask_roots), f"t-{tag}", []
    for attempt in range(3):
        reply = post_modern(gw, body)
        messages = reply_messages(reply)
        for message in messages[:-1]:
            assert message.get("method") == "notifications/progress", reply
            assert message["params"]["progressToken"] == token, (token, reply)  # its own request's token
            seen.append(message["params"]["progress"])
        assert "result" in messages[-1], reply
        result = messages[-1]["result"]
        if result.get("resultType") != "input_required":
            assert result["content"][0]["text"] == f"steps {tag} done", reply
            return seen
        ((key, request),) = result["inputRequests"].items()
        assert request["method"] == "roots/list", reply
        token = f"t-{tag}-retry{attempt}"
        body = steps_call(tag, token, ask_roots)
        body["id"] = f"{tag}-retry{attempt}"
        body["params"].update(inputResponses={key: {"roots": []}}, requestState=result["requestState"])
    raise AssertionError(f"{tag}: still asking for input after 3 rounds")


def test_every_progress_step_of_concurrent_calls_reaches_its_client(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("progress")
    lost: list[str] = []
    seen: dict[str, list[int] | Exception] = {}

    def run(tag: str, ask_roots: bool) -> None:
        try:
            seen[tag] = one_call(gw, tag, ask_roots)
        except Exception as exc:  # noqa: BLE001 - reported below, with the round
            seen[tag] = exc

    for round_number in range(ROUNDS):
        seen.clear()
        threads = [threading.Thread(target=run, args=(f"r{round_number}-c{n}", n % 2 == 0)) for n in range(CALLS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for tag, steps in sorted(seen.items()):
            if isinstance(steps, Exception):
                raise AssertionError(f"{tag}: {steps}\n{gw.log_tail(60)}") from steps
            if steps != list(range(1, STEPS + 1)):
                lost.append(f"{tag}: {steps}")
    assert not lost, f"{len(lost)} of {ROUNDS * CALLS} calls lost or reordered progress: {lost[:20]}"


def fixture_heard(gw: Gateway) -> list[str]:
    """What the child received, in order (order_server.py's stderr lines)."""
    return re.findall(r"order-fixture got (.+)$", gw.log(), re.MULTILINE)


@pytest.mark.parametrize("reply_kind", ["json", "sse"])
def test_a_closed_stream_cancels_the_call_before_the_next_request_arrives(
    gateways: Callable[[str], Gateway], reply_kind: str
) -> None:
    gw = gateways("cancel")
    tag = f"held-{reply_kind}"
    body = modern_body(tag, "tools/call", {"name": "hold", "arguments": {"tag": tag, "progress": reply_kind == "sse"}})
    body["params"]["_meta"]["progressToken"] = tag
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=modern_headers("tools/call", "hold"))
        if reply_kind == "sse":  # the first progress turned the reply into an SSE stream
            response = conn.getresponse()
            assert response.getheader("content-type", "").startswith("text/event-stream"), response.status
            assert b"notifications/progress" in b"".join(response.readline() for _ in range(2)), response.status
        assert wait_for(lambda: f"tools/call hold {tag}" in fixture_heard(gw)), gw.log_tail()
    finally:
        conn.close()  # the client is gone: the call is cancelled
    after = f"after-{reply_kind}"
    answered = post_modern(gw, modern_body(after, "tools/call", {"name": "echo", "arguments": {"tag": after}}))
    assert reply_message(answered)["result"]["content"][0]["text"] == f"echo {after}", answered
    both = (f"notifications/cancelled {tag}", f"tools/call echo {after}")
    assert wait_for(lambda: all(line in fixture_heard(gw) for line in both)), gw.log_tail()  # its stderr, logged
    heard = fixture_heard(gw)
    assert heard.index(f"notifications/cancelled {tag}") < heard.index(f"tools/call echo {after}"), heard
