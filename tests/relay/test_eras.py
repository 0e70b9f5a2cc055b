"""The relay between every host era and every server era, with the official SDK on both ends.

Hosts: the SDK's stdio client in mode "2026-07-28" (modern) and "legacy" (initialize, a session) launching
`python -m mcpgate.relay URL --protocol-era ERA`. Servers (module-scoped, started on first use):

    sdk-modern   tests/fixtures/era_http_server.py --era modern   (the SDK's Streamable HTTP app, 2026-07-28 only)
    sdk-dual     ... --era dual                                   (the SDK as is: both eras on one endpoint)
    sdk-legacy   ... --era legacy                                 (2025 sessions only)
    serve-modern gunicorn mcpgate.wsgi, MCPGATE_MODERN_ONLY=true, over tests/fixtures/modern_server.py
    serve-dual   gunicorn mcpgate.wsgi over the same child (the relay's --protocol-era legacy uses its 2025 path)

With --protocol-era auto the relay goes natural first and bridges only when it must: a legacy host on a
modern-only server goes through LegacyHostBridge, a modern host on a legacy-only server through
ModernHostBridge; --protocol-era modern|legacy on the dual-era server forces each bridge there too.
"""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged

from tests.support import MODERN_CHILD, on_elicit, on_sample, serving
from tests.support.relay import HANG_GUARD, EraServer, await_for, explain_stderr, run_host, wait_for

MODERN_HOST, LEGACY_HOST = "2026-07-28", "legacy"
HOSTS = [MODERN_HOST, LEGACY_HOST]
SDK_SERVERS = ["sdk-modern", "sdk-dual", "sdk-legacy"]
SERVE_SERVERS = ["serve-modern", "serve-dual"]
SERVE_ENVS = {
    "serve-modern": {"MCPGATE_COMMAND": MODERN_CHILD, "MCPGATE_MODERN_ONLY": "true"},
    "serve-dual": {"MCPGATE_COMMAND": MODERN_CHILD},
}
COUNTER = "modern://counter"
POKES, POKE_WAIT = 5, 4.0  # notify-making calls, and seconds each one's notification may take (hang guards)
GREETING = "Grace: WRITE A GREETING FOR GRACE"  # interview: on_elicit's name, on_sample's upper-cased prompt

# (host, server, --protocol-era): which bridge, if any, the relay must use
AUTO = [(host, server, "auto") for host in HOSTS for server in SDK_SERVERS]
FORCED_BRIDGES = [(LEGACY_HOST, "sdk-dual", "modern"), (MODERN_HOST, "sdk-dual", "legacy")]
LISTENERS = AUTO + FORCED_BRIDGES + [(host, "serve-modern", "auto") for host in HOSTS]
# the combinations where the relay speaks 2026-07-28 upstream (so it mirrors x-mcp-header arguments)
MODERN_WIRE = [
    (MODERN_HOST, "sdk-modern", "auto"),
    (MODERN_HOST, "sdk-dual", "auto"),
    (LEGACY_HOST, "sdk-modern", "auto"),
    (LEGACY_HOST, "sdk-dual", "modern"),
    (MODERN_HOST, "sdk-dual", "modern"),
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Any]]:
    """`get(kind)`: the URL-bearing server of that kind (an EraServer or a Gateway), started on first use."""
    state = tmp_path_factory.mktemp("eras")
    started: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:

        def get(kind: str) -> Any:
            if kind not in started:
                if kind in SERVE_ENVS:
                    started[kind] = stack.enter_context(serving(SERVE_ENVS[kind]))
                else:
                    era = EraServer(kind.removeprefix("sdk-"), state)
                    stack.callback(era.stop)
                    started[kind] = era.start()
            return started[kind]

        yield get


def expected_route(host: str, server: str, era: str) -> str:
    """The relay's choice for a host era, a server era and --protocol-era (what it logs after "bridging: ")."""
    speaks_modern = not server.endswith("legacy") and era != "legacy"
    speaks_legacy = not server.endswith("modern") and era != "modern"
    if speaks_modern if host == MODERN_HOST else speaks_legacy:
        return "no bridge"
    return "ModernHostBridge" if host == MODERN_HOST else "LegacyHostBridge"


def through_relay(
    servers: Callable[[str], Any],
    server: str,
    host: str,
    era: str,
    tmp_path: Path,
    scenario: Callable[[Client], Any],
    **client_kwargs: Any,
) -> Any:
    """Run `scenario` in the SDK stdio client (mode `host`) launched on the relay (`--protocol-era era`) in
    front of `server`; the relay must have logged the route expected_route names."""
    stderr = tmp_path / "relay.stderr"
    got = run_host(
        servers(server).url,
        scenario,
        "--protocol-era",
        era,
        "--log-level",
        "info",
        stderr=stderr,
        mode=host,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        **client_kwargs,
    )
    route = f"bridging: {expected_route(host, server, era)}"
    log = stderr.read_text(errors="replace")
    assert route in log, f"the relay did not log {route!r}\n{explain_stderr(log)}"
    return got


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, types.TextContent), result
    return first.text


def server_log(server: Any) -> str:
    return server.stderr() if isinstance(server, EraServer) else server.log()


# ---------------------------------------------------------------- a tool call, every host x every server


@pytest.mark.parametrize("server", SDK_SERVERS + SERVE_SERVERS)
@pytest.mark.parametrize("host", HOSTS)
def test_a_tool_call_reaches_every_server_from_every_host(
    host: str, server: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> tuple[str, str, list[str]]:
        tools = [t.name for t in (await client.list_tools()).tools]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        echoed = await client.call_tool("echo", {"message": f"hello from {host} to {server}"})
        return client.protocol_version, text(echoed), [*tools, text(added)]

    version, echoed, seen = through_relay(servers, server, host, "auto", tmp_path, scenario)
    assert version == (MODERN_HOST if host == MODERN_HOST else "2025-11-25")
    assert echoed == f"hello from {host} to {server}"
    assert {"add", "echo", "where"} <= set(seen) and seen[-1] in ("5", "5.0"), seen


def test_the_era_forced_with_protocol_era_legacy_on_serve_uses_its_session_path(
    servers: Callable[[str], Any], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> str:
        return text(await client.call_tool("echo", {"message": "over a 2025 session"}))

    assert through_relay(servers, "serve-dual", MODERN_HOST, "legacy", tmp_path, scenario) == "over a 2025 session"


# ---------------------------------------------------------------- MRTR: an elicitation, then a sampling


@pytest.mark.parametrize(("host", "server", "era"), AUTO + FORCED_BRIDGES)
def test_an_elicitation_then_a_sampling_round_trips_through_each_bridge(
    host: str, server: str, era: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> str:
        return text(await client.call_tool("interview", {}))

    assert through_relay(servers, server, host, era, tmp_path, scenario) == GREETING


@pytest.mark.parametrize("host", HOSTS)
def test_elicitation_and_sampling_reach_a_modern_only_mcpgate_serve(
    host: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> tuple[str, str]:
        asked = await client.call_tool("ask_name", {})
        sampled = await client.call_tool("sample", {"prompt": "shout this"})
        return text(asked), text(sampled)

    assert through_relay(servers, "serve-modern", host, "auto", tmp_path, scenario) == (
        "Hello, Grace",
        "SHOUT THIS",
    )


# ---------------------------------------------------------------- listen: tools list_changed, a resource


def _notifications() -> tuple[list[Any], Callable[[Any], Any]]:
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None):
            seen.append(message)

    return seen, on_message


async def poke_until(poke: Callable[[], Any], arrived: Callable[[], bool]) -> None:
    """Call `poke` (a tool that makes the server notify) until `arrived()`, at most POKES times.

    A 2025 server sends a notification that relates to no request on its GET stream, and the SDK's drops it
    when that stream is not open yet (the relay, or its bridge, opens it just after the session starts); a
    later poke's notification is the one that must arrive."""
    for _ in range(POKES):
        await poke()
        with anyio.move_on_after(POKE_WAIT):
            while not arrived():
                await anyio.sleep(0.02)
        if arrived():
            return
    raise AssertionError(f"no notification after {POKES} pokes")


async def first_event(sub: Any, poke: Callable[[], Any]) -> Any:
    """The first event on a listen stream, poking the server until it comes."""
    got: list[Any] = []
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            got.append(await sub.__anext__())

        tg.start_soon(read)
        await poke_until(poke, lambda: bool(got))
    return got[0]


@pytest.mark.parametrize(("host", "server", "era"), LISTENERS)
def test_tools_list_changed_reaches_the_host(
    host: str, server: str, era: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    seen, on_message = _notifications()

    async def modern(client: Client) -> Any:
        async with client.listen(tools_list_changed=True) as sub:
            return await first_event(sub, lambda: client.call_tool("notify_change", {}))

    async def legacy(client: Client) -> Any:
        await client.list_tools()
        changed = lambda: any(m.method == "notifications/tools/list_changed" for m in seen)  # noqa: E731
        await poke_until(lambda: client.call_tool("notify_change", {}), changed)
        return "list_changed"

    scenario = modern if host == MODERN_HOST else legacy
    event = through_relay(servers, server, host, era, tmp_path, scenario, message_handler=on_message)
    assert isinstance(event, ToolsListChanged) if host == MODERN_HOST else event == "list_changed", event


@pytest.mark.parametrize(("host", "server", "era"), LISTENERS)
def test_a_subscribed_resource_update_reaches_the_host(
    host: str, server: str, era: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    seen, on_message = _notifications()

    def updated() -> bool:
        return any(m.method == "notifications/resources/updated" and str(m.params.uri) == COUNTER for m in seen)

    async def modern(client: Client) -> Any:
        async with client.listen(resource_subscriptions=[COUNTER]) as sub:
            return await first_event(sub, lambda: client.call_tool("bump", {}))

    async def legacy(client: Client) -> Any:
        await client.subscribe_resource(COUNTER)
        await poke_until(lambda: client.call_tool("bump", {}), updated)
        return COUNTER

    scenario = modern if host == MODERN_HOST else legacy
    event = through_relay(servers, server, host, era, tmp_path, scenario, message_handler=on_message)
    if host == MODERN_HOST:
        assert isinstance(event, ResourceUpdated) and str(event.uri) == COUNTER, event
    else:
        assert event == COUNTER


# ---------------------------------------------------------------- x-mcp-header mirroring


@pytest.mark.parametrize(("host", "server", "era"), MODERN_WIRE)
def test_x_mcp_header_arguments_are_mirrored_into_mcp_param_headers(
    host: str, server: str, era: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    async def scenario(client: Client) -> list[str]:
        await client.list_tools()
        plain = await client.call_tool("where_header", {"query": "rain", "region": "eu-west-1"})
        unsafe = await client.call_tool("where_header", {"query": "snow", "region": "Zürich"})
        absent = await client.call_tool("where_header", {"query": "fog"})
        return [text(plain), text(unsafe), text(absent)]

    sentinel = "=?base64?" + base64.b64encode("Zürich".encode()).decode() + "?="
    assert through_relay(servers, server, host, era, tmp_path, scenario) == [
        "rain in eu-west-1 (Mcp-Param-Region: eu-west-1)",
        f"snow in Zürich (Mcp-Param-Region: {sentinel})",
        "fog in nowhere (Mcp-Param-Region: none)",
    ]


@pytest.mark.parametrize("host", HOSTS)
def test_mcpgate_serve_accepts_the_mirrored_header(host: str, servers: Callable[[str], Any], tmp_path: Path) -> None:
    """serve checks Mcp-Param-Region against the body (400 -32020 when it is missing or differs)."""

    async def scenario(client: Client) -> list[str]:
        await client.list_tools()
        return [text(await client.call_tool("where", {"query": "q", "region": region})) for region in ("eu", "Zürich")]

    assert through_relay(servers, "serve-modern", host, "auto", tmp_path, scenario) == ["q in eu", "q in Zürich"]


# ---------------------------------------------------------------- cancellation mid-stream


@pytest.mark.parametrize(("host", "server", "era"), AUTO + FORCED_BRIDGES)
def test_a_cancelled_call_is_cancelled_upstream_and_the_host_goes_on(
    host: str, server: str, era: str, servers: Callable[[str], Any], tmp_path: Path
) -> None:
    upstream = servers(server)
    tag = uuid.uuid4().hex[:8]

    async def scenario(client: Client) -> str:
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await client.call_tool("sleep", {"seconds": 60, "tag": tag})

            tg.start_soon(sleeper)
            await await_for(lambda: f"sleep {tag} started" in server_log(upstream), "the sleep to start")
            tg.cancel_scope.cancel()
        return text(await client.call_tool("echo", {"message": "after the cancel"}))

    assert through_relay(servers, server, host, era, tmp_path, scenario) == "after the cancel"
    wait_for(
        lambda: f"sleep {tag} cancelled" in server_log(upstream), HANG_GUARD, f"the upstream to cancel sleep {tag}"
    )
    assert f"sleep {tag} done" not in server_log(upstream)
