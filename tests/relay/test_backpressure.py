"""A busy host is queued, never refused: requests past --max-inflight wait in a bounded queue, stdin is not
read while that queue is full, and every request is answered. A queued request the host cancels is dropped:
nobody answers it, and the upstream never hears of it.
"""

from __future__ import annotations

import threading
from typing import Any

from tests.support import Gateway
from tests.support.relay import (
    HANG_GUARD,
    INITIALIZED,
    RawRelay,
    Scripted,
    ScriptedServer,
    Seen,
    initialize,
    json_reply,
    mcp_default,
    result,
    wait_for,
)

CALLS = 200
LIMIT = 8


def slow_call(msg_id: int) -> dict[str, Any]:
    params = {"name": "slow", "arguments": {"seconds": 0.2, "steps": 2}, "_meta": {"progressToken": f"p{msg_id}"}}
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}


def start_session(relay: RawRelay) -> None:
    relay.send(initialize(1))
    assert "result" in relay.read_reply(1)
    relay.send(INITIALIZED)


def test_200_concurrent_slow_calls_all_answered_within_the_limit(raw_relay: Any, demo_gateway: Gateway) -> None:
    """Through gunicorn and the demo server's slow tool. A call is running upstream from its first progress
    notification (the upstream sends it while running the call, on the call's own reply stream) to its
    response: never more than LIMIT at once, and none refused."""
    relay = raw_relay(demo_gateway.url, "--max-inflight", str(LIMIT), "--max-queued", "16", "--log-level", "info")
    start_session(relay)
    ids = range(100, 100 + CALLS)
    sender = threading.Thread(target=relay.send, args=[slow_call(i) for i in ids], daemon=True)
    sender.start()
    replies: dict[int, dict[str, Any]] = {}
    running: set[str] = set()
    most = 0
    while len(replies) < CALLS:
        message = relay.read()
        if message.get("method") == "notifications/progress":
            running.add(message["params"]["progressToken"])
            most = max(most, len(running))
        elif "id" in message:
            replies[message["id"]] = message
            running.discard(f"p{message['id']}")
    sender.join(10)
    code, rest, stderr = relay.finish()
    assert code == 0 and rest == []
    assert sorted(replies) == list(ids)
    refused = [m for m in replies.values() if "error" in m or m["result"].get("isError")]
    assert refused == [], refused[:3]
    assert 2 <= most <= LIMIT, most
    assert "stdin paused" in stderr  # 200 > 8 running + 16 waiting: the reader waited for room
    print(f"\n{CALLS} calls, --max-inflight {LIMIT}: at most {most} running at once upstream")


def test_a_queued_request_cancelled_is_dropped_unsent(raw_relay: Any) -> None:
    release = threading.Event()

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        message = seen.json
        if seen.rpc_method == "tools/call" and message["params"]["name"] == "hang":
            release.wait(60)
            return json_reply(result(message, {"content": [{"type": "text", "text": "released"}]}))
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url, "--max-inflight", "1")
        start_session(relay)
        relay.send(call(2, "hang"))
        wait_for(lambda: server.requests("POST", "tools/call"), HANG_GUARD, "call 2 to reach the upstream")
        relay.send(
            call(3, "queued"),
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
            call(4, "after"),
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        )
        # The notification after them has reached the upstream: the relay has read the cancel.
        wait_for(
            lambda: server.requests("POST", "notifications/roots/list_changed"), HANG_GUARD, "the later notification"
        )
        release.set()
        assert relay.read_reply(2)["result"]["content"][0]["text"] == "released"
        assert relay.read_reply(4)["result"] == {"echo": "tools/call"}
        code, rest, _ = relay.finish()
    assert code == 0 and rest == []  # nothing for 3, not even an error
    assert [s.json["id"] for s in server.requests("POST", "tools/call")] == [2, 4]
    assert server.requests("POST", "notifications/cancelled") == []


def call(msg_id: int, name: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": name, "arguments": {}}}
