"""Races between the relay's streams, against a scripted Streamable HTTP upstream: the GET stream is open before the
host's next request after notifications/initialized goes (bounded), and a reply the GET stream hands over ends the
wait on the call's own stream, open or not."""

from __future__ import annotations

import threading
from typing import Any

from tests.support.relay import (
    HANG_GUARD,
    HOLD,
    INITIALIZED,
    RawRelay,
    Scripted,
    ScriptedServer,
    Seen,
    explain_stderr,
    initialize,
    json_reply,
    mcp_default,
    result,
    sse_event,
    sse_reply,
)

LATE_HEADERS = 0.5  # seconds a scripted GET keeps its headers back unless a request comes meanwhile
NOT_OPEN = "did not answer the GET stream"


def tool(msg_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": "t", "arguments": {}}}


def start_session(relay: RawRelay) -> None:
    relay.send(initialize(1))
    relay.read_reply(1)
    relay.send(INITIALIZED)


def test_the_request_after_initialized_goes_once_the_get_stream_is_open(raw_relay: Any) -> None:
    """An upstream drops a server notification sent before the GET stream is registered (the SDK server does), so
    the host's first request after notifications/initialized goes only once the GET stream's headers arrived."""
    called = threading.Event()
    opened = threading.Event()

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.method == "GET":
            called.wait(LATE_HEADERS)  # a request sent meanwhile would find the stream not open
            opened.set()  # the headers leave as this returns
            return sse_reply(HOLD)
        if seen.rpc_method == "tools/call":
            was_open = opened.is_set()
            called.set()
            return json_reply(result(seen.json, {"get_open": was_open}))
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url, "--log-level", "info")
        start_session(relay)
        relay.send(tool(2))
        answered = relay.read_reply(2)
        code, _, stderr = relay.finish()
    assert answered["result"] == {"get_open": True}, explain_stderr(stderr)
    assert code == 0 and NOT_OPEN not in stderr, explain_stderr(stderr)


def test_a_get_stream_without_headers_holds_the_first_request_only_for_a_while(raw_relay: Any) -> None:
    """A server that sends no headers before its first event (the go-sdk's issue 633 met such servers) costs the
    first request a short bounded wait, once; a 405 costs nothing (the other tests' upstreams answer it)."""
    called = threading.Event()

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.method == "GET":
            called.wait(HANG_GUARD)  # no headers until a request came
            return sse_reply(HOLD)
        if seen.rpc_method == "tools/call":
            called.set()
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url, "--log-level", "info")
        start_session(relay)
        relay.send(tool(2))
        assert relay.read_reply(2)["result"] == {"echo": "tools/call"}
        relay.send(tool(3))
        assert relay.read_reply(3)["result"] == {"echo": "tools/call"}
        code, _, stderr = relay.finish()
    assert code == 0 and stderr.count(NOT_OPEN) == 1, explain_stderr(stderr)


def test_a_405_holds_nothing(raw_relay: Any) -> None:
    with ScriptedServer() as server:
        relay = raw_relay(server.url, "--log-level", "info")
        start_session(relay)
        relay.send(tool(2))
        assert relay.read_reply(2)["result"] == {"echo": "tools/call"}
        code, _, stderr = relay.finish()
    assert code == 0 and "offers no GET stream" in stderr and NOT_OPEN not in stderr, explain_stderr(stderr)


def test_a_reply_the_get_stream_brought_ends_the_wait_on_an_open_reply_stream(raw_relay: Any) -> None:
    """The server answers a tools/call on the GET stream while the call's own stream stays open, kept alive: the
    reply handed over is taken at once (the open stream is closed), not once that stream ends, which it need not."""
    kept_open = [sse_event(None, event_id="ev-1"), *[step for _ in range(40) for step in (b": alive\n\n", 5.0)]]

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            server.pending = seen.json  # type: ignore[attr-defined]
            return sse_reply(*kept_open)
        if seen.method == "GET":
            pending = getattr(server, "pending", None)
            if pending is None or pending["id"] in answered:
                return sse_reply(sse_event(None, retry=20))  # ends at once: the relay opens it again
            answered.add(pending["id"])
            return sse_reply(sse_event(result(pending, {"via": "get"}), retry=20))
        return mcp_default(seen, server)

    answered: set[int] = set()
    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2))
        assert relay.read_reply(2)["result"] == {"via": "get"}
        relay.send(tool(3))  # the call's slot and connection are free again
        assert relay.read_reply(3)["result"] == {"via": "get"}
        code, _, stderr = relay.finish()
    assert code == 0, explain_stderr(stderr)
    assert len(server.requests("POST", "tools/call")) == 2
