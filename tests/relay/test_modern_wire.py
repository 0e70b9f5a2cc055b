"""The relay on the 2026-07-28 wire (`--protocol-era modern`, and auto's natural paths) against real upstreams:
`gunicorn mcpgate.wsgi` over the demo server and over the SDK-written modern fixture, the SDK's own Streamable
HTTP server (MCPServer, stateless, SSE or JSON replies), and scripted upstreams where the exact bytes and headers
matter. The host is the SDK's stdio client in mode "2026-07-28", or raw NDJSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.support import (
    FIXTURES,
    MODERN,
    MODERN_CHILD,
    Gateway,
    free_port,
    lazy_gateways,
    modern_body,
    on_elicit,
    on_sample,
)
from tests.support.relay import (
    HOLD,
    RawRelay,
    Scripted,
    ScriptedServer,
    Seen,
    json_reply,
    run_host,
    sse_event,
    sse_reply,
    stop_process,
    wait_listening,
)

MODERN_ARGS = ("--protocol-era", "modern", "--log-level", "info")
RELIST = "re-listing the tools once"


class SdkServer:
    """tests/fixtures/modern_server.py run as the SDK's Streamable HTTP server (stateless), its stderr to a file."""

    def __init__(self, tmp: Path, json_response: bool) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.stderr = tmp / "sdk-server.err"
        code = (
            f"import sys; sys.path.insert(0, {str(FIXTURES)!r}); import modern_server; "
            f"modern_server.server.run('streamable-http', host='127.0.0.1', port={port}, stateless_http=True, "
            f"json_response={json_response})"
        )
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=err)
        wait_listening(port, self.proc)

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    with lazy_gateways({"demo": {}, "modern": {"MCPGATE_COMMAND": MODERN_CHILD}}) as get:
        yield get


@pytest.fixture(scope="module")
def sdk_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[bool], SdkServer]]:
    started: dict[bool, SdkServer] = {}

    def get(json_response: bool) -> SdkServer:
        if json_response not in started:
            started[json_response] = SdkServer(tmp_path_factory.mktemp("sdk"), json_response)
        return started[json_response]

    try:
        yield get
    finally:
        for server in started.values():
            stop_process(server.proc)


UPSTREAMS = ["serve-demo", "serve-modern", "sdk-sse", "sdk-json"]


@pytest.fixture
def upstream(
    request: pytest.FixtureRequest,
    gateways: Callable[[str], Gateway],
    sdk_servers: Callable[[bool], SdkServer],
) -> tuple[str, Callable[[], str]]:
    """(URL, the upstream's log so far) for the parametrized kind."""
    kind: str = request.param
    if kind.startswith("serve-"):
        gw = gateways(kind.removeprefix("serve-"))
        return gw.url, gw.log
    server = sdk_servers(kind == "sdk-json")
    return server.url, server.log


def run_modern(url: str, scenario: Callable[[Client], Any], stderr: Path, *args: str) -> Any:
    return run_host(
        url,
        scenario,
        *MODERN_ARGS,
        *args,
        stderr=stderr,
        mode=MODERN,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
    )


def text(result: Any) -> str:
    block = result.content[0]
    return str(block.text)


# -- real upstreams through the SDK's stdio client in 2026-07-28 mode ---------------------------------------------


@pytest.mark.parametrize("upstream", UPSTREAMS, indirect=True)
def test_tools_list_and_call(upstream: tuple[str, Callable[[], str]], tmp_path: Path) -> None:
    url, _ = upstream
    err = tmp_path / "relay.err"

    async def scenario(client: Client) -> dict[str, Any]:
        assert client.protocol_version == MODERN
        tools = {t.name for t in (await client.list_tools()).tools}
        out = {
            "tools": tools,
            "echo": text(await client.call_tool("echo", {"message": "héllo"})),
            "add": (await client.call_tool("add", {"a": 2, "b": 3})).structured_content,
        }
        if "where" in tools:  # the Region argument mirrored into Mcp-Param-Region (Base64: not ASCII)
            out["where"] = text(await client.call_tool("where", {"query": "rain", "region": "Zürich"}))
            out["plain"] = text(await client.call_tool("where", {"query": "sun", "region": "eu-west"}))
        return out

    seen = run_modern(url, scenario, err)
    assert {"echo", "add", "slow"} <= seen["tools"]
    assert seen["echo"] == "héllo"
    assert seen["add"] == {"result": 5}
    if "where" in seen["tools"]:
        assert (seen["where"], seen["plain"]) == ("rain in Zürich", "sun in eu-west")
    assert RELIST not in err.read_text()  # the headers learned from tools/list were the right ones


@pytest.mark.parametrize("upstream", ["serve-demo", "serve-modern", "sdk-sse"], indirect=True)
def test_progress_and_input_required(upstream: tuple[str, Callable[[], str]], tmp_path: Path) -> None:
    url, _ = upstream
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def scenario(client: Client) -> tuple[str, str]:
        slow = await client.call_tool("slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress)
        asked = await client.call_tool("ask_name", {})  # an InputRequiredResult, answered by the host, retried
        return text(slow), text(asked)

    slow, asked = run_modern(url, scenario, tmp_path / "relay.err")
    assert slow.startswith("done") and updates == [1, 2, 3]
    assert asked == "Hello, Grace"


@pytest.mark.parametrize("upstream", ["serve-modern", "sdk-sse"], indirect=True)
def test_cancellation_closes_the_stream(upstream: tuple[str, Callable[[], str]], tmp_path: Path) -> None:
    """The host cancels a call mid-stream (notifications/cancelled on stdio): the relay closes that request's
    response, which the upstream takes as the cancellation; a later call still works."""
    url, upstream_log = upstream
    tag = f"cancel-{tmp_path.name}"

    async def scenario(client: Client) -> str:
        with anyio.move_on_after(30):
            async with anyio.create_task_group() as tasks:

                async def sleeper() -> None:
                    await client.call_tool("sleep", {"seconds": 30, "tag": tag})

                tasks.start_soon(sleeper)
                while f"sleep {tag} started" not in upstream_log():
                    await anyio.sleep(0.05)
                tasks.cancel_scope.cancel()
        while f"sleep {tag} cancelled" not in upstream_log():
            await anyio.sleep(0.05)
        return text(await client.call_tool("echo", {"message": "after"}))

    assert run_modern(url, scenario, tmp_path / "relay.err") == "after"
    assert f"sleep {tag} done" not in upstream_log()


@pytest.mark.parametrize("upstream", ["serve-modern", "sdk-sse"], indirect=True)
def test_a_call_before_any_listing_relists_once(upstream: tuple[str, Callable[[], str]], raw_relay: Any) -> None:
    """The host calls `where` before the relay has seen tools/list: the upstream refuses the missing
    Mcp-Param-Region with -32020; the relay lists the tools once and retries once."""
    url, _ = upstream
    relay: RawRelay = raw_relay(url, *MODERN_ARGS)
    relay.send(modern_body(1, "tools/call", {"name": "where", "arguments": {"query": "fog", "region": "Ås"}}))
    reply = relay.read_reply(1)
    assert reply["result"]["content"][0]["text"] == "fog in Ås", reply
    relay.send(modern_body(2, "tools/call", {"name": "where", "arguments": {"query": "fog", "region": "Oslo"}}))
    assert relay.read_reply(2)["result"]["content"][0]["text"] == "fog in Oslo"
    _, _, stderr = relay.finish()
    assert stderr.count(RELIST) == 1, stderr


# -- auto: the natural paths -----------------------------------------------------------------------------------


def test_auto_takes_the_natural_path_for_each_host(gateways: Callable[[str], Gateway], raw_relay: Any) -> None:
    """mcpgate serve is dual-era: a modern host is spoken for in 2026-07-28 (after a server/discover probe),
    a legacy host with its own initialize and session; each decision is logged once."""
    url = gateways("modern").url
    modern_host: RawRelay = raw_relay(url, "--log-level", "info")
    for msg_id in (1, 2):
        modern_host.send(modern_body(msg_id, "tools/call", {"name": "echo", "arguments": {"message": "m"}}))
        assert modern_host.read_reply(msg_id)["result"]["content"][0]["text"] == "m"
    _, _, stderr = modern_host.finish()
    assert stderr.count("upstream speaks 2026-07-28; host speaks 2026-07-28; bridging: no bridge") == 1, stderr

    legacy_host: RawRelay = raw_relay(url, "--log-level", "info")
    legacy_host.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
    )
    assert legacy_host.read_reply(1)["result"]["protocolVersion"] == "2025-11-25"
    legacy_host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    legacy_host.send(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "l"}}}
    )
    assert legacy_host.read_reply(2)["result"]["content"][0]["text"] == "l"
    _, _, stderr = legacy_host.finish()
    assert "upstream speaks 2025 (sessions); host speaks 2025 (initialize); bridging: no bridge" in stderr, stderr
    assert "server/discover" not in stderr


# -- scripted upstreams: exact bytes and headers ---------------------------------------------------------------

# A tools/list result as an upstream might write it: odd spacing, escapes, key order, 2020-12 keywords, a $ref.
GOOD_TOOL = (
    b'{"name":"find","inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",'
    b'"$defs":{"zone":{"type":"string","enum":["a","b"]}},"properties":{"zone":{"$ref":"#/$defs/zone"},'
    b'"region":{"type":"string","x-mcp-header":"Region"},"tags":{"type":"array","prefixItems":[{"type":"string"}],'
    b'"unevaluatedItems":false},"n":{"type":"number","default":1.0}},"dependentRequired":{"n":["zone"]},'
    b'"description":"caf\\u00e9"}}'
)
BAD_TOOL = b'{"name":"broken","inputSchema":{"type":"object","properties":{"x":{"type":"number","x-mcp-header":"X"}}}}'


def listing(msg_id: Any, *tools: bytes) -> bytes:
    return (
        b'{"jsonrpc":"2.0", "id":'
        + json.dumps(msg_id).encode()
        + b', "result":{"tools":['
        + b",".join(tools)
        + b'],"resultType":"complete","ttlMs":0,"cacheScope":"private"}}'
    )


def scripted(tools: tuple[bytes, ...]) -> Callable[[Seen, ScriptedServer], Scripted]:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        message = seen.json
        if message["method"] == "tools/list":
            body = listing(message["id"], *tools)
            return Scripted(200, {"Content-Type": "application/json", "Content-Length": str(len(body))}, [body])
        if message["method"] == "tools/call":
            region = seen.headers.get("mcp-param-region")
            result = {"content": [{"type": "text", "text": f"region header {region}"}]}
            return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return json_reply({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}}, 404)

    return route


def test_a_listing_with_nothing_dropped_is_forwarded_byte_for_byte(raw_relay: Any) -> None:
    with ScriptedServer(scripted((GOOD_TOOL,))) as server:
        relay: RawRelay = raw_relay(server.url, *MODERN_ARGS)
        relay.send(modern_body(7, "tools/list"))
        assert relay.proc.stdout is not None
        forwarded = relay.proc.stdout.readline()
        relay.send(modern_body(8, "tools/call", {"name": "find", "arguments": {"region": " padded"}}))
        code, lines, _ = relay.finish()
        seen = server.requests("POST")
    assert code == 0
    assert forwarded == listing(7, GOOD_TOOL) + b"\n"  # every byte as it came: no re-encoding, $ref kept
    called = next(m for m in map(json.loads, lines) if m.get("id") == 8)
    assert called["result"]["content"][0]["text"] == "region header =?base64?IHBhZGRlZA==?="
    call = next(s for s in seen if s.rpc_method == "tools/call")
    assert (call.headers["mcp-method"], call.headers["mcp-name"], call.headers["mcp-protocol-version"]) == (
        "tools/call",
        "find",
        MODERN,
    )
    assert "application/json" in call.headers["accept"] and "text/event-stream" in call.headers["accept"]
    assert "mcp-session-id" not in call.headers


def test_a_tool_with_invalid_annotations_is_dropped(raw_relay: Any) -> None:
    with ScriptedServer(scripted((BAD_TOOL, GOOD_TOOL))) as server:
        relay: RawRelay = raw_relay(server.url, *MODERN_ARGS)
        relay.send(modern_body(1, "tools/list"), modern_body(2, "tools/list"))
        first, second = sorted((relay.read(), relay.read()), key=lambda reply: reply["id"])  # either may be first
        _, _, stderr = relay.finish()
    assert [t["name"] for t in first["result"]["tools"]] == ["find"]
    assert first["result"]["tools"][0] == json.loads(GOOD_TOOL)  # the kept tool's schema whole ($ref and all)
    assert {k: v for k, v in first["result"].items() if k != "tools"} == {
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
    }
    assert second["result"] == first["result"]
    assert stderr.count("dropped tool 'broken' from tools/list") == 1, stderr  # logged once per tool


def test_a_stream_carries_notifications_but_no_server_requests(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        msg_id = seen.json["id"]
        progress = {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "p", "progress": 1},
        }
        ask = {"jsonrpc": "2.0", "id": 99, "method": "elicitation/create", "params": {"message": "?"}}
        done = {"jsonrpc": "2.0", "id": msg_id, "result": {"content": [], "resultType": "complete"}}
        return sse_reply(b": keepalive\n\n", sse_event(progress), sse_event(ask), 0.05, sse_event(done))

    with ScriptedServer(route) as server:
        relay: RawRelay = raw_relay(server.url, *MODERN_ARGS)
        relay.send(modern_body(3, "tools/call", {"name": "t", "arguments": {}}))
        _, lines, stderr = relay.finish()
    messages = [json.loads(line) for line in lines]
    assert [m.get("method", m.get("id")) for m in messages] == ["notifications/progress", 3], messages
    assert "dropped the server request elicitation/create (id 99)" in stderr


def test_a_modern_error_reaches_the_host_whole(raw_relay: Any) -> None:
    """400 with -32022 (and its data) is the host's answer, with the host's id even when the body's is null."""
    error = {"code": -32022, "message": "Unsupported protocol version", "data": {"supported": ["2027-01-01"]}}

    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        return json_reply({"jsonrpc": "2.0", "id": None, "error": error}, 400)

    with ScriptedServer(route) as server:
        relay: RawRelay = raw_relay(server.url, *MODERN_ARGS)
        relay.send(modern_body("x", "tools/list"))
        reply = relay.read_reply("x")
        relay.finish()
    assert reply["error"] == error


# The relay's ModernTransport in a gevent process of its own: a request whose reply stream is open is killed
# (as the pump kills a cancelled request's greenlet); prints whether its HTTP response was closed.
KILL_SCRIPT = """
from gevent import monkey
monkey.patch_all(select=False, subprocess=False)
import sys, gevent
from mcpgate.core import jsonrpc
from mcpgate.relay.http_client import HttpClient, HttpOptions
from mcpgate.relay.modern import ModernTransport
from mcpgate.config.settings import RelaySettings
http = HttpClient(HttpOptions.from_settings(RelaySettings()))
replies = []
send = http.send
def recording(*args, **kwargs):
    replies.append(send(*args, **kwargs))
    return replies[-1]
http.send = recording
transport = ModernTransport(sys.argv[1], http, lambda message: print("sink", jsonrpc.raw_bytes(message).decode()))
req = jsonrpc.parse(sys.argv[2].encode())
worker = gevent.spawn(transport.request, req)
while not replies:
    gevent.sleep(0.01)
gevent.sleep(0.2)
worker.kill(block=True, timeout=5)
print("closed" if replies[0].raw.closed else "open", "grace", transport.cancel_grace(req), flush=True)
"""


def test_killing_a_request_closes_its_response() -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        note = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
        return sse_reply(sse_event(note), HOLD)

    body = json.dumps(modern_body(1, "tools/call", {"name": "sleep", "arguments": {}}))
    with ScriptedServer(route) as server:
        done = subprocess.run(
            [sys.executable, "-c", KILL_SCRIPT, server.url, body], capture_output=True, timeout=60, check=False
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert 'sink {"jsonrpc": "2.0", "method": "notifications/progress"' in out  # from the open stream
    assert out.strip().endswith("closed grace 0.0"), out


def test_a_version_refusal_naming_the_relays_revision_is_retried_once(raw_relay: Any) -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        message = seen.json
        if len(server.requests("POST")) % 2:  # every first try: refused, naming 2026-07-28
            error = {"code": -32022, "message": "no", "data": {"supported": [MODERN], "requested": MODERN}}
            return json_reply({"jsonrpc": "2.0", "id": message["id"], "error": error}, 400)
        return json_reply({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": []}})

    with ScriptedServer(route) as server:
        relay: RawRelay = raw_relay(server.url, *MODERN_ARGS)
        relay.send(modern_body(1, "tools/list"))
        reply = relay.read_reply(1)
        relay.finish()
        seen = server.requests("POST")
    assert reply["result"] == {"tools": []}
    assert len(seen) == 2 and all(s.headers["mcp-protocol-version"] == MODERN for s in seen)
