"""The full loop: SDK stdio client -> mcpgate-relay -> gunicorn mcpgate.wsgi -> the bundled demo stdio child.

`demo_gateway` (tests/conftest.py) runs gunicorn with the gevent worker on a free loopback port and
answers slow requests with SSE (MCPGATE_SSE_AFTER=1), so both reply shapes cross the relay.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp import Client

from tests.support.relay import await_for, run_host


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grace"})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    prompt = params.messages[0].content
    assert isinstance(prompt, types.TextContent)
    return types.CreateMessageResult(
        role="assistant", model="stub", content=types.TextContent(type="text", text=prompt.text.upper())
    )


def test_full_loop_features(demo_gateway: Any) -> None:
    notes: list[Any] = []
    updates: list[float] = []

    async def on_message(message: Any) -> None:
        notes.append(message)

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def scenario(client: Client) -> dict[str, Any]:
        seen = {
            "tools": {t.name for t in (await client.list_tools()).tools},
            "add": (await client.call_tool("add", {"a": 2, "b": 3})).structured_content,
            "readme": (await client.read_resource("demo://readme")).contents[0],
            "prompt": (await client.get_prompt("greet", {"name": "Ada"})).messages[0].content,
            "slow": _text(await client.call_tool("slow", {"seconds": 1.2, "steps": 3}, progress_callback=on_progress)),
            "asked": _text(await client.call_tool("ask_name", {})),
            "sampled": _text(await client.call_tool("sample", {"prompt": "shout this"})),
        }
        await client.call_tool("notify_change", {})
        await await_for(
            lambda: any(isinstance(n, types.ToolListChangedNotification) for n in notes),
            "tools/list_changed through the gateway's GET stream and the relay",
        )
        return seen

    seen = run_host(
        demo_gateway.url,
        scenario,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        message_handler=on_message,
    )
    assert {"echo", "add", "slow", "ask_name", "sample"} <= seen["tools"]
    assert seen["add"] == {"result": 5}
    assert "demo" in seen["readme"].text
    assert seen["prompt"].text == "Please greet Ada warmly."
    assert seen["slow"].startswith("done") and updates == [1, 2, 3]
    assert seen["asked"] == "Hello, Grace"
    assert seen["sampled"] == "SHOUT THIS"


def test_full_loop_concurrency_and_cancel(demo_gateway: Any) -> None:
    async def scenario(client: Client) -> list[str]:
        order: list[str] = []
        started = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        async def slow() -> None:
            await client.call_tool("slow", {"seconds": 3, "steps": 6}, progress_callback=on_progress)
            order.append("slow")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(slow)
            await started.wait()
            order.append(_text(await client.call_tool("echo", {"message": "fast"})))

        with anyio.CancelScope() as scope:
            cancelled = anyio.Event()

            async def cancel_on_progress(progress: float, total: float | None, message: str | None) -> None:
                cancelled.set()

            async def cancel_it() -> None:
                await cancelled.wait()
                scope.cancel()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_it)
                await client.call_tool("slow", {"seconds": 60, "steps": 60}, progress_callback=cancel_on_progress)
        order.append(_text(await client.call_tool("echo", {"message": "after cancel"})))
        return order

    assert run_host(demo_gateway.url, scenario) == ["fast", "slow", "after cancel"]


def test_full_loop_with_a_bearer_token(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_AUTH_TOKEN": "loop-token"})

    async def scenario(client: Client) -> Any:
        return (await client.call_tool("add", {"a": 1, "b": 1})).structured_content

    assert run_host(gw.url, scenario, env={"MCPGATE_BEARER_TOKEN": "loop-token"}) == {"result": 2}
    assert "loop-token" not in gw.log()


def test_auto_transport_reaches_the_gateways_own_http_sse_endpoint(demo_gateway: Any) -> None:
    """mcpgate-relay in its default (auto) mode, pointed at mcpgate's 2024-11-05 /sse: the 405 to its initialize
    POST (a JSON-RPC error body, as every error of the gateway) still means "not Streamable HTTP here"."""

    async def scenario(client: Client) -> Any:
        return (await client.call_tool("add", {"a": 4, "b": 5})).structured_content

    sse_url = demo_gateway.url.rsplit("/", 1)[0] + "/sse"
    assert run_host(sse_url, scenario) == {"result": 9}
