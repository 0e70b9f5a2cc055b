"""A graceful stop drains (issue 15): on SIGTERM the instance keeps its listener, answers /healthz 503
"draining", refuses new sessions and new 2026-07-28 calls with 503 + Retry-After, serves the open sessions'
requests and lets in-flight calls (and a call parked for its client's input) finish, stays in the fleet's
directory until the drain ends; then, with nothing in flight or when the drain's time is up, its children stop."""

from __future__ import annotations

import http.client
import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mcpgate.serve.front.worker import drain_budget
from tests.support import (
    HEADERS,
    Gateway,
    Reply,
    direct_children,
    init_body,
    modern_body,
    open_session,
    post_modern,
    reply_message,
    wait_dead,
    wait_for,
)
from tests.support.fleet import redis_server

ELICIT = {"elicitation": {}}


@pytest.mark.parametrize(
    ("graceful", "ladder", "budget"),
    [(15.0, 6.0, 9.0), (6.0, 3.0, 3.0), (3.0, 6.0, 0.0), (6.0, 6.0, 0.0)],
)
def test_drain_budget(graceful: float, ladder: float, budget: float) -> None:
    assert drain_budget(graceful, ladder) == budget


class SlowCall:
    """A legacy tools/call of the demo's `slow` tool, read as an SSE stream (its first progress event tells
    the call is in flight)."""

    def __init__(self, gw: Gateway, headers: dict[str, str], seconds: float, steps: int) -> None:
        arguments = {"seconds": seconds, "steps": steps}
        params = {"name": "slow", "arguments": arguments, "_meta": {"progressToken": "p"}}
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        self.conn.request("POST", "/mcp", body=json.dumps(body), headers=headers)
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.status
        assert self.response.getheader("Content-Type", "").startswith("text/event-stream")
        first = self.next()
        assert first is not None and first.get("method") == "notifications/progress", first

    def next(self) -> dict[str, Any] | None:
        while True:
            line = self.response.readline()
            if not line:
                return None
            if line.startswith(b"data:") and line[5:].strip():  # a priming event carries no data
                return dict(json.loads(line[5:]))

    def outcome(self) -> dict[str, Any]:
        """The response to the call (the last message of the stream)."""
        last: dict[str, Any] = {}
        while (message := self.next()) is not None:
            last = message
            if "id" in message and message.get("id") == 7:
                break
        self.conn.close()
        return last


def healthz(gw: Gateway) -> Reply:
    return gw.request("GET", "/healthz")


def draining(gw: Gateway) -> bool:
    reply = healthz(gw)
    return reply.status == 503 and reply.json().get("status") == "draining"


def refused_as_draining(reply: Reply) -> None:
    assert reply.status == 503 and reply.headers.get("retry-after"), reply
    assert "shutting down" in reply.json()["error"]["message"], reply


def stopped_cleanly(gw: Gateway, pids: list[int]) -> None:
    gw.proc.wait(30)
    assert "graceful timeout" not in gw.log(), gw.log_tail()
    assert wait_dead(pids) == [], gw.log_tail()


def test_a_legacy_call_in_flight_finishes_and_open_sessions_are_served(gateway_factory: Any) -> None:
    gw = gateway_factory()
    assert healthz(gw).status == 200
    headers = open_session(gw)
    [worker] = direct_children(gw.proc.pid)
    slow = SlowCall(gw, headers, seconds=4, steps=8)
    children = direct_children(worker)
    gw.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: draining(gw)), gw.log_tail()
    refused_as_draining(gw.request("POST", body=init_body(), headers=HEADERS))
    ping = gw.request("POST", body={"jsonrpc": "2.0", "id": 8, "method": "ping"}, headers=headers)
    assert ping.status == 200 and reply_message(ping).get("result") == {}, ping
    result = slow.outcome()
    assert result.get("result", {}).get("content", [{}])[0].get("text") == "done after 4 s", result
    stopped_cleanly(gw, [worker, *children])
    assert "draining (1 requests in flight" in gw.log(), gw.log_tail()


def ask_name(msg_id: Any, **retry: Any) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": "ask_name", "arguments": {}, **retry}, caps=ELICIT)


def test_a_call_parked_for_input_is_resumed_while_draining(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_POOL_SPARES": "0"})
    asked = reply_message(post_modern(gw, ask_name("a-1")))["result"]
    assert asked["resultType"] == "input_required", asked
    ((key, _request),) = asked["inputRequests"].items()
    [worker] = direct_children(gw.proc.pid)
    children = direct_children(worker)
    gw.proc.send_signal(signal.SIGTERM)
    assert wait_for(lambda: draining(gw)), gw.log_tail()
    refused_as_draining(post_modern(gw, modern_body("a-2", "tools/list")))  # no new call
    answers = {key: {"action": "accept", "content": {"name": "Ada"}}}
    done = post_modern(gw, ask_name("a-3", inputResponses=answers, requestState=asked["requestState"]))
    assert "Ada" in reply_message(done)["result"]["content"][0]["text"], done
    stopped_cleanly(gw, [worker, *children])


def test_the_drain_ends_when_its_time_is_up(gateway_factory: Any) -> None:
    env = {"MCPGATE_GRACEFUL_TIMEOUT": "6", "MCPGATE_CLOSE_TIMEOUT": "0.5", "MCPGATE_TERM_TIMEOUT": "0.5"}
    gw = gateway_factory(env)  # drains at most 6 - (0.5 + 0.5 + 2) = 3 s
    headers = open_session(gw)
    [worker] = direct_children(gw.proc.pid)
    slow = SlowCall(gw, headers, seconds=40, steps=40)
    children = direct_children(worker)
    gw.proc.send_signal(signal.SIGTERM)
    outcome = slow.outcome()
    assert "Session ended" in outcome.get("error", {}).get("message", ""), outcome
    stopped_cleanly(gw, [worker, *children])
    assert "drain time is up with 1 requests in flight" in gw.log(), gw.log_tail()


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_a_draining_instance_stays_in_the_directory_until_its_drain_ends(redis_url: str) -> None:
    env = {
        "REDIS_URL": redis_url,
        "MCPGATE_CLUSTER_SECRET": "test-cluster-secret-0123456789abcdef",
        "MCPGATE_INSTANCE_ID": "drain-a",
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
    }
    gw = Gateway(env)
    try:
        gw.wait_ready()
        client = redis.Redis.from_url(redis_url)
        assert client.get("mcpgate:instance:drain-a") is not None
        headers = open_session(gw)
        [worker] = direct_children(gw.proc.pid)
        slow = SlowCall(gw, headers, seconds=4, steps=8)
        children = direct_children(worker)
        gw.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: draining(gw)), gw.log_tail()
        # still listed while it drains: its sessions' requests and its parked calls' retries are forwarded here
        assert client.get("mcpgate:instance:drain-a") is not None
        assert slow.outcome().get("result", {}).get("content", [{}])[0].get("text") == "done after 4 s"
        assert wait_for(lambda: client.get("mcpgate:instance:drain-a") is None), gw.log_tail()  # gone once drained
        stopped_cleanly(gw, [worker, *children])
    finally:
        gw.stop()
