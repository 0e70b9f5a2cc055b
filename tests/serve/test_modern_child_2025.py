"""A 2025 client on a child that speaks only 2026-07-28 (tests/fixtures/modern_only_server.py: it answers
server/discover and refuses initialize with -32022), through `gunicorn mcpgate.wsgi`: the official Python SDK in
legacy mode (2025-11-25) over Streamable HTTP and over HTTP+SSE. The session's initialize is answered from the
child's DiscoverResult, its requests reach the child with the 2026-07-28 _meta, the child's input_required results
become elicitation and sampling requests answered through the SDK's callbacks, progress reaches the call's
callback, and a cancelled call reaches the child as notifications/cancelled."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, types
from mcp.client.sse import sse_client

from tests.interop import conformance
from tests.support import (
    FIXTURES,
    Gateway,
    cancel_a_slow_call,
    demo_round_trips,
    lazy_gateways,
    on_elicit,
    on_sample,
    serving,
    wait_for,
)

HANG_GUARD = 60
MODERN_ONLY = f"{sys.executable} {FIXTURES / 'modern_only_server.py'}"
COUNTER = "modern://counter"
CANCELLED_MARK = "modern-fixture: slow "  # what the child writes to stderr when a call of `slow` is cancelled


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with lazy_gateways({"modern-only": {"MCPGATE_COMMAND": MODERN_ONLY}}) as get:
        yield get("modern-only")


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(main)


def legacy_client(target: Any, **kwargs: Any) -> Client:
    return Client(target, mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample, **kwargs)


async def served(c: Client) -> None:
    """What a 2025 client sees of the modern-only child: its tools, resources and prompts, and the round trips."""
    assert c.protocol_version == "2025-11-25"
    tools = await c.list_tools()
    assert {"echo", "add", "slow", "ask_name", "sample"} <= {tool.name for tool in tools.tools}
    assert (await c.call_tool("echo", {"message": "old"})).content[0].text == "old"  # type: ignore[union-attr]
    assert (await c.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
    readme = await c.read_resource("modern://readme")
    assert readme.contents
    prompt = await c.get_prompt("greet", {"name": "Ada"})
    assert "Ada" in prompt.messages[0].content.text  # type: ignore[union-attr]
    await demo_round_trips(c)  # progress, elicitation (input_required) and sampling, through the SDK's callbacks


def test_streamable_http_client_in_legacy_mode(gateway: Gateway) -> None:
    """Twice: the first session finds the child modern from its refusal, the next one from the remembered era."""

    async def body() -> None:
        for _ in range(2):
            async with legacy_client(gateway.url) as c:
                await served(c)

    run(body)
    log = gateway.log()  # one worker: the first child refused initialize, the second was bridged from the start
    assert log.count("the child refused initialize as a 2026-07-28 server does") == 1
    assert log.count("a 2025-11-25 client bridged to a 2026-07-28 child") == 2


def test_http_sse_client(gateway: Gateway) -> None:
    async def body() -> None:
        async with legacy_client(sse_client(f"http://127.0.0.1:{gateway.port}/sse")) as c:
            await served(c)

    run(body)


def notifications_to(seen: list[Any]) -> Callable[[Any], Awaitable[None]]:
    async def on_message(message: Any) -> None:
        seen.append(message)

    return on_message


async def poke_until(poke: Callable[[], Awaitable[Any]], done: Callable[[], bool]) -> None:
    """Poke the child until what it causes has arrived (a listen acknowledged after the poke misses it)."""
    while not done():
        await poke()
        with anyio.move_on_after(1):
            while not done():
                await anyio.sleep(0.02)


def test_subscribe_and_list_changed_through_a_listen(gateway: Gateway) -> None:
    """resources/subscribe and the child's list_changed reach a 2025 client through subscriptions/listen."""
    seen: list[Any] = []

    def updated() -> bool:
        return any(isinstance(n, types.ResourceUpdatedNotification) and str(n.params.uri) == COUNTER for n in seen)

    def changed() -> bool:
        return any(isinstance(n, types.ToolListChangedNotification) for n in seen)

    async def body() -> None:
        async with legacy_client(gateway.url, message_handler=notifications_to(seen)) as c:
            resources = c.server_capabilities.resources if c.server_capabilities else None
            assert resources is not None and resources.subscribe
            await c.subscribe_resource(COUNTER)  # answered once the listen carrying it is acknowledged
            await c.call_tool("bump", {})
            await poke_until(lambda: c.call_tool("bump", {}), updated)
            await poke_until(lambda: c.call_tool("notify_change", {}), changed)
            await c.unsubscribe_resource(COUNTER)
            assert (await c.call_tool("echo", {"message": "still"})).content[0].text == "still"  # type: ignore[union-attr]

    run(body)
    assert "listening on the child for" in gateway.log()  # acknowledged by the child, not ended


def test_cancelled_call_reaches_the_child(gateway: Gateway) -> None:
    before = gateway.log().count(CANCELLED_MARK)

    async def body() -> None:
        async with legacy_client(gateway.url) as c:
            await cancel_a_slow_call(c)

    run(body)
    assert wait_for(lambda: gateway.log().count(CANCELLED_MARK) > before), "the child was never told"


def test_declined_elicitation_reaches_the_child(gateway: Gateway) -> None:
    async def decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async def body() -> None:
        async with Client(gateway.url, mode="legacy", elicitation_callback=decline) as c:
            result = await c.call_tool("ask_name", {})
            assert result.is_error or "Hello" not in str(result.content)

    run(body)


@pytest.mark.npm
def test_typescript_sdk_1_client(gateway: Gateway) -> None:
    """The TypeScript SDK 1.x client (2025-11-25 over Streamable HTTP): a call, progress, an elicitation."""
    conformance.ensure_installed()
    seen = conformance.node_client(FIXTURES / "ts_legacy_client.cjs", gateway.url)
    assert seen["server"]["name"] == "mcpgate-modern-fixture" and seen["protocolVersion"] == "2025-11-25"
    assert {"echo", "slow", "ask_name"} <= set(seen["tools"]) and seen["echoed"] == "from node"
    assert seen["slow"].startswith("done") and seen["progress"] == [1, 2, 3]
    assert seen["asked"] == "Hello, Grace"


def test_a_server_downgraded_after_it_was_remembered_modern_only(tmp_path: Path) -> None:
    """A child of a command remembered as modern-only that refuses server/discover as a legacy server does gets the
    client's initialize as it came, and the command is forgotten as modern-only."""
    flag = tmp_path / "legacy-now"
    command = f"{sys.executable} {FIXTURES / 'era_switch_server.py'} {flag}"

    async def one(server_name: str) -> None:
        async with legacy_client(gw.url) as c:
            assert c.server_info is not None and c.server_info.name == server_name
            assert (await c.call_tool("echo", {"message": "x"})).content[0].text == "x"  # type: ignore[union-attr]

    with serving({"MCPGATE_COMMAND": command}) as gw:
        run(lambda: one("mcpgate-modern-fixture"))
        flag.write_text("")
        run(lambda: one("mcpgate-demo"))
        run(lambda: one("mcpgate-demo"))  # not bridged any more: initialize goes first
        log = gw.log()
    assert log.count("though its server refused initialize before") == 1
