"""The official SDK client speaking MCP 2026-07-28 (mode "2026-07-28" and mode "auto") to `gunicorn mcpgate.wsgi`,
over two children: the bundled demo server (legacy only: the gateway initializes it and bridges its elicitation
and sampling requests into input_required results) and tests/fixtures/modern_server.py (written with the SDK; it
speaks 2026-07-28 itself). Both have the same tool names. Also: cancellation by closing the stream, two clients
with identical ids at once, two clients eliciting at once, and the legacy session path beside it all."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest
from mcp import Client, types
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

from tests.support import (
    MODERN,
    MODERN_CHILD,
    Gateway,
    cancel_a_slow_call,
    demo_round_trips,
    lazy_gateways,
    modern_body,
    on_elicit,
    on_sample,
    post_modern,
    reply_messages,
    wait_for,
)

HANG_GUARD = 60
ENVS = {"demo": {}, "modern": {"MCPGATE_COMMAND": MODERN_CHILD}}
SERVER_NAMES = {"demo": "mcpgate-demo", "modern": "mcpgate-modern-fixture"}
README = {"demo": "demo://readme", "modern": "modern://readme"}
# what each child writes to stderr (the gunicorn log) when a tools/call of `slow` is cancelled
CANCELLED_MARK = {"demo": "cancelled; no response sent", "modern": "modern-fixture: slow "}
KINDS = pytest.mark.parametrize("kind", ["demo", "modern"])
MODES = pytest.mark.parametrize("mode", [MODERN, "auto"])


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    """One gateway per kind of child for the whole module, started on first use."""
    with lazy_gateways(ENVS) as get:
        yield get


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(main)


def client(gw: Gateway, mode: str = MODERN, **kwargs: Any) -> Client:
    return Client(gw.url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample, **kwargs)


@KINDS
@MODES
def test_tools_resources_prompts(gateways: Callable[[str], Gateway], kind: str, mode: str) -> None:
    async def body() -> None:
        async with client(gateways(kind), mode) as c:
            assert c.protocol_version == MODERN
            if mode == "auto":  # it asked server/discover
                assert c.server_info is not None and c.server_info.name == SERVER_NAMES[kind]
                assert c.server_capabilities.tools is not None
            tools = await c.list_tools()
            assert {t.name for t in tools.tools} >= {"echo", "add", "slow", "ask_name", "sample", "log"}
            assert (await c.call_tool("echo", {"message": "héllo"})).content[0].text == "héllo"  # type: ignore[union-attr]
            assert (await c.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
            resources = await c.list_resources()
            assert README[kind] in {str(r.uri) for r in resources.resources}
            readme = await c.read_resource(README[kind])
            assert readme.contents[0].text  # type: ignore[union-attr]
            prompt = await c.get_prompt("greet", {"name": "Ada"})
            assert prompt.messages[0].content.text == "Please greet Ada warmly."  # type: ignore[union-attr]
            if kind == "modern":  # the client mirrors `region` into Mcp-Param-Region; the gateway checks it
                where = await c.call_tool("where", {"query": "rain", "region": "Zürich"})
                assert where.content[0].text == "rain in Zürich"  # type: ignore[union-attr]

    run(body)


@KINDS
@MODES
def test_progress_elicitation_sampling(gateways: Callable[[str], Gateway], kind: str, mode: str) -> None:
    """Through the gateway's MRTR bridge for the demo child; the modern child's own input_required results."""

    async def body() -> None:
        async with client(gateways(kind), mode) as c:
            assert c.protocol_version == MODERN
            await demo_round_trips(c)

    run(body)


@KINDS
def test_logging_only_when_asked_and_at_or_above_the_level(gateways: Callable[[str], Gateway], kind: str) -> None:
    async def body() -> None:
        quiet: list[types.LoggingMessageNotificationParams] = []
        heard: list[types.LoggingMessageNotificationParams] = []

        async def on_quiet(params: types.LoggingMessageNotificationParams) -> None:
            quiet.append(params)

        async def on_heard(params: types.LoggingMessageNotificationParams) -> None:
            heard.append(params)

        gw = gateways(kind)
        async with client(gw, logging_callback=on_quiet) as c:  # no log level: no opt-in
            assert (await c.call_tool("log", {"level": "emergency", "message": "unasked"})).content
        async with client(gw, log_level="info", logging_callback=on_heard) as c:
            await c.call_tool("log", {"level": "debug", "message": "below"})
            await c.call_tool("log", {"level": "warning", "message": "careful"})
            with anyio.move_on_after(10):
                while not heard:
                    await anyio.sleep(0.02)
        assert [(p.level, p.data) for p in heard] == [("warning", "careful")]
        assert quiet == []

    run(body)


@KINDS
def test_listen_to_tools_list_changed_and_a_resource(gateways: Callable[[str], Gateway], kind: str) -> None:
    async def body() -> None:
        async with client(gateways(kind)) as c:
            uri = "modern://counter" if kind == "modern" else "demo://readme"
            async with c.listen(tools_list_changed=True, resource_subscriptions=[uri]) as sub:
                assert sub.honored.tools_list_changed is True
                await c.call_tool("notify_change", {})
                events = []
                if kind == "modern":  # the demo cannot subscribe to resources: not honoured
                    assert list(sub.honored.resource_subscriptions or []) == [uri]
                    await c.call_tool("bump", {})
                else:
                    assert not sub.honored.resource_subscriptions
                async for event in sub:
                    events.append(event)
                    if len(events) == (2 if kind == "modern" else 1):
                        break
                assert any(isinstance(e, ToolsListChanged) for e in events), events
                if kind == "modern":
                    assert ResourceUpdated(uri=uri) in events, events

    run(body)


@KINDS
def test_cancellation_by_closing_the_stream_reaches_the_child(gateways: Callable[[str], Gateway], kind: str) -> None:
    gw = gateways(kind)
    before = gw.log().count(CANCELLED_MARK[kind])

    async def body() -> None:
        async with client(gw) as c:
            await cancel_a_slow_call(c)

    run(body)
    assert wait_for(lambda: gw.log().count(CANCELLED_MARK[kind]) > before), "the child was never told"


@KINDS
def test_two_requests_with_identical_ids_at_once(gateways: Callable[[str], Gateway], kind: str) -> None:
    """Same id 7 and same progress token "p" from two raw HTTP clients at once: each gets its own answer."""
    gw = gateways(kind)
    post_modern(gw, modern_body(0, "tools/list"))  # the pooled child is up
    barrier = threading.Barrier(2)
    replies: dict[int, Any] = {}

    def post(steps: int, seconds: float) -> None:
        body = modern_body(7, "tools/call", {"name": "slow", "arguments": {"seconds": seconds, "steps": steps}})
        body["params"]["_meta"]["progressToken"] = "p"
        barrier.wait(10)
        replies[steps] = post_modern(gw, body)

    threads = [threading.Thread(target=post, args=args) for args in ((2, 1.0), (3, 0.3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for steps, seconds in ((2, 1.0), (3, 0.3)):
        messages = reply_messages(replies[steps])
        progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
        assert [p["progress"] for p in progress] == list(range(1, steps + 1)), replies[steps]
        assert {p["progressToken"] for p in progress} == {"p"} and {p["total"] for p in progress} == {steps}
        assert messages[-1]["id"] == 7, replies[steps]
        assert messages[-1]["result"]["content"][0]["text"] == f"done after {seconds:g} s", replies[steps]


@KINDS
def test_two_clients_eliciting_at_once(gateways: Callable[[str], Gateway], kind: str) -> None:
    """Both clients' input requests are pending together; each gets its own question and its own result."""
    gw = gateways(kind)
    asked: list[str] = []
    both = anyio.Event()
    greetings: dict[str, str] = {}

    def answering(name: str) -> Any:
        async def on_elicit_as(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.append(params.message)
            if len(asked) == 2:
                both.set()
            with anyio.move_on_after(20):
                await both.wait()
            return types.ElicitResult(action="accept", content={"name": name})

        return on_elicit_as

    async def one(name: str) -> None:
        async with Client(gw.url, mode=MODERN, elicitation_callback=answering(name)) as c:
            greetings[name] = (await c.call_tool("ask_name", {})).content[0].text  # type: ignore[union-attr]

    async def body() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "Ada")
            tg.start_soon(one, "Grace")

    run(body)
    assert both.is_set(), f"the two input requests were never pending at once: {asked}"
    assert asked == ["What is your name?"] * 2
    assert greetings == {"Ada": "Hello, Ada", "Grace": "Hello, Grace"}


@KINDS
def test_the_legacy_session_path_beside_it(gateways: Callable[[str], Gateway], kind: str) -> None:
    async def body() -> None:
        async with client(gateways(kind), "legacy") as c:
            assert c.protocol_version == "2025-11-25"
            assert (await c.call_tool("echo", {"message": "old"})).content[0].text == "old"  # type: ignore[union-attr]
            await demo_round_trips(c)

    run(body)
