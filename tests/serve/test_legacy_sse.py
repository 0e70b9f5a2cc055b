"""The 2024-11-05 HTTP+SSE transport through gunicorn mcpgate.wsgi: the official Python SDK's sse_client, the
TypeScript SDK's SSEClientTransport, and raw HTTP for every refusal and for the session's end."""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, types
from mcp.client.sse import sse_client

from tests.interop import conformance
from tests.support import (
    FIXTURES,
    HEADERS,
    Gateway,
    demo_round_trips,
    direct_children,
    init_body,
    lazy_gateways,
    on_elicit,
    on_sample,
    wait_dead,
    wait_for,
)

HANG_GUARD = 60
FAST = {"MCPGATE_KEEPALIVE": "0.2"}  # keepalives often (a vanished client is noticed as its connection closes)
JSON = {"Content-Type": "application/json"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class EventStream:
    """A raw GET of the SSE path, read event by event (comments skipped)."""

    def __init__(self, gw: Gateway, path: str = "/sse", headers: dict[str, str] | None = None) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
        self.conn.request("GET", path, headers={"Accept": "text/event-stream", **(headers or {})})
        self.response = self.conn.getresponse()
        self.status = self.response.status

    def event(self) -> tuple[str, str]:
        """The next event as (name, data); EOFError when the stream ends."""
        name, data = "message", []
        while True:
            line = self.response.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\r\n")
            if not text:
                if data:
                    return name, "\n".join(data)
                name = "message"
                continue
            field, _, value = text.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)

    def message(self) -> Any:
        name, data = self.event()
        assert name == "message", (name, data)
        return json.loads(data)

    def close(self) -> None:
        self.response.close()
        self.conn.close()


def open_raw(gw: Gateway, headers: dict[str, str] | None = None) -> tuple[EventStream, str]:
    """A session's stream and the POST URL its endpoint event names."""
    stream = EventStream(gw, headers=headers)
    assert stream.status == 200, stream.response.read()
    assert stream.response.getheader("Content-Type") == "text/event-stream"
    name, url = stream.event()
    assert name == "endpoint" and url.startswith("/messages?session_id="), (name, url)
    return stream, url


def initialize(gw: Gateway, stream: EventStream, url: str, version: str = "2024-11-05") -> dict[str, Any]:
    reply = gw.request("POST", url, body=init_body(version), headers=JSON)
    assert reply.status == 202 and reply.body == b"", reply
    result = stream.message()
    assert gw.request("POST", url, body=INITIALIZED, headers=JSON).status == 202
    return result  # type: ignore[no-any-return]


def the_child(gw: Gateway) -> int:
    [worker] = direct_children(gw.proc.pid)
    [child] = direct_children(worker)
    return child


# -- the official Python SDK's sse_client ---------------------------------------------------------------


def sdk_client(url: str, notifications: list[Any], headers: dict[str, str] | None = None) -> Client:
    async def on_message(message: Any) -> None:
        notifications.append(message)

    return Client(
        sse_client(url, headers=headers),
        mode="legacy",
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        message_handler=on_message,
    )


SHARED = {"plain": {}, "token": {"MCPGATE_AUTH_TOKEN": "s3cret"}, "small_bodies": {"MCPGATE_MAX_BODY_BYTES": "1024"}}


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    """The module's shared gateways, one per kind (each test opens sessions of its own on them)."""
    with lazy_gateways(SHARED) as get:
        yield get


def sse_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}/sse"


def test_sdk_sse_client_tools_resources_prompts(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("token")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with sdk_client(sse_url(gw), [], headers={"Authorization": "Bearer s3cret"}) as client:
                assert client.protocol_version == "2025-11-25"
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} >= {"echo", "add", "slow", "ask_name", "sample"}
                added = await client.call_tool("add", {"a": 2, "b": 3})
                assert added.structured_content == {"result": 5}
                resources = await client.list_resources()
                assert "demo://readme" in {str(r.uri) for r in resources.resources}
                readme = await client.read_resource("demo://readme")
                assert "demo" in readme.contents[0].text  # type: ignore[union-attr]
                prompt = await client.get_prompt("greet", {"name": "Ada"})
                assert prompt.messages[0].content.text == "Please greet Ada warmly."  # type: ignore[union-attr]

    anyio.run(main)


def test_sdk_sse_client_progress_elicitation_sampling(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with sdk_client(sse_url(gw), []) as client:
                await demo_round_trips(client)

    anyio.run(main)


def test_sdk_sse_client_with_an_sdk_written_child(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'conformance_server.py'}"})

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with sdk_client(sse_url(gw), []) as client:
                assert (await client.call_tool("test_simple_text", {})).content[0].type == "text"
                assert not (await client.call_tool("test_elicitation", {"message": "name?"})).is_error
                assert not (await client.call_tool("test_sampling", {"prompt": "hello"})).is_error
                assert (await client.read_resource("test://static-text")).contents
                prompts = await client.list_prompts()
                assert prompts.prompts

    anyio.run(main)


def test_two_concurrent_sdk_clients_see_only_their_own_messages(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")
    seen: dict[str, list[Any]] = {"a": [], "b": []}
    progress: dict[str, list[float]] = {"a": [], "b": []}
    both_up, a_notified = anyio.Event(), anyio.Event()
    connected: list[str] = []

    async def run(name: str) -> None:
        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress[name].append(value)

        async with sdk_client(sse_url(gw), seen[name]) as client:
            connected.append(name)
            if len(connected) == 2:
                both_up.set()
            await both_up.wait()
            echo = await client.call_tool("echo", {"message": f"from {name}"})
            assert echo.content[0].text == f"from {name}"  # type: ignore[union-attr]
            await client.call_tool("slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress)
            if name == "a":
                await client.call_tool("notify_change", {})
                while not any(isinstance(n, types.ToolListChangedNotification) for n in seen["a"]):
                    await anyio.sleep(0.05)
                a_notified.set()
            else:
                await a_notified.wait()
                await client.call_tool("echo", {"message": "after"})  # a round trip after a's notifications

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "a")
                tg.start_soon(run, "b")

    anyio.run(main)
    assert progress == {"a": [1, 2, 3], "b": [1, 2, 3]}
    assert not any(isinstance(n, types.ToolListChangedNotification) for n in seen["b"]), seen["b"]


# -- the TypeScript SDK's SSEClientTransport ----------------------------------------------------------


@pytest.mark.npm
def test_typescript_sdk_sse_client(gateways: Callable[[str], Gateway]) -> None:
    conformance.ensure_installed()
    gw = gateways("token")
    seen = conformance.node_client(FIXTURES / "ts_sse_client.cjs", sse_url(gw), "s3cret")
    assert seen["server"]["name"] == "mcpgate-demo" and seen["protocolVersion"] == "2025-11-25"
    assert {"echo", "add"} <= set(seen["tools"])
    assert seen["added"] == {"result": 5} and seen["echoed"] == "from node"


# -- raw HTTP -------------------------------------------------------------------------------------------


def test_initialize_negotiates_2024_11_05_and_later_revisions_on_request(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")
    for version in ("2024-11-05", "2025-06-18"):
        stream, url = open_raw(gw)
        try:
            assert initialize(gw, stream, url, version)["result"]["protocolVersion"] == version
        finally:
            stream.close()


def test_post_is_accepted_and_the_reply_comes_on_the_stream(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")
    stream, url = open_raw(gw)
    try:
        initialize(gw, stream, url)
        reply = gw.request("POST", url, body={"jsonrpc": "2.0", "id": "x", "method": "tools/list"}, headers=JSON)
        assert reply.status == 202 and reply.body == b"", reply
        listed = stream.message()
        assert listed["id"] == "x" and {"echo", "add"} <= {t["name"] for t in listed["result"]["tools"]}
        in_flight = {"jsonrpc": "2.0", "id": "y", "method": "tools/call", "params": {"name": "slow", "arguments": {}}}
        assert gw.request("POST", url, body=in_flight, headers=JSON).status == 202
        again = gw.request("POST", url, body=in_flight, headers=JSON)  # the same id while it is in flight
        assert again.status == 400 and again.json()["id"] == "y", again
    finally:
        stream.close()


def test_sessions_never_see_each_others_replies(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")
    (first, url1), (second, url2) = open_raw(gw), open_raw(gw)
    try:
        assert url1 != url2
        initialize(gw, first, url1)
        initialize(gw, second, url2)
        for url, text in ((url1, "one"), (url2, "two")):  # the same request id in both sessions
            body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
            body["params"] = {"name": "echo", "arguments": {"message": text}}
            assert gw.request("POST", url, body=body, headers=JSON).status == 202
        assert first.message()["result"]["content"][0]["text"] == "one"
        assert second.message()["result"]["content"][0]["text"] == "two"
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, -32700),
        (b'{"hello": "world"}', 400, -32600),
        (b"[]", 400, -32600),
        (b'[{"jsonrpc": "2.0", "method": "notifications/initialized"}]', 400, -32600),  # no batches in 2024-11-05
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}' + b" " * 2048, 413, -32600),
    ],
)
def test_malformed_posts_are_refused_with_a_json_rpc_error(
    gateways: Callable[[str], Gateway], body: bytes, status: int, code: int
) -> None:
    gw = gateways("small_bodies")
    stream, url = open_raw(gw)
    try:
        initialize(gw, stream, url)
        reply = gw.request("POST", url, body=body, headers=JSON)
        assert reply.status == status and reply.json()["error"]["code"] == code, reply
    finally:
        stream.close()


def test_refusals_of_the_two_paths(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("plain")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    unknown = gw.request("POST", "/messages?session_id=nobody", body=ping, headers=JSON)
    assert unknown.status == 404 and unknown.json()["error"]["code"] == -32600, unknown
    assert gw.request("POST", "/messages", body=ping, headers=JSON).status == 400
    stream, url = open_raw(gw)
    try:
        wrong_type = gw.request("POST", url, body=ping, headers={"Content-Type": "text/plain"})
        assert wrong_type.status == 415, wrong_type
        assert gw.request("GET", url).headers["allow"] == "POST"
        assert gw.request("POST", "/sse", body=ping, headers=JSON).headers["allow"] == "GET"
        refused = EventStream(gw, headers={"Accept": "application/json"})
        assert refused.status == 406
        refused.close()
        bad_version = gw.request("POST", url, body=ping, headers={**JSON, "MCP-Protocol-Version": "1999-01-01"})
        assert bad_version.status == 400, bad_version
    finally:
        stream.close()


def test_the_bearer_token_guards_both_paths(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("token")
    auth = {"Authorization": "Bearer s3cret"}
    refused = EventStream(gw)
    assert refused.status == 401 and refused.response.getheader("WWW-Authenticate")
    refused.close()
    wrong = EventStream(gw, headers={"Authorization": "Bearer wrong"})
    assert wrong.status == 401
    wrong.close()
    stream, url = open_raw(gw, headers=auth)
    try:
        assert gw.request("POST", url, body=init_body("2024-11-05"), headers=JSON).status == 401
        assert gw.request("POST", url, body=init_body("2024-11-05"), headers={**JSON, **auth}).status == 202
        assert stream.message()["result"]["protocolVersion"] == "2024-11-05"
    finally:
        stream.close()


def test_the_session_cap_counts_streams_and_streamable_sessions_alike(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_MAX_SESSIONS": "1", **FAST})
    stream, _ = open_raw(gw)
    try:
        full = EventStream(gw)
        assert full.status == 503 and full.response.getheader("Retry-After"), full.status
        assert json.loads(full.response.read())["error"]["code"] == -32603
        full.close()
        streamable = gw.request("POST", "/mcp", body=init_body(), headers=HEADERS)
        assert streamable.status == 503, streamable
    finally:
        stream.close()

    def slot_free() -> bool:  # the closed stream's slot comes back once the reply notices the client gone
        again = EventStream(gw)
        again.close()
        return again.status == 200

    assert wait_for(slot_free, 10), "the slot of a closed stream was never freed"


def test_closing_the_stream_stops_the_child(gateway_factory: Any) -> None:
    gw = gateway_factory(FAST)
    stream, url = open_raw(gw)
    initialize(gw, stream, url)
    child = the_child(gw)
    stream.close()
    assert wait_dead([child]) == []
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    assert gw.request("POST", url, body=ping, headers=JSON).status == 404
    assert "the client closed its HTTP+SSE stream" in gw.log()


def test_a_graceful_shutdown_ends_the_streams_and_their_children(gateway_factory: Any) -> None:
    gw = gateway_factory()
    stream, url = open_raw(gw)
    try:
        initialize(gw, stream, url)
        child = the_child(gw)
        gw.stop()  # SIGTERM: the worker ends every session, these included
        assert wait_dead([child]) == []
        with pytest.raises((EOFError, OSError)):
            while True:
                stream.event()
    finally:
        stream.close()


def test_the_paths_are_settings(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_SSE_PATH": "/legacy/events", "MCPGATE_MESSAGES_PATH": "/legacy/post"})
    assert gw.request("GET", "/sse").status == 404
    stream = EventStream(gw, "/legacy/events")
    try:
        name, url = stream.event()
        assert name == "endpoint" and url.startswith("/legacy/post?session_id="), url
        initialize(gw, stream, url)
    finally:
        stream.close()
