"""What the relay puts on the wire, against a scripted Streamable HTTP upstream (raw NDJSON on the host side)."""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

from tests.support.relay import (
    DROP,
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
    wait_for,
)

TOKEN = "s3cret-token-value"


def call(msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool(msg_id: Any, name: str) -> dict[str, Any]:
    return call(msg_id, "tools/call", {"name": name, "arguments": {}})


def start_session(relay: RawRelay, version: str = "2025-11-25") -> dict[str, Any]:
    relay.send(initialize(1, version))
    reply = relay.read_reply(1)
    relay.send(INITIALIZED)
    return reply


def test_headers_session_version_and_delete(raw_relay: Any) -> None:
    with ScriptedServer() as server:
        relay = raw_relay(server.url, "-H", "X-Team: relay", env={"MCPGATE_BEARER_TOKEN": TOKEN})
        assert start_session(relay)["result"]["protocolVersion"] == "2025-11-25"
        relay.send(call(2, "tools/list"))
        assert relay.read_reply(2)["result"] == {"echo": "tools/list"}
        wait_for(lambda: server.requests("GET"), HANG_GUARD, "the GET stream attempt")
        code, rest, stderr = relay.finish()
    assert code == 0 and rest == [], explain_stderr(stderr)
    init, initialized, listed = server.requests("POST")
    assert init.rpc_method == "initialize" and "mcp-session-id" not in init.headers
    assert "mcp-protocol-version" not in init.headers
    for seen in server.seen:
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
        assert seen.headers["x-team"] == "relay"
    for seen in (init, initialized, listed):
        accept = seen.headers["accept"]
        assert "application/json" in accept and "text/event-stream" in accept
        assert seen.headers["content-type"] == "application/json"
    for seen in (initialized, listed, *server.requests("GET"), *server.requests("DELETE")):
        assert seen.headers["mcp-session-id"] == "session-1"
        assert seen.headers["mcp-protocol-version"] == "2025-11-25"
    assert server.requests("GET")[0].headers["accept"] == "text/event-stream"
    assert len(server.requests("DELETE")) == 1 and server.seen[-1].method == "DELETE"
    assert TOKEN not in stderr


def test_no_version_header_for_2025_03_26(raw_relay: Any) -> None:
    with ScriptedServer() as server:
        relay = raw_relay(server.url)
        start_session(relay, "2025-03-26")
        relay.send(call(2, "ping"))
        relay.read_reply(2)
        relay.finish()
    assert all("mcp-protocol-version" not in seen.headers for seen in server.seen)
    assert server.requests("POST", "ping")[0].headers["mcp-session-id"] == "session-1"


def test_sse_reply_with_notifications_and_server_request(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        message = seen.json
        if seen.rpc_method == "tools/call":
            progress = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": "p", "progress": 1},
            }
            ask = {"jsonrpc": "2.0", "id": 77, "method": "roots/list"}
            # split one event across writes: the decoder must reassemble it
            answer = sse_event(result(message, {"content": []}))
            return sse_reply(
                sse_event(None, event_id="prime"), sse_event(progress), sse_event(ask), answer[:10], 0.05, answer[10:]
            )
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "x"))
        first, second, third = relay.read(), relay.read(), relay.read()
        relay.send({"jsonrpc": "2.0", "id": 77, "result": {"roots": []}})
        relay.finish()
    assert first["method"] == "notifications/progress"
    assert second == {"jsonrpc": "2.0", "id": 77, "method": "roots/list"}
    assert third == {"jsonrpc": "2.0", "id": 2, "result": {"content": []}}
    answered = [s for s in server.requests("POST") if isinstance(s.json, dict) and s.json.get("id") == 77]
    assert answered and answered[0].headers["mcp-session-id"] == "session-1"


def test_reply_stream_resumed_with_last_event_id(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            server.pending = seen.json  # type: ignore[attr-defined]
            return sse_reply(sse_event(None, event_id="ev-1", retry=20))  # then the server closes the stream
        if seen.method == "GET" and seen.headers.get("last-event-id") == "ev-1":
            return sse_reply(sse_event(result(server.pending, {"resumed": True}), event_id="ev-2"))  # type: ignore[attr-defined]
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "long"))
        assert relay.read_reply(2)["result"] == {"resumed": True}
        relay.finish()
    assert len(server.requests("POST", "tools/call")) == 1


def test_a_reply_the_get_stream_brought_ends_the_resumption(raw_relay: Any) -> None:
    """The server answers a tools/call on the GET stream before the call's own stream ends resumably (the
    conformance suite's sse-retry under load): the reply the GET stream handed over is taken, not resumed for."""
    on_get = threading.Event()

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            server.pending = seen.json  # type: ignore[attr-defined]
            on_get.wait(HANG_GUARD)  # the reply leaves on the GET stream before this stream's first byte
            return sse_reply(sse_event(None, event_id="ev-1", retry=200))  # then ends: resumable
        if seen.method == "GET" and "last-event-id" in seen.headers:
            return sse_reply(sse_event(None, event_id="ev-2", retry=200))  # a resumption finds nothing
        if seen.method == "GET":
            pending = getattr(server, "pending", None)
            if pending is None:
                return sse_reply(sse_event(None, retry=20))  # ends at once: the relay opens it again
            on_get.set()
            return sse_reply(sse_event(result(pending, {"via": "get"})), HOLD)
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "long"))
        assert relay.read_reply(2)["result"] == {"via": "get"}
        relay.finish()
    assert len(server.requests("POST", "tools/call")) == 1


def test_get_stream_delivers_and_reconnects_with_last_event_id(raw_relay: Any) -> None:
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.method == "GET":
            if len(server.requests("GET")) == 1:
                return sse_reply(sse_event(note, event_id="g-1", retry=10))
            return Scripted(405)
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        assert relay.read() == note
        wait_for(lambda: len(server.requests("GET")) == 2, HANG_GUARD, "the GET stream to reconnect")
        relay.finish()
    assert server.requests("GET")[1].headers["last-event-id"] == "g-1"


def test_202_reply_arrives_on_the_get_stream(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            server.pending = seen.json  # type: ignore[attr-defined]
            return Scripted(202)
        if seen.method == "GET":
            if not hasattr(server, "pending"):
                return sse_reply(sse_event(None, retry=20))  # ends at once: the relay opens it again
            return sse_reply(sse_event(result(server.pending, {"via": "get"})), HOLD)  # type: ignore[attr-defined]
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "elsewhere"))
        assert relay.read_reply(2)["result"] == {"via": "get"}
        relay.finish()


def test_session_expiry_replays_the_handshake(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if (
            seen.method == "POST"
            and seen.headers.get("mcp-session-id") == "session-1"
            and seen.rpc_method == "tools/list"
        ):
            server.session_id = "session-2"
            return json_reply({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "gone"}}, 404)
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(call(2, "tools/list"))
        listed = relay.read()
        relay.send(call(3, "ping"))
        pinged = relay.read()
        code, rest, _ = relay.finish()
    assert listed == {"jsonrpc": "2.0", "id": 2, "result": {"echo": "tools/list"}}
    assert pinged["id"] == 3 and rest == [] and code == 0  # the replayed initialize's reply never reaches the host
    sequence = [(s.rpc_method, s.headers.get("mcp-session-id")) for s in server.requests("POST")]
    assert sequence == [
        ("initialize", None),
        ("notifications/initialized", "session-1"),
        ("tools/list", "session-1"),
        ("initialize", None),
        ("notifications/initialized", "session-2"),
        ("tools/list", "session-2"),
        ("ping", "session-2"),
    ]
    replayed = server.requests("POST", "initialize")
    assert len(replayed) == 2 and replayed[0].json == replayed[1].json


def test_retry_after_503_then_success(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call" and len(server.requests("POST", "tools/call")) == 1:
            return Scripted(503, {"Retry-After": "0", "Content-Length": "4"}, [b"busy"])
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "x"))
        assert relay.read_reply(2)["result"] == {"echo": "tools/call"}
        relay.finish()
    assert len(server.requests("POST", "tools/call")) == 2


def test_retry_after_beyond_the_cap_gives_up(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/list":
            return Scripted(429, {"Retry-After": "3600", "Content-Length": "13"}, [b"slow down pls"])
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(call(2, "tools/list"))
        error = relay.read_reply(2)["error"]
        relay.finish()
    assert "HTTP 429" in error["message"] and "slow down pls" in error["message"]
    assert len(server.requests("POST", "tools/list")) == 1


def test_possibly_sent_tools_call_is_not_retried_but_list_is(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method in ("tools/call", "tools/list") and len(server.requests("POST", seen.rpc_method)) == 1:
            return Scripted(body=[DROP])
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "x"))
        error = relay.read_reply(2)["error"]
        relay.send(call(3, "tools/list"))
        listed = relay.read_reply(3)
        relay.finish()
    assert "upstream" in error["message"] and error["code"] == -32000
    assert len(server.requests("POST", "tools/call")) == 1
    assert listed["result"] == {"echo": "tools/list"} and len(server.requests("POST", "tools/list")) == 2


def test_http_errors_and_invalid_json_name_the_cause(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        name = (seen.json or {}).get("params", {}).get("name") if seen.rpc_method == "tools/call" else None
        if name == "boom":
            return Scripted(500, {"Content-Length": "25"}, [b"Traceback: kaboom\nline 2\n"])
        if name == "garbled":
            return Scripted(200, {"Content-Type": "application/json", "Content-Length": "9"}, [b"{not json"])
        if name == "html":
            return Scripted(200, {"Content-Type": "text/html", "Content-Length": "6"}, [b"<html>"])
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "boom"), tool(3, "garbled"), tool(4, "html"))
        errors = {m["id"]: m["error"]["message"] for m in (relay.read(), relay.read(), relay.read())}
        relay.finish()
    assert "HTTP 500" in errors[2] and "Traceback: kaboom line 2" in errors[2]
    assert "invalid JSON" in errors[3]
    assert "text/html" in errors[4]


def test_cancel_forwards_closes_the_reply_and_drops_late_answers(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            return sse_reply(sse_event(None, event_id="p"), HOLD)
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url)
        start_session(relay)
        relay.send(tool(2, "hang"))
        wait_for(lambda: server.requests("POST", "tools/call"), HANG_GUARD, "the call to reach the upstream")
        relay.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        wait_for(lambda: server.requests("POST", "notifications/cancelled"), HANG_GUARD, "the forwarded cancel")
        relay.send(call(3, "ping"))
        assert relay.read() == {"jsonrpc": "2.0", "id": 3, "result": {"echo": "ping"}}
        code, rest, _ = relay.finish(timeout=20)
    assert code == 0 and rest == []  # no reply, not even an error, for the cancelled id 2
    assert server.requests("POST", "notifications/cancelled")[0].json["params"] == {"requestId": 2}


def test_no_cancel_filter_keeps_the_reply(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            wait_for(lambda: server.requests("POST", "notifications/cancelled"), HANG_GUARD, "the cancel")
            return json_reply(result(seen.json, {"late": True}))
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url, "--no-cancel-filter")
        start_session(relay)
        relay.send(tool(2, "x"))
        wait_for(lambda: server.requests("POST", "tools/call"), HANG_GUARD, "the call to reach the upstream")
        relay.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
        assert relay.read_reply(2)["result"] == {"late": True}
        relay.finish()


def test_sigterm_ends_the_session_and_exits_zero(raw_relay: Any) -> None:
    with ScriptedServer() as server:
        relay = raw_relay(server.url)
        start_session(relay)
        wait_for(lambda: server.requests("GET"), HANG_GUARD, "the GET stream attempt")
        relay.proc.send_signal(signal.SIGTERM)
        code, rest, _ = relay.finish()
    assert code == 0 and rest == []
    assert server.requests("DELETE")[0].headers["mcp-session-id"] == "session-1"


def test_shutdown_answers_requests_still_in_flight(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        if seen.rpc_method == "tools/call":
            return sse_reply(HOLD)
        return mcp_default(seen, server)

    with ScriptedServer(route) as server:
        relay = raw_relay(server.url, "--shutdown-grace", "0.2")
        start_session(relay)
        relay.send(tool(2, "forever"))
        wait_for(lambda: server.requests("POST", "tools/call"), HANG_GUARD, "the call to reach the upstream")
        code, rest, _ = relay.finish()
    assert code == 0
    [line] = rest
    assert json.loads(line)["id"] == 2 and "shut down" in json.loads(line)["error"]["message"]
