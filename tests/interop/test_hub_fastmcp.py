"""fastmcp behind the hub (issue 25): servers written with a framework nobody on this team wrote, as remote
upstreams (mcpServers entries with `url`: fastmcp's own Streamable HTTP server with sessions, stateless with JSON
responses, over HTTP+SSE, and with the entry's era set to 2026-07-28) and as a stdio child, beside the bundled demo
server, all published at the aggregate /mcp and driven by the official SDK client in both eras (and over
HTTP+SSE): namespaced lists walked across fastmcp's own pages, calls, progress, elicitation, cancellation, log
messages, fastmcp's per-session list_changed, resources, templates and prompts of each; then fastmcp restarted
under a session, and started after one (the hub tries it again: it comes back to that session).

fastmcp 4.0.10 runs in a virtual environment of its own (tests/peers/install.sh makes tests/.peers/fastmcp-venv),
the fixture is tests/fixtures/fastmcp_server.py: add, count (progress), ask_name (elicitation), whoami, slow (to
cancel), shout (a log message), unlock (fastmcp's per-session visibility: list_changed to that session alone), ten
extra tools listed three a page by fastmcp itself, a resource and a template under fast://<label>/, fast://shared
on each, and the prompt review."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, types
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.support import DEMO_ENTRY, MODERN, Gateway, await_for, on_elicit, on_sample, wait_for
from tests.support.fastmcp import FastmcpUpstream, fastmcp_entry
from tests.support.hub import ListChanged, every_hub_child_back

HANG_GUARD = 90
EXTRA = 10  # tools beyond the fixture's seven, fastmcp listing PAGE a page
PAGE = 3
FAST = ("fasthttp", "faststdio")  # the fixture as a `url` entry and as a stdio one, paging its lists, by prefix
UNPAGED = ("fastjson", "fastsse", "fastmodern")  # the other `url` entries (see `remotes`)
ELICITING = ("fasthttp", "faststdio", "fastsse")  # the entries whose fastmcp elicits (see the tests)
OWN = ("add", "count", "ask_name", "whoami", "slow", "shout", "unlock")  # the fixture's tools (secret: hidden)
ERAS = ("legacy", MODERN)


@pytest.fixture(scope="module")
def remotes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, FastmcpUpstream]]:
    """fastmcp over HTTP in each way the hub reaches it, by prefix; started side by side, stopped by their PIDs."""
    state = tmp_path_factory.mktemp("fastmcp")
    ways = {
        "fasthttp": paging(),  # Streamable HTTP with sessions
        "fastjson": ("--stateless", "--json"),  # stateless, JSON responses
        "fastsse": ("--sse",),  # HTTP+SSE
        "fastmodern": (),  # Streamable HTTP, its entry's era set to 2026-07-28
    }
    started: dict[str, FastmcpUpstream] = {}
    try:
        for prefix, args in ways.items():
            started[prefix] = FastmcpUpstream(state, "--label", prefix, *args).launch()
        yield {prefix: upstream.ready() for prefix, upstream in started.items()}
    finally:
        for upstream in started.values():
            upstream.stop()


@pytest.fixture(scope="module")
def far(remotes: dict[str, FastmcpUpstream]) -> FastmcpUpstream:
    return remotes["fasthttp"]


@pytest.fixture(scope="module")
def hub(remotes: dict[str, FastmcpUpstream], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The aggregate of fastmcp over HTTP (each way of `remotes`), fastmcp over stdio and the demo server; stopped
    by its PID."""
    servers = {
        "fasthttp": {"url": remotes["fasthttp"].url},
        "fastjson": {"url": remotes["fastjson"].url},
        "fastsse": {"url": remotes["fastsse"].url, "transport": "sse"},
        "fastmodern": {"url": remotes["fastmodern"].url, "era": "2026-07-28"},
        "faststdio": fastmcp_entry("--label", "faststdio", *paging()),
        "demo": DEMO_ENTRY,
    }
    config = tmp_path_factory.mktemp("hub") / "mcp.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    gw = Gateway({"MCPGATE_CONFIG": str(config)})
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def paging() -> tuple[str, ...]:
    return ("--page", str(PAGE), "--extra", str(EXTRA))


def run(main: Callable[[], Any]) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(HANG_GUARD):
            return await main()

    return anyio.run(guarded)


def client(gw: Gateway, mode: str) -> Client:
    return Client(gw.url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample)


async def every_page(c: Client) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = await c.list_tools(cursor=cursor) if cursor else await c.list_tools()
        pages.append([tool.name for tool in page.tools])
        if not (cursor := page.next_cursor):
            return pages


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return " ".join(getattr(item, "text", "") for item in result.content)


@pytest.mark.parametrize("mode", ERAS)
def test_the_merged_list_walks_fastmcps_own_pages_and_calls_reach_each_member(
    hub: Gateway, far: FastmcpUpstream, mode: str
) -> None:
    """In 2026-07-28 too: the hub speaks 2025 to its members and bridges their requests (fastmcp alone answers a
    2026-07-28 client's call that elicits with "elicitation via server-initiated requests is unavailable")."""

    async def main() -> tuple[list[list[str]], dict[str, str]]:
        async with client(hub, mode) as c:
            pages = await every_page(c)
            said = {p: text(await c.call_tool(f"{p}__add", {"a": 2, "b": 40})) for p in (*FAST, "demo")}
            said |= {f"{p} pid": text(await c.call_tool(f"{p}__whoami", {})) for p in FAST}
            said |= {p: text(await c.call_tool(f"{p}__add", {"a": 1, "b": 1})) for p in UNPAGED}
            said["x7"] = text(await c.call_tool("faststdio__x7", {}))
            return pages, said

    pages, said = run(main)
    names = [name for page in pages for name in page]
    assert len(names) == len(set(names)), names
    assert len(pages) > 1, pages  # fastmcp's own cursors, carried in the hub's
    own = [*OWN, *(f"x{i}" for i in range(EXTRA))]
    for prefix in FAST:
        assert sorted(n for n in names if n.startswith(f"{prefix}__")) == sorted(f"{prefix}__{n}" for n in own)
        assert said[prefix] == "42", said
    assert {"demo__echo", "demo__add"} <= set(names) and said["demo"] == "42", said
    assert all("__" in name for name in names), names
    assert far.proc is not None and said["fasthttp pid"] == f"fastmcp {far.proc.pid}", said
    assert said["faststdio pid"] != said["fasthttp pid"], said
    assert said["x7"] == "x7"
    for prefix in UNPAGED:  # listed in one page each (no --page)
        assert {f"{prefix}__{n}" for n in OWN} == {n for n in names if n.startswith(f"{prefix}__")}, names
        assert said[prefix] == "2", said


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize("prefix", ELICITING)
def test_fastmcps_progress_and_elicitation_reach_the_client(hub: Gateway, prefix: str, mode: str) -> None:
    """fastjson is left out: fastmcp stateless has no stream for them on any client's connection (it answers "no
    back-channel for server-initiated requests" to a client calling it directly too); fastmodern: the next test."""
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async def main() -> tuple[str, str]:
        async with client(hub, mode) as c:
            counted = await c.call_tool(f"{prefix}__count", {"steps": 3}, progress_callback=on_progress)
            asked = await c.call_tool(f"{prefix}__ask_name", {})
            return text(counted), text(asked)

    counted, asked = run(main)
    assert counted == "counted 3"
    assert updates == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")], updates
    assert asked == "Hello, Grace"


@pytest.mark.parametrize("mode", ERAS)
def test_fastmcp_spoken_to_in_2026_07_28_does_not_elicit(hub: Gateway, mode: str) -> None:
    """A fastmcp quirk, not the hub's: fastmcp 4.0.10 does not elicit on a 2026-07-28 connection (no
    input_required: its ctx.elicit answers the tool "unavailable"), so through an entry whose era is 2026-07-28 the
    call ends as an error of the tool; the same server reached in 2025 (fasthttp) elicits, through either era."""

    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def main() -> tuple[str, types.CallToolResult]:
        async with client(hub, mode) as c:
            counted = await c.call_tool("fastmodern__count", {"steps": 3}, progress_callback=on_progress)
            return text(counted), await c.call_tool("fastmodern__ask_name", {})

    counted, asked = run(main)
    assert counted == "counted 3" and updates == [1, 2, 3], updates
    assert asked.is_error and "elicitation via server-initiated requests is unavailable" in str(asked.content), asked


@pytest.mark.parametrize("mode", ERAS)
def test_resources_templates_and_prompts_of_each_member(hub: Gateway, mode: str) -> None:
    async def main() -> None:
        async with client(hub, mode) as c:
            uris = {str(r.uri) for r in (await c.list_resources()).resources}
            assert {"fast://fasthttp/info", "fast://faststdio/info", "demo://readme", "fast://shared"} <= uris
            templates = {(t.name, t.uri_template) for t in (await c.list_resource_templates()).resource_templates}
            for prefix in (*FAST, *UNPAGED):
                assert (f"{prefix}__echo", f"fast://{prefix}/echo/{{text}}") in templates, templates
                info = await c.read_resource(f"fast://{prefix}/info")
                assert info.contents[0].text == f"served by fastmcp {prefix}"  # type: ignore[union-attr]
                echoed = await c.read_resource(f"fast://{prefix}/echo/hi")  # routed by its template's start
                assert echoed.contents[0].text == "hi"  # type: ignore[union-attr]
                prompt = await c.get_prompt(f"{prefix}__review", {"code": "x = 1"})
                assert prompt.messages[0].content.text == "Please review: x = 1"  # type: ignore[union-attr]
            readme = await c.read_resource("demo://readme")
            assert "mcpgate demo server" in readme.contents[0].text  # type: ignore[union-attr]
            # every fastmcp member lists fast://shared: the hub names them rather than guess
            with pytest.raises(MCPError, match="ambiguous") as refused:
                await c.read_resource("fast://shared")
            assert all(prefix in str(refused.value) for prefix in (*FAST, *UNPAGED)), refused.value
            prompts = {p.name for p in (await c.list_prompts()).prompts}
            assert {f"{p}__review" for p in (*FAST, *UNPAGED)} | {"demo__greet"} <= prompts, prompts

    run(main)


@pytest.mark.parametrize("prefix", ("fasthttp", "faststdio", "fastsse", "fastmodern"))
def test_cancellation_reaches_the_fastmcp_member_holding_the_call(
    hub: Gateway, remotes: dict[str, FastmcpUpstream], prefix: str
) -> None:
    def told() -> int:
        said = remotes[prefix].log.read_text() if prefix in remotes else hub.log()
        return len(re.findall(r"slow cancelled", said))

    before = told()

    async def main() -> str:
        async with client(hub, "legacy") as c:
            started = anyio.Event()

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                started.set()

            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await c.call_tool(f"{prefix}__slow", {"seconds": 60}, progress_callback=on_progress)

                tg.start_soon(call)
                await started.wait()
                tg.cancel_scope.cancel()
            return text(await c.call_tool(f"{prefix}__add", {"a": 1, "b": 1}))

    assert run(main) == "2"
    # fastmcp was told under the hub's id for the call: it cancelled the tool (which says so on its stderr)
    assert wait_for(lambda: told() > before, timeout=20), hub.log_tail()


@pytest.mark.parametrize("prefix", ELICITING)
def test_fastmcps_per_session_list_changed_and_log_messages_reach_that_client_alone(hub: Gateway, prefix: str) -> None:
    async def main() -> None:
        changed = ListChanged()
        logged: list[Any] = []

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logged.append(params.data)

        mine = Client(hub.url, mode="legacy", message_handler=changed.handler, logging_callback=on_log)
        async with mine as c, client(hub, "legacy") as other:
            assert f"{prefix}__secret" not in {n for page in await every_page(c) for n in page}
            assert text(await c.call_tool(f"{prefix}__shout", {"message": "heard through the hub"})) == "shouted"
            assert text(await c.call_tool(f"{prefix}__unlock", {})) == "unlocked"
            await changed.next(5)  # the hub sends it 0.2 s after the member's (generous bound)
            assert f"{prefix}__secret" in {n for page in await every_page(c) for n in page}
            assert text(await c.call_tool(f"{prefix}__secret", {})) == "the secret"
            # each client session of the aggregate has its own session with the member: the other one still
            # does not see the tool
            assert f"{prefix}__secret" not in {n for page in await every_page(other) for n in page}
        # fastmcp's log data is an object ({"msg": ..., "extra": ...}), not the plain string most servers send
        assert any("heard through the hub" in json.dumps(data) for data in logged), logged

    run(main)


def test_an_http_sse_client_on_the_aggregate_reaches_fastmcp(hub: Gateway) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    async def main() -> tuple[set[str], list[str]]:
        target = Client(
            sse_client(f"{hub.base}/sse"), mode="legacy", elicitation_callback=on_elicit, sampling_callback=on_sample
        )
        async with target as c:
            names = {n for page in await every_page(c) for n in page}
            said = [text(await c.call_tool(f"{p}__count", {"steps": 3}, progress_callback=on_progress)) for p in FAST]
            said += [text(await c.call_tool(f"{p}__ask_name", {})) for p in FAST]
            return names, said

    names, said = run(main)
    assert {"fasthttp__count", "faststdio__count", "demo__echo"} <= names
    assert said == ["counted 3", "counted 3", "Hello, Grace", "Hello, Grace"]
    assert updates == [1, 2, 3, 1, 2, 3], updates


def test_fastmcp_restarted_at_its_address_serves_the_same_client_sessions_again(tmp_path: Path) -> None:
    """fastmcp over HTTP stopped mid-session: its calls fail naming it (both eras) while the demo answers; started
    again at the same address (its sessions gone: it answers the hub's old session id 404), the same client
    sessions call it again, the hub having initialized a new upstream session."""
    far = FastmcpUpstream(tmp_path, "--label", "far").start()
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": far.url}, "demo": DEMO_ENTRY}}))
    # no spare pooled child: the 2026-07-28 calls reach the one pooled child that served them before
    gw = Gateway({"MCPGATE_CONFIG": str(config), "MCPGATE_POOL_SPARES": "0"})
    try:
        gw.wait_ready()

        async def main() -> None:
            nonlocal far
            async with client(gw, "legacy") as legacy, client(gw, MODERN) as modern:
                for c in (legacy, modern):
                    assert text(await c.call_tool("far__add", {"a": 1, "b": 2})) == "3"
                far.stop()
                for c in (legacy, modern):
                    with pytest.raises(MCPError, match="remote server 'far'"):
                        await c.call_tool("far__add", {"a": 1, "b": 2})
                    assert text(await c.call_tool("demo__add", {"a": 1, "b": 2})) == "3"
                far = FastmcpUpstream(tmp_path, "--label", "far", port=far.port).start()
                for c in (legacy, modern):
                    assert text(await c.call_tool("far__add", {"a": 2, "b": 2})) == "4"
                    assert text(await c.call_tool("far__ask_name", {})) == "Hello, Grace"

        run(main)
    finally:
        gw.stop()
        far.stop()


def test_fastmcp_down_when_a_session_starts_is_served_to_it_once_up(tmp_path: Path) -> None:
    """Unreachable, its calls fail naming it; started, it comes back within the hub's backoff to the 2025
    session (list_changed) and to the pool's children (a listen's event), the spare started while it was down
    among them."""
    far = FastmcpUpstream(tmp_path, "--label", "far")  # not started yet
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": far.url}, "demo": DEMO_ENTRY}}))
    gw = Gateway({"MCPGATE_CONFIG": str(config)})
    try:
        gw.wait_ready()

        async def main() -> None:
            changed = ListChanged()
            legacy = Client(gw.url, mode="legacy", message_handler=changed.handler, elicitation_callback=on_elicit)
            async with legacy, client(gw, MODERN) as modern:
                for c in (legacy, modern):
                    assert text(await c.call_tool("demo__add", {"a": 1, "b": 2})) == "3"
                    with pytest.raises(
                        MCPError, match=r"Server 'far' of this endpoint is not available: .*unreachable"
                    ):
                        await c.call_tool("far__add", {"a": 1, "b": 2})
                async with modern.listen(tools_list_changed=True) as events:
                    await anyio.to_thread.run_sync(far.start)
                    await changed.next(HANG_GUARD)
                    await events.__anext__()
                await await_for(lambda: every_hub_child_back(gw.log()), "every hub child has far again", 60)
                for c in (legacy, modern):
                    assert text(await c.call_tool("far__add", {"a": 2, "b": 2})) == "4"

        run(main)
    finally:
        gw.stop()
        far.stop()
