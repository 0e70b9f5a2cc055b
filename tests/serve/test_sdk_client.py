"""The official SDK's own Streamable HTTP client against gunicorn mcpgate.wsgi, over two children:
the bundled demo server and a stdio server written with the SDK."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from mcp import Client, types

from tests.support import FIXTURES, demo_round_trips, on_elicit, on_sample

HANG_GUARD = 60


def run_client(url: str, body: Callable[[Client, list[Any]], Awaitable[None]], mode: str = "legacy") -> None:
    notifications: list[Any] = []

    async def on_message(message: Any) -> None:
        notifications.append(message)

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with Client(
                url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample, message_handler=on_message
            ) as client:
                await body(client, notifications)

    anyio.run(main)


def test_demo_tools_resources_prompts(demo_gateway: Any) -> None:
    async def body(client: Client, _: list[Any]) -> None:
        tools = await client.list_tools()
        assert {t.name for t in tools.tools} >= {"echo", "add", "slow", "ask_name", "sample"}
        added = await client.call_tool("add", {"a": 2, "b": 3})
        assert added.structured_content == {"result": 5}
        readme = await client.read_resource("demo://readme")
        assert "demo" in readme.contents[0].text  # type: ignore[union-attr]
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert prompt.messages[0].content.text == "Please greet Ada warmly."  # type: ignore[union-attr]

    run_client(demo_gateway.url, body)


def test_demo_progress_elicitation_sampling(demo_gateway: Any) -> None:
    async def body(client: Client, _: list[Any]) -> None:
        await demo_round_trips(client)

    run_client(demo_gateway.url, body)


def test_list_changed_arrives_on_the_get_stream(demo_gateway: Any) -> None:
    async def body(client: Client, notifications: list[Any]) -> None:
        await client.call_tool("notify_change", {})
        wanted = (types.ToolListChangedNotification, types.ResourceListChangedNotification)
        with anyio.fail_after(10):  # two events on the GET stream, each handled on its own: wait for both
            while not all(any(isinstance(n, kind) for n in notifications) for kind in wanted):
                await anyio.sleep(0.05)

    run_client(demo_gateway.url, body)


def test_concurrent_calls_do_not_wait_for_each_other(demo_gateway: Any) -> None:
    async def body(client: Client, _: list[Any]) -> None:
        order: list[str] = []

        async def slow() -> None:
            await client.call_tool("slow", {"seconds": 2, "steps": 2})
            order.append("slow")

        async def fast() -> None:
            await anyio.sleep(0.2)
            await client.call_tool("echo", {"message": "x"})
            order.append("fast")

        async with anyio.create_task_group() as tg:
            tg.start_soon(slow)
            tg.start_soon(fast)
        assert order == ["fast", "slow"]

    run_client(demo_gateway.url, body)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sdk_written_child_sampling_elicitation_and_modes(gateway_factory: Any, mode: str) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'conformance_server.py'}"})

    async def body(client: Client, _: list[Any]) -> None:
        # auto probes server/discover first: the gateway answers it, so the client speaks 2026-07-28
        assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        text = await client.call_tool("test_simple_text", {})
        assert text.content[0].type == "text"
        if mode == "legacy":  # these tools ask with server-to-client requests, which 2026-07-28 replaced (MRTR:
            # tests/serve/test_modern_sdk.py)
            sampled = await client.call_tool("test_sampling", {"prompt": "hello"})
            assert not sampled.is_error
            elicited = await client.call_tool("test_elicitation", {"message": "name?"})
            assert not elicited.is_error
        resource = await client.read_resource("test://static-text")
        assert resource.contents

    run_client(gw.url, body, mode=mode)
