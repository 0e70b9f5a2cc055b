"""A cancelled request's reply stream still carries other messages (2025 Streamable HTTP).

The upstream (tests/fixtures/oldest_stream_server.py, its own process) puts every message that belongs to no
request on the stream of the oldest request still open, as some stateful gateways do. After the host cancels
that request the relay keeps reading its stream for --cancel-grace: the host still gets the list_changed that
rides on it, never the cancelled call's response or progress; then the stream is closed. With a grace of 0 it
is closed at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import free_port
from tests.support.relay import HANG_GUARD, INITIALIZED, RawRelay, initialize, stop_process, wait_for, wait_listening

SERVER = "tests/fixtures/oldest_stream_server.py"
LIST_CHANGED = "notifications/tools/list_changed"


@pytest.fixture
def oldest_stream_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, SERVER, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)


def tool(msg_id: Any, name: str, token: str | None = None, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}


def cancel(msg_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": msg_id, "reason": "test"}}


def start_session(relay: RawRelay) -> None:
    relay.send(initialize(1))
    assert "result" in relay.read_reply(1)
    relay.send(INITIALIZED)


Wanted = Callable[[dict[str, Any]], bool]


def read_until(relay: RawRelay, *wanted: Wanted) -> list[dict[str, Any]]:
    """Every message read until each of wanted has held for one of them."""
    seen: list[dict[str, Any]] = []
    while not all(any(want(message) for message in seen) for want in wanted):
        seen.append(relay.read())
    return seen


def is_method(method: str) -> Wanted:
    return lambda message: message.get("method") == method


def is_reply(msg_id: int) -> Wanted:
    return lambda message: message.get("id") == msg_id and "method" not in message


def stream_state(relay: RawRelay, msg_id: int, of: int) -> str:
    relay.send(tool(msg_id, "streams"))
    states: dict[str, str] = relay.read_reply(msg_id)["result"]["structuredContent"]
    return states.get(str(of), "unknown")


def hold_messages(messages: list[dict[str, Any] | bytes]) -> list[dict[str, Any]]:
    """The messages about call 2 (its response, its progress): none may reach the host after its cancel."""
    out = []
    for message in messages:
        item = message if isinstance(message, dict) else json.loads(message)
        if item.get("id") == 2 or (item.get("params") or {}).get("progressToken") == "hold-2":
            out.append(item)
    return out


def test_list_changed_on_a_cancelled_stream_still_reaches_the_host(raw_relay: Any, oldest_stream_url: str) -> None:
    relay = raw_relay(oldest_stream_url, "--log-level", "info")
    start_session(relay)
    relay.send(tool(2, "hold", token="hold-2"))
    first = relay.read()
    assert first["method"] == "notifications/progress" and first["params"]["progress"] == 1
    # While call 2 is open, another call's list_changed rides on 2's stream.
    relay.send(tool(3, "announce"))
    read_until(relay, is_reply(3), is_method(LIST_CHANGED))
    # After the cancel, the upstream writes progress, list_changed and 2's response on 2's stream.
    relay.send(cancel(2))
    after = read_until(relay, is_method(LIST_CHANGED))
    assert hold_messages(after) == []  # no progress of the cancelled call
    relay.send(tool(4, "streams"))
    replies = read_until(relay, is_reply(4))
    code, rest, stderr = relay.finish()
    assert code == 0
    assert hold_messages([*replies, *rest]) == []  # the response to 2 was read and dropped
    assert "dropped the reply to cancelled request 2" in stderr


def test_the_grace_is_bounded(raw_relay: Any, oldest_stream_url: str) -> None:
    """An upstream that never answers the cancelled call: its stream is closed after the grace."""
    relay = raw_relay(oldest_stream_url, "--cancel-grace", "0.5")
    start_session(relay)
    relay.send(tool(2, "hold", token="hold-2", after_cancel="notes"))
    assert relay.read()["method"] == "notifications/progress"
    relay.send(cancel(2))
    after = read_until(relay, is_method(LIST_CHANGED))
    assert hold_messages(after) == []
    numbers = iter(range(10, 10_000))
    wait_for(
        lambda: stream_state(relay, next(numbers), of=2) == "closed by the client",
        HANG_GUARD,
        "the relay to close call 2",
    )
    code, rest, _ = relay.finish()
    assert code == 0 and hold_messages(rest) == []


def test_grace_zero_closes_at_once(raw_relay: Any, oldest_stream_url: str) -> None:
    """--cancel-grace 0 (what the 2026-07-28 wire does: closing the stream is the cancel): the upstream, which
    writes nothing more, sees the stream closed."""
    relay = raw_relay(oldest_stream_url, "--cancel-grace", "0", "--log-level", "info")
    start_session(relay)
    relay.send(tool(2, "hold", token="hold-2", after_cancel="nothing"))
    assert relay.read()["method"] == "notifications/progress"
    relay.send(cancel(2))
    numbers = iter(range(10, 10_000))
    wait_for(
        lambda: stream_state(relay, next(numbers), of=2) == "closed by the client",
        HANG_GUARD,
        "the relay to close call 2",
    )
    code, rest, stderr = relay.finish()
    assert code == 0 and hold_messages(rest) == []
    assert "cancelled request 2: its reply stream is closed" in stderr
