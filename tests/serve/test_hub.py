"""One endpoint for several servers (serve/hub), through gunicorn mcpgate.wsgi and the official SDK client: the
demo server, an SDK-written server and a paginating one behind MCPGATE_PATH (and a group of the file at
/groups/<name>/mcp): merged lists with namespaced names, calls routed, progress, cancellation, elicitation and
sampling from a member, list_changed, pagination across members, a member that cannot start, the 2026-07-28 SDK
path (through the pool's bridge) and HTTP+SSE."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tests.support import (
    DEMO_ENTRY,
    NAMED_ENTRY,
    Gateway,
    cancel_a_slow_call,
    demo_round_trips,
    on_elicit,
    on_sample,
    wait_for,
)
from tests.support.hub import ListChanged, Prefixed, all_tools, held_back, kill_member, many, write

HANG_GUARD = 90
CANCELLED = re.compile(r"child\[\*/[^\]]+/demo\] stderr: .*tools/call \d+ cancelled; no response sent")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """demo + sdk (named fixture, prefix "py") + pager (5 tools, 2 a page) + broken (cannot start), aggregated at
    /mcp; and the group "pair" of demo and sdk."""
    config = write(
        tmp_path_factory.mktemp("hub") / "mcp.json",
        {
            "demo": DEMO_ENTRY,
            "sdk": {**NAMED_ENTRY, "prefix": "py"},
            "pager": many("pager"),
            "broken": {"command": "/nonexistent/mcp-server"},
        },
        groups={"pair": {"servers": ["demo", "sdk"]}},
    )
    gw = Gateway({"MCPGATE_CONFIG": config})
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def run(main: Any) -> None:
    async def guarded() -> None:
        with anyio.fail_after(HANG_GUARD):
            await main()

    anyio.run(guarded)


def client(url: str, mode: str = "legacy") -> Client:
    return Client(url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample)


def test_merged_tools_are_namespaced_and_calls_routed(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            names = await all_tools(c)
            assert {"demo__echo", "demo__slow", "py__greet", "pager__t0", "pager__t4"} <= set(names)
            assert not [n for n in names if n.startswith("broken__")]
            echoed = await c.call_tool("demo__echo", {"message": "via the hub"})
            assert echoed.content[0].text == "via the hub"
            greeted = await c.call_tool("py__greet", {"name": "Ada"})
            assert greeted.content[0].text == "Hello, Ada from named-fixture"
            paged = await c.call_tool("pager__t3", {"x": 1})
            assert paged.content[0].text == 'pager:t3 {"x": 1}'

    run(main)


def test_resources_keep_their_uris_and_prompts_are_namespaced(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            uris = {str(r.uri) for r in (await c.list_resources()).resources}
            assert {"demo://readme", "demo://time"} <= uris
            templates = (await c.list_resource_templates()).resource_templates
            assert [(t.name, t.uri_template) for t in templates] == [("demo__echo", "demo://echo/{text}")]
            readme = await c.read_resource("demo://readme")
            assert "mcpgate demo server" in readme.contents[0].text  # type: ignore[union-attr]
            echoed = await c.read_resource("demo://echo/hi")  # routed by its template's start
            assert echoed.contents[0].text == "hi"  # type: ignore[union-attr]
            with pytest.raises(Exception, match="no server here lists"):
                await c.read_resource("nobody://x")
            assert "demo__greet" in [p.name for p in (await c.list_prompts()).prompts]
            prompt = await c.get_prompt("demo__greet", {"name": "Ada"})
            assert prompt.messages[0].content.text == "Please greet Ada warmly."  # type: ignore[union-attr]

    run(main)


def test_pagination_across_members_gives_every_tool_once(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            first = await c.list_tools()
            assert first.next_cursor  # the pager lists 2 a page
            names = await all_tools(c)
            pager = [n for n in names if n.startswith("pager__")]
            assert pager == [f"pager__t{i}" for i in range(5)] + ["pager__grow"]
            assert len(names) == len(set(names))
            with pytest.raises(Exception, match="cursor"):
                await c.list_tools(cursor="not-a-hub-cursor")

    run(main)


def test_progress_elicitation_and_sampling_from_a_member_reach_the_client(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            await demo_round_trips(Prefixed(c, "demo__"))

    run(main)


def test_a_call_naming_a_server_that_cannot_start_is_told_why(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            with pytest.raises(Exception, match=r"Server 'broken' of this endpoint is not available: it cannot start"):
                await c.call_tool("broken__anything", {})
            with pytest.raises(Exception, match="Unknown tool: nobody__echo"):
                await c.call_tool("nobody__echo", {})
            assert (await c.call_tool("demo__echo", {"message": "others go on"})).content[0].text == "others go on"

    run(main)


def test_cancellation_reaches_the_member_holding_the_call(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url) as c:
            await cancel_a_slow_call(Prefixed(c, "demo__"))

    run(main)
    # the demo member was told under the hub's id for the call: it cancelled it (its stderr says so)
    assert wait_for(lambda: CANCELLED.search(hub.log()), timeout=20), hub.log_tail()


def test_list_changed_from_a_member_reaches_the_client_within_a_second(hub: Gateway) -> None:
    async def main() -> None:
        changed = ListChanged()
        async with Client(hub.url, mode="legacy", message_handler=changed.handler) as c:
            before = set(await all_tools(c))
            await c.call_tool("pager__grow", {})
            await changed.next(5)  # the hub sends it 0.2 s after the member's (generous bound)
            grown = set(await all_tools(c)) - before
            assert grown == {"pager__t5"}

    run(main)


def test_a_group_of_the_file_at_its_own_path(hub: Gateway) -> None:
    async def main() -> None:
        async with client(f"{hub.base}/groups/pair/mcp") as c:
            names = set(await all_tools(c))
            assert "demo__echo" in names and "py__greet" in names
            assert not [n for n in names if n.startswith("pager__")]
            assert (await c.call_tool("py__greet", {"name": "Lin"})).content[0].text == "Hello, Lin from named-fixture"

    run(main)


def test_a_2026_07_28_client_on_the_aggregate(hub: Gateway) -> None:
    """The SDK's 2026-07-28 path: stateless calls on the pool, whose children are HubChildren spoken to as 2025
    servers (the pool's bridge turns a member's elicitation into input_required and back)."""

    async def main() -> None:
        async with client(hub.url, mode="2026-07-28") as c:
            names = set(await all_tools(c))
            assert {"demo__echo", "py__greet", "pager__t4"} <= names
            assert (await c.call_tool("demo__echo", {"message": "modern"})).content[0].text == "modern"
            asked = await c.call_tool("demo__ask_name", {})
            assert asked.content[0].text == "Hello, Grace"
            assert (await c.call_tool("pager__t1", {})).content[0].text == "pager:t1 {}"

    run(main)


def test_http_sse_client_on_the_aggregate(hub: Gateway) -> None:
    async def main() -> None:
        target = Client(
            sse_client(f"{hub.base}/sse"), mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample
        )
        async with target as c:
            names = set(await all_tools(c))
            assert {"demo__echo", "py__greet"} <= names
            await demo_round_trips(Prefixed(c, "demo__"))

    run(main)


def test_the_aggregate_off_leaves_each_server_its_own_path(tmp_path: Path) -> None:
    config = write(tmp_path / "mcp.json", {"demo": DEMO_ENTRY, "pager": many("pager")})
    gw = Gateway({"MCPGATE_CONFIG": config, "MCPGATE_HUB": "false"})
    try:
        gw.wait_ready()
        assert gw.request("POST", "/mcp", body=b"{}", headers={"Content-Type": "application/json"}).status == 404

        async def main() -> None:
            async with client(f"{gw.base}/servers/demo/mcp") as c:
                assert (await c.call_tool("echo", {"message": "own"})).content[0].text == "own"

        run(main)
    finally:
        gw.stop()


def test_a_member_that_ends_leaves_and_its_tools_vanish(tmp_path: Path) -> None:
    """While it is gone (its new child silent: `held_back`); coming back: tests/serve/test_hub_comeback.py."""
    mark = tmp_path / "held"
    config = write(tmp_path / "mcp.json", {"demo": DEMO_ENTRY, "pager": held_back(many("pager"), mark)})
    gw = Gateway({"MCPGATE_CONFIG": config})
    try:
        gw.wait_ready()

        async def main() -> None:
            changed = ListChanged()
            async with Client(gw.url, mode="legacy", message_handler=changed.handler) as c:
                assert "pager__t0" in set(await all_tools(c))
                mark.touch()
                kill_member(gw, "pager")
                await changed.next(10)
                names = set(await all_tools(c))
                assert "demo__echo" in names and not [n for n in names if n.startswith("pager__")]
                with pytest.raises(Exception, match="Server 'pager' of this endpoint is not available: it ended"):
                    await c.call_tool("pager__t0", {})
                assert (await c.call_tool("demo__echo", {"message": "still"})).content[0].text == "still"

        run(main)
    finally:
        gw.stop()
