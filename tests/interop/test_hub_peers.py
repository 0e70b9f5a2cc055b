"""Real peers around the hub (issue 25): servers nobody on this team wrote behind one aggregate, clients nobody on
this team wrote in front of it.

Behind the aggregate at /mcp, all at once: server-everything (npm) over stdio, over Streamable HTTP and over
HTTP+SSE (its `streamableHttp` and `sse` modes, as `url` entries), the Python SDK's MCPServer stateful, stateless
and JSON-response (tests/fixtures/remote_upstream.py, `url` entries) and the bundled demo server (stdio). The
merged list holds each one's namespaced tools, a call to each works, and server-everything's progress, sampling
and elicitation reach the client through the aggregate from each of its three transports.

In front: the TypeScript SDK client (tests/fixtures/ts_hub_client.cjs) over Streamable HTTP and HTTP+SSE, and
mcp-remote (stdio to Streamable HTTP, driven by the Python SDK over its stdio). The Python SDK in both eras is
tests/serve/test_hub.py's. The Inspector CLI (`@modelcontextprotocol/inspector@2.12.0`, `--cli`, installed by
tests/peers/install.sh into tests/.peers/inspector/) over both transports."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, types
from mcp.shared.exceptions import MCPError

from tests.interop import conformance
from tests.support import (
    DEMO_ENTRY,
    FIXTURES,
    MODERN,
    Gateway,
    free_port,
    modern_body,
    modern_headers,
    send,
    stop_process,
)
from tests.support.remote import SdkUpstream
from tests.support.waiting import wait_listening

pytestmark = pytest.mark.npm

HANG_GUARD = 90
NODE = conformance.NODE
EVERYTHING = conformance.PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
MCP_REMOTE = conformance.PEERS / "mcp-remote" / "dist" / "proxy.js"
# the Inspector 2.12's launcher (`--cli`), in a prefix of its own (tests/peers/install.sh)
INSPECTOR = conformance.PEERS.parent / "inspector" / "node_modules" / "@modelcontextprotocol" / "inspector"
INSPECTOR_CLI = INSPECTOR / "clients" / "launcher" / "build" / "index.js"
EVERYTHINGS = ("evstdio", "evhttp", "evsse")  # server-everything's three transports, by prefix
SDKS = ("stateful", "stateless", "json")  # the SDK's MCPServer in its three HTTP modes, by prefix


def start_everything(mode: str, state: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = state / f"everything-{mode}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(NODE), str(EVERYTHING), mode], env={**os.environ, "PORT": str(port)}, stdout=out, stderr=out
        )
    wait_listening(port, proc, f"server-everything {mode}", log)
    return proc, f"http://127.0.0.1:{port}/{'sse' if mode == 'sse' else 'mcp'}"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The aggregate of the seven servers above; each started once for the module and stopped by its PID."""
    conformance.ensure_installed()
    state = tmp_path_factory.mktemp("peers")
    procs: list[subprocess.Popen[bytes]] = []
    sdks: list[SdkUpstream] = []
    gw: Gateway | None = None
    try:
        servers: dict[str, Any] = {"evstdio": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"]}}
        for name, mode in (("evhttp", "streamableHttp"), ("evsse", "sse")):
            proc, url = start_everything(mode, state)
            procs.append(proc)
            servers[name] = {"url": url, **({"transport": "sse"} if mode == "sse" else {})}
        for mode in SDKS:
            sdks.append(SdkUpstream(state, mode).start())
            servers[mode] = {"url": sdks[-1].url}
        servers["demo"] = DEMO_ENTRY
        config = state / "mcp.json"
        config.write_text(json.dumps({"mcpServers": servers}))
        gw = Gateway({"MCPGATE_CONFIG": str(config)})
        gw.wait_ready()
        yield gw
    finally:
        if gw is not None:
            gw.stop()
        for sdk in sdks:
            sdk.stop()
        for proc in procs:
            stop_process(proc)


def run(main: Callable[[], Any]) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(HANG_GUARD):
            return await main()

    return anyio.run(guarded)


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grace Hopper"})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", model="stub-model", content=types.TextContent(type="text", text="sampled through the hub")
    )


def client(gw: Gateway) -> Client:
    return Client(gw.url, mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample)


async def every_tool(c: Client) -> list[str]:
    names, cursor = [], None
    while True:
        page = await c.list_tools(cursor=cursor) if cursor else await c.list_tools()
        names += [tool.name for tool in page.tools]
        if not (cursor := page.next_cursor):
            return names


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return " ".join(getattr(item, "text", "") for item in result.content)


# -- servers behind the hub ------------------------------------------------------------------------------------


def test_the_merged_list_holds_every_servers_tools_and_a_call_to_each_works(hub: Gateway) -> None:
    async def main() -> tuple[list[str], dict[str, str]]:
        async with client(hub) as c:
            names = await every_tool(c)
            said = {p: text(await c.call_tool(f"{p}__echo", {"message": f"via {p}"})) for p in EVERYTHINGS}
            said |= {p: text(await c.call_tool(f"{p}__add", {"a": 2, "b": 40})) for p in (*SDKS, "demo")}
            return names, said

    names, said = run(main)
    assert len(names) == len(set(names)), names
    for prefix in EVERYTHINGS:
        assert {f"{prefix}__echo", f"{prefix}__get-sum", f"{prefix}__trigger-long-running-operation"} <= set(names)
        assert f"via {prefix}" in said[prefix], said
    for prefix in (*SDKS, "demo"):
        assert f"{prefix}__add" in names and "42" in said[prefix], said
    assert all("__" in name for name in names), names


@pytest.mark.parametrize("prefix", EVERYTHINGS)
def test_progress_sampling_and_elicitation_of_server_everything_through_the_aggregate(
    hub: Gateway, prefix: str
) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def main() -> tuple[str, str, str]:
        async with client(hub) as c:
            names = await every_tool(c)
            assert f"{prefix}__trigger-sampling-request" in names, names
            assert f"{prefix}__trigger-elicitation-request" in names, names
            long = await c.call_tool(
                f"{prefix}__trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
            )
            sampled = await c.call_tool(f"{prefix}__trigger-sampling-request", {"prompt": "hello"})
            elicited = await c.call_tool(f"{prefix}__trigger-elicitation-request", {})
            return text(long), text(sampled), text(elicited)

    long, sampled, elicited = run(main)
    assert "completed" in long, long
    assert len(updates) >= 3 and updates == sorted(updates), updates
    assert "sampled through the hub" in sampled, sampled
    assert "Grace Hopper" in elicited, elicited


# -- clients in front of the hub -------------------------------------------------------------------------------


@pytest.mark.parametrize(("transport", "path", "far"), [("http", "/mcp", "evsse"), ("sse", "/sse", "evhttp")])
def test_the_typescript_sdk_lists_and_calls_namespaced_tools(hub: Gateway, transport: str, path: str, far: str) -> None:
    """Over each transport of the aggregate, server-everything behind the other one: an echo, a call with progress,
    and its sampling and elicitation answered by the TypeScript client's own handlers."""
    calls = [
        [f"{far}__echo", {"message": f"ts {transport}"}],
        [f"{far}__trigger-long-running-operation", {"duration": 1, "steps": 3}],
        [f"{far}__trigger-sampling-request", {"prompt": "hi"}],
        ["evstdio__trigger-elicitation-request", {}],
        ["stateless__add", {"a": 2, "b": 3}],
    ]
    seen = conformance.node_client(FIXTURES / "ts_hub_client.cjs", transport, hub.base + path, json.dumps(calls))
    assert {"evstdio__echo", "evhttp__echo", "evsse__echo", "json__add", "demo__add"} <= set(seen["tools"])
    echoed, slow, sampled, elicited, added = seen["results"]
    assert not any(result["isError"] for result in seen["results"]), seen["results"]
    assert f"ts {transport}" in echoed["content"][0]["text"]
    # The TypeScript SDK 1.x handles a notification in a microtask but a response at once: a last progress read
    # in the same chunk as its response is dropped by the client (seen over HTTP+SSE, where the gateway writes the
    # two back to back, in this order: a raw reader of the same stream gets 1, 2, 3, then the result).
    assert slow["progress"][:2] == [1, 2] and slow["progress"] == sorted(slow["progress"]), slow
    assert "sampled by the ts client" in sampled["content"][0]["text"], sampled
    assert "Ada from ts" in json.dumps(elicited["content"]), elicited
    assert added["content"][0]["text"] == "5"


@pytest.mark.parametrize(("transport", "path"), [("http-only", "/mcp"), ("sse-only", "/sse")])
def test_mcp_remote_bridges_a_stdio_client_to_the_aggregate(
    hub: Gateway, tmp_path: Path, transport: str, path: str
) -> None:
    env = {
        "PATH": f"{NODE.parent}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth"),
    }
    bridge = StdioServerParameters(
        command=str(NODE), args=[str(MCP_REMOTE), hub.base + path, "--transport", transport], env=env
    )

    async def main() -> tuple[list[str], str, str]:
        async with Client(bridge, mode="legacy") as c:
            names = await every_tool(c)
            echoed = text(await c.call_tool("evsse__echo", {"message": "through mcp-remote"}))
            added = text(await c.call_tool("json__add", {"a": 1, "b": 2}))
            return names, echoed, added

    names, echoed, added = run(main)
    assert {"evstdio__echo", "stateful__add", "demo__add"} <= set(names)
    assert "through mcp-remote" in echoed and "3" in added


def test_a_remote_member_gone_fails_its_calls_by_name_and_the_others_go_on(tmp_path: Path) -> None:
    """The SDK's MCPServer behind the aggregate, stopped mid-session then restarted at its address: its calls fail
    naming it (both eras), the stdio member answers meanwhile, /healthz shows it unavailable, then it serves the
    same sessions again."""
    far = SdkUpstream(tmp_path, "stateful").start()
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": far.url}, "demo": DEMO_ENTRY}}))
    gw = Gateway({"MCPGATE_CONFIG": str(config)})
    try:
        gw.wait_ready()

        async def main() -> None:
            nonlocal far
            async with client(gw) as legacy, Client(gw.url, mode=MODERN) as modern:
                for c in (legacy, modern):
                    assert text(await c.call_tool("far__add", {"a": 1, "b": 2})) == "3"
                far.stop()
                for c in (legacy, modern):
                    with pytest.raises(MCPError, match="remote server 'far'"):
                        await c.call_tool("far__add", {"a": 1, "b": 2})
                    assert text(await c.call_tool("demo__add", {"a": 1, "b": 2})) == "3"
                health = json.loads(send(gw.host, gw.port, "GET", "/healthz").body)
                assert health["servers"]["far"]["status"] == "unavailable", health
                assert health["servers"]["demo"]["status"] == "ok", health
                far = SdkUpstream(tmp_path, "stateful", port=far.port).start()
                for c in (legacy, modern):
                    assert text(await c.call_tool("far__add", {"a": 2, "b": 2})) == "4"

        run(main)
    finally:
        gw.stop()
        far.stop()


@pytest.mark.parametrize(("transport", "path"), [("http", "/mcp"), ("sse", "/sse")])
def test_the_inspector_cli_lists_and_calls_on_the_aggregate(
    hub: Gateway, tmp_path: Path, transport: str, path: str
) -> None:
    assert INSPECTOR_CLI.exists(), f"the Inspector CLI is not installed ({INSPECTOR_CLI}): run tests/peers/install.sh"

    def inspector(*args: str) -> Any:
        cli = [str(NODE), str(INSPECTOR_CLI), "--cli", hub.base + path, "--transport", transport, "--method", *args]
        done = subprocess.run(cli, capture_output=True, text=True, timeout=HANG_GUARD, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return json.loads(done.stdout)

    names = {tool["name"] for tool in inspector("tools/list")["tools"]}
    assert {"evstdio__echo", "evhttp__echo", "evsse__echo", "stateful__add", "demo__add"} <= names, names
    args = ["--tool-arg", "a=20", "--tool-arg", "b=22"]
    assert inspector("tools/call", "--tool-name", "json__add", *args)["content"][0]["text"] == "42"


# -- last: leaves calls parked at input_required on server-everything over Streamable HTTP ----------------------


@pytest.mark.parametrize(
    ("path", "prefix"),
    [
        ("/mcp", "evhttp__"),
        ("/servers/evhttp/mcp", ""),
    ],
)
def test_an_unanswered_elicitation_holds_up_no_other_callers_call(hub: Gateway, path: str, prefix: str) -> None:
    """A 2026-07-28 client leaves server-everything's elicitation unanswered; another caller's plain call is served:
    through the aggregate (whose members speak 2025 to the hub) and on the server's own path (a 2025-only remote
    upstream refuses 2026-07-28 requests, so the pool serves it through its own bridge, which parks the waiting
    call's child: through the relay's one-session bridge every caller waited behind it, up to 120 s)."""
    tool = f"{prefix}trigger-elicitation-request"
    asks = modern_body(1, "tools/call", {"name": tool, "arguments": {}}, {"elicitation": {}})
    asked = hub.request("POST", path, asks, modern_headers("tools/call", tool))
    assert asked.status == 200 and b'"input_required"' in asked.body, asked
    echo = f"{prefix}echo"
    plain = modern_body(2, "tools/call", {"name": echo, "arguments": {"message": "not held up"}})
    try:
        answered = hub.request("POST", path, plain, modern_headers("tools/call", echo), timeout=15)
    except TimeoutError:
        pytest.fail("a plain call waited 15 s behind another caller's unanswered elicitation")
    assert answered.status == 200 and b"not held up" in answered.body, answered
