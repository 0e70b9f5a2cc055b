"""SDK stdio client -> mcpgate-relay -> SDK Streamable HTTP server: every feature end to end."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.support.relay import Upstream, await_for, explain_stderr, relay_params, run_host


def _text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.filterwarnings("ignore:ping is removed")
def test_tools_resources_prompts(streamable_upstream: Upstream) -> None:
    async def scenario(client: Client) -> dict[str, Any]:
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 40, "b": 2})
        resources = await client.list_resources()
        greeting = await client.read_resource("test://greeting")
        item = await client.read_resource("test://items/7")
        prompts = await client.list_prompts()
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        await client.send_ping()
        return {
            "tools": {t.name for t in tools.tools},
            "added": added.structured_content,
            "resources": [str(r.uri) for r in resources.resources],
            "greeting": greeting.contents[0],
            "item": item.contents[0],
            "prompts": [p.name for p in prompts.prompts],
            "prompt": prompt.messages[0].content,
        }

    seen = run_host(streamable_upstream.url, scenario)
    assert {"add", "slow", "release", "progress", "ask_name"} <= seen["tools"]
    assert seen["added"] == {"result": 42}
    assert seen["resources"] == ["test://greeting"]
    assert seen["greeting"].text == "hello from the upstream"
    assert seen["item"].text == "item 7"
    assert seen["prompts"] == ["greet"]
    assert "Ada" in seen["prompt"].text


def test_progress_notifications_arrive_in_order(streamable_upstream: Upstream) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async def scenario(client: Client) -> str:
        return _text(await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress))

    assert run_host(streamable_upstream.url, scenario) == "did 3 steps"
    assert updates == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


def test_elicitation_round_trip(streamable_upstream: Upstream) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def scenario(client: Client) -> str:
        return _text(await client.call_tool("ask_name", {}))

    assert run_host(streamable_upstream.url, scenario, elicitation_callback=elicit) == "hello Ada"
    assert asked == ["What is your name?"]


def test_sampling_round_trip(streamable_upstream: Upstream) -> None:
    async def sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        prompt = params.messages[0].content
        assert isinstance(prompt, types.TextContent)
        return types.CreateMessageResult(
            role="assistant", model="echo", content=types.TextContent(type="text", text=prompt.text.upper())
        )

    async def scenario(client: Client) -> str:
        return _text(await client.call_tool("sample", {"prompt": "shout"}))

    assert run_host(streamable_upstream.url, scenario, sampling_callback=sample) == "SHOUT"


def test_server_notification_on_get_stream(streamable_upstream: Upstream) -> None:
    seen: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            seen.append(message.method)

    async def scenario(client: Client) -> None:
        await client.list_tools()
        # The relay opens the GET stream after notifications/initialized, beside the host's first requests; the
        # upstream drops a notification sent before that stream is registered. So announce until one arrives
        # (bounded by run_host's hang guard): the relay must carry what the stream brings.
        while not seen:
            await client.call_tool("announce", {})
            with anyio.move_on_after(1.0):
                await await_for(lambda: bool(seen), "tools/list_changed on the GET stream")

    run_host(streamable_upstream.url, scenario, message_handler=on_message)
    assert seen and set(seen) == {"notifications/tools/list_changed"}


def test_slow_call_does_not_delay_later_requests(streamable_upstream: Upstream) -> None:
    order: list[str] = []

    async def scenario(client: Client) -> None:
        async def slow() -> None:
            result = await client.call_tool("slow", {"tag": "concurrent"})
            order.append(_text(result))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(slow)
            await await_for(lambda: streamable_upstream.marked("started-concurrent"), "slow tool to start")
            tools = await client.list_tools()
            order.append(f"listed {len(tools.tools)}")
            added = await client.call_tool("add", {"a": 1, "b": 2})
            order.append(f"added {added.structured_content}")
            assert order[-2:] == [f"listed {len(tools.tools)}", "added {'result': 3}"]
            await client.call_tool("release", {"tag": "concurrent"})
        assert order[-1] == "released concurrent"

    run_host(streamable_upstream.url, scenario)
    assert order[0].startswith("listed") and order[1].startswith("added") and order[2] == "released concurrent"


def test_cancel_reaches_the_upstream_tool(streamable_upstream: Upstream) -> None:
    async def scenario(client: Client) -> Any:
        with anyio.CancelScope() as scope:

            async def cancel_when_started() -> None:
                await await_for(lambda: streamable_upstream.marked("started-cancel-me"), "slow tool to start")
                scope.cancel()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(cancel_when_started)
                await client.call_tool("slow", {"tag": "cancel-me"})
        await await_for(lambda: streamable_upstream.marked("cancelled-cancel-me"), "the upstream tool's cancel")
        return (await client.call_tool("add", {"a": 2, "b": 2})).structured_content

    assert run_host(streamable_upstream.url, scenario) == {"result": 4}
    assert streamable_upstream.marked("cancelled-cancel-me")


def test_upstream_restart_is_recovered(upstream_factory: Any) -> None:
    upstream: Upstream = upstream_factory("streamable-http")

    async def scenario(client: Client) -> tuple[Any, Any, Any]:
        before = (await client.call_tool("whoami", {})).structured_content
        upstream.stop()
        upstream.start()  # same port, a new process: the old session id now answers 404
        after = (await client.call_tool("whoami", {})).structured_content
        listed = await client.list_tools()
        return before, after, len(listed.tools)

    before, after, tools = run_host(upstream.url, scenario)
    assert before != after
    assert tools > 0


def test_unknown_tool_error_passes_through(streamable_upstream: Upstream) -> None:
    async def scenario(client: Client) -> Any:
        try:
            result = await client.call_tool("no-such-tool", {})
        except MCPError as exc:
            return str(exc)
        return _text(result)

    assert "no-such-tool" in run_host(streamable_upstream.url, scenario)


@pytest.mark.parametrize("extra", [("--no-cancel-filter",), ("--transport", "streamable-http")])
def test_options_keep_the_basics_working(streamable_upstream: Upstream, extra: tuple[str, ...]) -> None:
    async def scenario(client: Client) -> Any:
        return (await client.call_tool("add", {"a": 5, "b": 6})).structured_content

    assert run_host(streamable_upstream.url, scenario, *extra) == {"result": 11}


def test_default_mode_host_speaks_2026_07_28_to_a_dual_era_upstream(streamable_upstream: Upstream) -> None:
    """An SDK host in its default mode probes server/discover first; the SDK server speaks both eras, so the
    relay carries the host's 2026-07-28 requests as they are (no bridge)."""

    async def main() -> tuple[str | None, Any]:
        with anyio.fail_after(60):
            async with Client(relay_params(streamable_upstream.url)) as client:
                return client.protocol_version, (await client.call_tool("add", {"a": 1, "b": 1})).structured_content

    assert anyio.run(main) == ("2026-07-28", {"result": 2})


@pytest.mark.parametrize("level", ["warning", "info"])
def test_a_healthy_start_logs_nothing_at_warning(streamable_upstream: Upstream, tmp_path: Path, level: str) -> None:
    """The SDK Client's default mode probes server/discover; the relay finds the upstream speaks 2026-07-28 and
    says so once, at INFO: nothing louder."""
    log = tmp_path / "relay-stderr.log"

    async def scenario(client: Client) -> Any:
        return (await client.call_tool("add", {"a": 2, "b": 3})).structured_content

    assert run_host(streamable_upstream.url, scenario, "--log-level", level, stderr=log, mode="auto") == {"result": 5}
    stderr = log.read_text()
    loud = [line for line in stderr.splitlines() if not re.match(r"\S+ \S+ mcpgate-relay (INFO|DEBUG) ", line)]
    assert loud == [], explain_stderr(stderr)
    if level == "info":  # the probe did happen, and the relay logged what it chose
        chosen = "upstream speaks 2026-07-28; host speaks 2026-07-28; bridging: no bridge"
        assert f"mcpgate-relay INFO {chosen}" in stderr, explain_stderr(stderr)
