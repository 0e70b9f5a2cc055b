"""A member of the aggregate that speaks only 2026-07-28 (serve/hub/member.py), through gunicorn mcpgate.wsgi and
the official SDK client in both eras: the stdio fixture tests/fixtures/modern_only_server.py (it answers
server/discover and refuses initialize with -32022) and the demo server behind MCPGATE_PATH, and a remote
upstream that speaks only 2026-07-28 over Streamable HTTP (tests/fixtures/era_http_server.py --era modern) beside
them. The hub speaks 2025 to its members: the modern-only one is bridged (serve/sessions/modern_bridge.py), so its
tools, resources and prompts are merged with the demo's, calls reach it, its input_required results reach the
client as elicitation and sampling (and come back as a 2026-07-28 client's own input_required), its progress and
list_changed arrive, a cancelled call reaches it, and what fails names the server."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client

from tests.support import (
    DEMO_ENTRY,
    FIXTURES,
    MODERN,
    Gateway,
    cancel_a_slow_call,
    demo_round_trips,
    on_elicit,
    on_sample,
    serving,
    wait_for,
)
from tests.support.hub import ListChanged, Prefixed, held_back, kill_member, write
from tests.support.relay import EraServer

HANG_GUARD = 90
MODERN_ONLY = {"command": sys.executable, "args": [str(FIXTURES / "modern_only_server.py")]}
ERAS = ["legacy", MODERN]
CANCELLED = re.compile(r"child\[\*/[^\]]+/modern\] stderr: modern-fixture: slow \S+ cancelled")


@pytest.fixture(scope="module")
def far(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EraServer]:
    upstream = EraServer("modern", tmp_path_factory.mktemp("far")).start()
    try:
        yield upstream
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory, far: EraServer) -> Iterator[Gateway]:
    """demo + modern (stdio, 2026-07-28 only) + far (HTTP, 2026-07-28 only), aggregated at /mcp; the group "pair"
    of demo and modern at /groups/pair/mcp."""
    servers = {"demo": DEMO_ENTRY, "modern": MODERN_ONLY, "far": {"url": far.url}}
    config = write(
        tmp_path_factory.mktemp("hub") / "mcp.json", servers, groups={"pair": {"servers": ["demo", "modern"]}}
    )
    with serving({"MCPGATE_CONFIG": config}, behind=True) as gw:
        yield gw


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(guarded)


def client(url: Any, mode: str, **kwargs: Any) -> Client:
    return Client(url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample, **kwargs)


def text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.parametrize("mode", ERAS)
def test_the_modern_only_members_are_merged_and_called_in_both_eras(hub: Gateway, mode: str) -> None:
    async def main() -> None:
        async with client(hub.url, mode) as c:
            names = {tool.name for tool in (await c.list_tools()).tools}
            for prefix in ("demo", "modern", "far"):
                assert {f"{prefix}__echo", f"{prefix}__slow", f"{prefix}__ask_name"} <= names, names
            assert {"modern__where", "far__interview"} <= names
            assert text(await c.call_tool("modern__echo", {"message": mode})) == mode
            assert text(await c.call_tool("far__echo", {"message": "far " + mode})) == "far " + mode
            assert text(await c.call_tool("demo__echo", {"message": "demo"})) == "demo"
            added = await c.call_tool("modern__add", {"a": 2, "b": 3})
            assert added.structured_content == {"result": 5.0}
            assert text(await c.call_tool("modern__where", {"query": "tea", "region": "Kent"})) == "tea in Kent"

    run(main)


@pytest.mark.parametrize("mode", ERAS)
def test_progress_elicitation_and_sampling_from_the_modern_only_member(hub: Gateway, mode: str) -> None:
    """Its input_required results become elicitation/create and sampling/createMessage for a 2025 client, and the
    pool's input_required again for a 2026-07-28 one; the answers come back to it as inputResponses."""

    async def main() -> None:
        async with client(hub.url, mode) as c:
            if mode == "legacy":  # progress reaches a 2025 call's callback (a 2026-07-28 call's too, on the pool)
                await demo_round_trips(Prefixed(c, "modern__"))
                await demo_round_trips(Prefixed(c, "demo__"))
            else:
                assert text(await c.call_tool("modern__ask_name", {})) == "Hello, Grace"
                assert text(await c.call_tool("modern__sample", {"prompt": "shout this"})) == "SHOUT THIS"
                assert text(await c.call_tool("demo__ask_name", {})) == "Hello, Grace"

    run(main)


@pytest.mark.parametrize("mode", ERAS)
def test_the_remote_modern_only_member_asks_the_client_in_turn(hub: Gateway, mode: str) -> None:
    """far's interview elicits a name, then samples with it: two input_required rounds through the relay's bridge."""

    async def main() -> None:
        async with client(hub.url, mode) as c:
            answer = text(await c.call_tool("far__interview", {}))
            assert answer.startswith("Grace: "), answer

    run(main)


@pytest.mark.parametrize("mode", ERAS)
def test_resources_and_prompts_of_the_modern_only_member(hub: Gateway, mode: str) -> None:
    """Its resources keep their URIs (on the aggregate, where far lists the same ones, they are ambiguous and the
    error names both) and its prompts are namespaced."""

    async def main() -> None:
        async with client(hub.url, mode) as c:
            await c.list_resources()  # the hub's URI map is filled from every member's list
            with pytest.raises(Exception, match=r"served by more than one server of this endpoint \(modern, far\)"):
                await c.read_resource("modern://readme")
        async with client(f"{hub.base}/groups/pair/mcp", mode) as c:
            # read first: the hub holds it until its own resources lists are answered (core/hub.py)
            readme = await c.read_resource("modern://readme")
            assert readme.contents[0].text == "The modern fixture."  # type: ignore[union-attr]
            uris = {str(r.uri) for r in (await c.list_resources()).resources}
            assert {"demo://readme", "modern://readme"} <= uris, uris
            prompts = {p.name for p in (await c.list_prompts()).prompts}
            assert {"demo__greet", "modern__greet"} <= prompts, prompts
            prompt = await c.get_prompt("modern__greet", {"name": "Ada"})
            assert prompt.messages[0].content.text == "Please greet Ada warmly."  # type: ignore[union-attr]

    run(main)


def test_list_changed_from_the_modern_only_member_reaches_the_client(hub: Gateway) -> None:
    """Its notifications/tools/list_changed arrives over the bridge's subscriptions/listen."""

    async def main() -> None:
        changed = ListChanged()
        async with client(hub.url, "legacy", message_handler=changed.handler) as c:
            before = {tool.name for tool in (await c.list_tools()).tools}
            assert text(await c.call_tool("modern__notify_change", {})) == "sent"
            await changed.next(10)
            after = {tool.name for tool in (await c.list_tools()).tools}
            assert after ^ before == {"modern__extra"}

    run(main)


def test_a_cancelled_call_reaches_the_modern_only_member(hub: Gateway) -> None:
    async def main() -> None:
        async with client(hub.url, "legacy") as c:
            await cancel_a_slow_call(Prefixed(c, "modern__"))

    run(main)
    assert wait_for(lambda: CANCELLED.search(hub.log()), timeout=20), hub.log_tail()


def test_http_sse_client_on_the_aggregate_with_a_modern_only_member(hub: Gateway) -> None:
    async def main() -> None:
        async with client(sse_client(f"{hub.base}/sse"), "legacy") as c:
            assert text(await c.call_tool("modern__echo", {"message": "over sse"})) == "over sse"
            assert text(await c.call_tool("modern__ask_name", {})) == "Hello, Grace"

    run(main)


def test_the_verdict_is_remembered_and_logged(hub: Gateway) -> None:
    """The first member child that refused initialize is bridged on the spot; the server's next ones start bridged
    (one verdict per command, shared with its own path)."""

    async def main() -> None:
        for _ in range(2):
            async with client(hub.url, "legacy") as c:
                assert text(await c.call_tool("modern__echo", {"message": "again"})) == "again"
        async with client(f"{hub.base}/servers/modern/mcp", "legacy") as c:
            assert text(await c.call_tool("echo", {"message": "own path"})) == "own path"

    run(main)
    log = hub.log()
    assert "/modern: refused initialize as a 2026-07-28 server does; bridged" in log, hub.log_tail()
    assert wait_for(lambda: "/modern: its server speaks only 2026-07-28 (remembered); bridged" in hub.log())
    assert "no longer part of this endpoint" not in log, hub.log_tail()
    assert "Traceback" not in log


def test_errors_name_the_modern_only_member(tmp_path: Path) -> None:
    """A tool's failure and an unknown name are told as for any member (the member's own answer when the prefix
    is its); a modern-only member that ends takes its
    tools with it and a call naming it is told which server ended; the others go on."""
    mark = tmp_path / "held"  # its new child silent (tests/support/hub.py's held_back): it stays gone
    config = write(tmp_path / "mcp.json", {"demo": DEMO_ENTRY, "modern": held_back(MODERN_ONLY, mark)})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> None:
            changed = ListChanged()
            async with client(gw.url, "legacy", message_handler=changed.handler) as c:
                failed = await c.call_tool("modern__add", {"a": "not a number", "b": 1})
                assert failed.is_error, failed
                unknown = await c.call_tool("modern__nope", {})  # the member's own answer, under its own name
                assert unknown.is_error and "Unknown tool: nope" in text(unknown), unknown
                with pytest.raises(Exception, match="Unknown tool: nobody__echo"):
                    await c.call_tool("nobody__echo", {})
                mark.touch()
                kill_member(gw, "modern")
                await changed.next(10)
                names = {tool.name for tool in (await c.list_tools()).tools}
                assert "demo__echo" in names and not [n for n in names if n.startswith("modern__")]
                with pytest.raises(Exception, match="Server 'modern' of this endpoint is not available: it ended"):
                    await c.call_tool("modern__echo", {"message": "gone"})
                assert text(await c.call_tool("demo__echo", {"message": "still"})) == "still"

        run(main)


REFUSES_BOTH = """
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if "id" in msg and "method" in msg:
        error = {"code": -32022, "message": "no era of yours", "data": {"supported": ["2099-01-01"], "requested": "x"}}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error}), flush=True)
"""


@pytest.mark.parametrize("mode", ERAS)
def test_a_member_refusing_both_eras_is_left_out_naming_why(tmp_path: Path, mode: str) -> None:
    """It refuses initialize as a 2026-07-28 server does and then server/discover too: the hub leaves it out,
    the log names it and the refusal, and the demo goes on."""
    script = tmp_path / "refuses_both.py"
    script.write_text(REFUSES_BOTH)
    servers = {"demo": DEMO_ENTRY, "odd": {"command": sys.executable, "args": [str(script)]}}
    with serving({"MCPGATE_CONFIG": write(tmp_path / "mcp.json", servers)}) as gw:

        async def main() -> None:
            async with client(gw.url, mode) as c:
                names = {tool.name for tool in (await c.list_tools()).tools}
                assert "demo__echo" in names and not [n for n in names if n.startswith("odd__")]
                with pytest.raises(Exception, match="Server 'odd' of this endpoint is not available: it refused"):
                    await c.call_tool("odd__echo", {})
                assert text(await c.call_tool("demo__echo", {"message": "on"})) == "on"

        run(main)
        assert "server 'odd' is no longer part of this endpoint: it refused initialize (server/discover failed: " in (
            gw.log()
        ), gw.log_tail()
