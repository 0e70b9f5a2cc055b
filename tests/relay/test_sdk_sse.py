"""SDK stdio client -> mcpgate-relay -> SDK HTTP+SSE (2024-11-05) server."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.support.relay import Upstream, await_for, run_host


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.parametrize("transport", [("--transport", "sse"), ()], ids=["sse", "auto-fallback"])
def test_features_over_sse(sse_upstream: Upstream, transport: tuple[str, ...]) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "Grace"})

    async def scenario(client: Client) -> dict[str, Any]:
        return {
            "tools": len((await client.list_tools()).tools),
            "added": (await client.call_tool("add", {"a": 1, "b": 1})).structured_content,
            "progress": _text(await client.call_tool("progress", {"steps": 2}, progress_callback=on_progress)),
            "greeting": (await client.read_resource("test://greeting")).contents[0],
            "prompt": (await client.get_prompt("greet", {"name": "Bo"})).messages[0].content,
            "elicited": _text(await client.call_tool("ask_name", {})),
        }

    seen = run_host(sse_upstream.url, scenario, *transport, elicitation_callback=elicit)
    assert seen["tools"] > 5
    assert seen["added"] == {"result": 2}
    assert seen["progress"] == "did 2 steps" and updates == [1, 2]
    assert seen["greeting"].text == "hello from the upstream"
    assert "Bo" in seen["prompt"].text
    assert seen["elicited"] == "hello Grace"


def test_sse_concurrency_and_cancel(sse_upstream: Upstream) -> None:
    async def scenario(client: Client) -> list[str]:
        order: list[str] = []
        with anyio.CancelScope() as scope:

            async def cancel_later() -> None:
                await await_for(lambda: sse_upstream.marked("started-sse-cancel"), "slow tool to start")
                order.append(str((await client.call_tool("add", {"a": 3, "b": 4})).structured_content))
                scope.cancel()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_later)
                await client.call_tool("slow", {"tag": "sse-cancel"})
        await await_for(lambda: sse_upstream.marked("cancelled-sse-cancel"), "the upstream tool's cancel")
        order.append(_text(await client.call_tool("release", {"tag": "x"})))
        return order

    assert run_host(sse_upstream.url, scenario, "--transport", "sse") == ["{'result': 7}", "releasing x"]


def test_dropped_stream_errors_the_lost_request_then_recovers(upstream_factory: Any) -> None:
    upstream: Upstream = upstream_factory("sse")

    async def scenario(client: Client) -> tuple[str, Any]:
        error = ""

        async def pending_call() -> None:
            nonlocal error
            try:
                await client.call_tool("slow", {"tag": "dropped"})
            except MCPError as exc:
                error = str(exc)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(pending_call)
            await await_for(lambda: upstream.marked("started-dropped"), "slow tool to start")
            upstream.stop()
        upstream.start()
        after = (await client.call_tool("add", {"a": 20, "b": 22})).structured_content
        return error, after

    error, after = run_host(upstream.url, scenario, "--transport", "sse")
    assert "SSE stream dropped" in error
    assert after == {"result": 42}
