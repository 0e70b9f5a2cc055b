"""Remote servers (MCPGATE_CONFIG entries with a url) through gunicorn mcpgate.wsgi, the official SDK as the
client in both eras: the upstream another mcpgate serving the demo server, the SDK's MCPServer stateful,
stateless and JSON-response (tests/fixtures/remote_upstream.py), server-everything over HTTP+SSE. A header
from an environment variable and a bearer token from token_env reach the upstream; the era forced; an upstream
killed shows on /healthz and its calls fail naming it while another server goes on; an upstream restarted (its
404) is a new upstream session the client never sees; request_timeout answers one call and the session goes
on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.shared.exceptions import MCPError

from tests.interop import conformance
from tests.support import (
    DEMO_ENTRY,
    MODERN,
    Gateway,
    cancel_a_slow_call,
    demo_round_trips,
    free_port,
    gunicorn_refusal,
    on_elicit,
    on_sample,
    serving,
    stop_process,
)
from tests.support.relay import EraServer
from tests.support.remote import SdkUpstream, remote_config
from tests.support.waiting import wait_listening

HANG_GUARD = 90
EVERYTHING = conformance.PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def client(gw: Gateway, name: str, mode: str) -> Client:
    return Client(
        f"{gw.base}/servers/{name}/mcp", mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample
    )


def text(result: Any) -> str:
    return str(result.content[0].text)


def run(main: Callable[[], Any]) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(HANG_GUARD):
            return await main()

    return anyio.run(guarded)


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Callable[..., SdkUpstream]]:
    started: list[SdkUpstream] = []

    def start(mode: str = "stateful", **kwargs: Any) -> SdkUpstream:
        upstream = SdkUpstream(tmp_path, mode, **kwargs)
        started.append(upstream)
        return upstream.start()

    try:
        yield start
    finally:
        for upstream in started:
            upstream.stop()


def test_another_mcpgate_upstream_in_both_eras_with_its_round_trips(tmp_path: Path) -> None:
    """Progress, elicitation, sampling and a cancel between the upstream's demo server and the 2025 client go
    through its one upstream session; a 2026-07-28 client is served by the pool's remote children, a 2024-11-05
    (HTTP+SSE) client by a session like a 2025 one."""
    with serving({}) as upstream:
        config = remote_config(tmp_path / "mcp.json", {"up": {"url": upstream.url, "prefix": "upstream"}})
        with serving({"MCPGATE_CONFIG": config}) as gw:

            async def main() -> list[str]:
                async with client(gw, "up", "legacy") as legacy:
                    await demo_round_trips(legacy)
                    await cancel_a_slow_call(legacy)
                    first = text(await legacy.call_tool("echo", {"message": "2025"}))
                async with client(gw, "up", MODERN) as modern:
                    second = text(await modern.call_tool("echo", {"message": "2026"}))
                async with Client(sse_client(f"{gw.base}/servers/up/sse"), mode="legacy") as old:
                    third = text(await old.call_tool("echo", {"message": "2024"}))
                return [first, second, third]

            assert run(main) == ["2025", "2026", "2024"]
            assert "session up/" in gw.log() and "(child remote)" in gw.log()


@pytest.mark.parametrize("mode", ["stateful", "stateless", "json"])
def test_sdk_upstreams_in_both_eras(mode: str, tmp_path: Path, upstreams: Callable[..., SdkUpstream]) -> None:
    upstream = upstreams(mode)
    config = remote_config(tmp_path / "mcp.json", {"sdk": {"url": upstream.url, "type": "http"}})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> list[str]:
            async with client(gw, "sdk", "legacy") as legacy:
                names = {tool.name for tool in (await legacy.list_tools()).tools}
                assert {"add", "headers", "whoami", "sleep"} <= names
                first = text(await legacy.call_tool("add", {"a": 2, "b": 3}))
            async with client(gw, "sdk", MODERN) as modern:
                second = text(await modern.call_tool("add", {"a": 20, "b": 3}))
            return [first, second]

        assert run(main) == ["5", "23"]
    if mode == "stateful":  # the 2025 client's session ended: its upstream session too
        assert any(request["method"] == "DELETE" for request in upstream.requests())


def test_server_everything_over_sse(tmp_path: Path) -> None:
    if not (conformance.NODE.exists() and EVERYTHING.exists()):
        pytest.skip(f"server-everything is not installed in tests/.peers ({EVERYTHING} or {conformance.NODE} missing)")
    port = free_port()
    log = tmp_path / "everything.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(conformance.NODE), str(EVERYTHING), "sse"],
            env={**os.environ, "PORT": str(port)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_listening(port, proc, "server-everything", log)
        url = f"http://127.0.0.1:{port}/sse"
        config = remote_config(tmp_path / "mcp.json", {"everything": {"url": url, "transport": "sse"}})
        with serving({"MCPGATE_CONFIG": config}) as gw:

            async def main() -> list[str]:
                async with client(gw, "everything", "legacy") as legacy:
                    first = text(await legacy.call_tool("echo", {"message": "over sse"}))
                async with client(gw, "everything", MODERN) as modern:
                    second = text(await modern.call_tool("echo", {"message": "modern"}))
                return [first, second]

            first, second = run(main)
            assert "over sse" in first and "modern" in second
    finally:
        stop_process(proc)


def test_a_header_from_the_environment_and_a_bearer_token_reach_the_upstream(
    tmp_path: Path, upstreams: Callable[..., SdkUpstream]
) -> None:
    upstream = upstreams("stateful", token="upstream-token-1")
    entry = {
        "url": upstream.url,
        "headers": {"X-Team": "team-${TEAM_NAME}", "X-Static": "plain"},
        "auth": {"type": "bearer", "token_env": "UPSTREAM_TOKEN"},
    }
    config = remote_config(tmp_path / "mcp.json", {"sdk": entry})
    env = {"MCPGATE_CONFIG": config, "TEAM_NAME": "blue", "UPSTREAM_TOKEN": "upstream-token-1"}
    with serving(env) as gw:

        async def main() -> list[dict[str, str]]:
            seen = []
            for mode in ("legacy", MODERN):
                async with client(gw, "sdk", mode) as c:
                    seen.append(json.loads(text(await c.call_tool("headers", {}))))
            return seen

        for headers in run(main):
            assert headers["x-team"] == "team-blue" and headers["x-static"] == "plain", headers
            assert headers["authorization"] == "Bearer upstream-token-1", headers
        assert "upstream-token-1" not in gw.log() and "team-blue" not in gw.log()


@pytest.mark.parametrize("era", ["2025", "2026-07-28"])
def test_the_era_forced(era: str, tmp_path: Path, upstreams: Callable[..., SdkUpstream]) -> None:
    """The SDK's server speaks both eras: a forced era is the only one the upstream is spoken to in, whichever
    era the client speaks (the other goes through the relay's bridge)."""
    upstream = upstreams("stateful")
    config = remote_config(tmp_path / "mcp.json", {"sdk": {"url": upstream.url, "era": era}})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> list[str]:
            answers = []
            for mode in ("legacy", MODERN):
                async with client(gw, "sdk", mode) as c:
                    answers.append(text(await c.call_tool("add", {"a": 1, "b": 1})))
            return answers

        assert run(main) == ["2", "2"]
    versions = {r["headers"].get("mcp-protocol-version") for r in upstream.requests() if r["method"] == "POST"}
    if era == "2025":
        assert MODERN not in versions, versions
    else:
        assert versions == {MODERN}, versions


def test_an_upstream_killed_is_unavailable_and_named_while_another_server_goes_on(
    tmp_path: Path, upstreams: Callable[..., SdkUpstream]
) -> None:
    upstream = upstreams("stateful")
    config = remote_config(tmp_path / "mcp.json", {"sdk": {"url": upstream.url}, "demo": DEMO_ENTRY})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> tuple[str, str]:
            async with client(gw, "sdk", "legacy") as remote:
                assert text(await remote.call_tool("add", {"a": 1, "b": 2})) == "3"
                upstream.stop(signal.SIGKILL)
                with pytest.raises(MCPError) as failed:
                    await remote.call_tool("add", {"a": 1, "b": 2})
                async with client(gw, "demo", "legacy") as demo:
                    other = text(await demo.call_tool("echo", {"message": "still here"}))
            return str(failed.value), other

        error, other = run(main)
        assert "remote server 'sdk'" in error and "cannot reach upstream" in error, error
        assert other == "still here"
        health = gw.request("GET", "/healthz").json()
        assert health["status"] == "degraded" and health["servers"]["sdk"]["status"] == "unavailable", health
        assert health["servers"]["demo"]["status"] == "ok" and "sdk" in health["error"], health


def test_an_upstream_restarted_is_a_new_upstream_session_the_client_never_sees(
    tmp_path: Path, upstreams: Callable[..., SdkUpstream]
) -> None:
    first = upstreams("stateful")
    config = remote_config(tmp_path / "mcp.json", {"sdk": {"url": first.url}})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> tuple[str, str]:
            async with client(gw, "sdk", "legacy") as c:
                before = text(await c.call_tool("whoami", {}))
                first.stop()
                upstreams("stateful", port=first.port)  # the same address: the old session id is unknown (404)
                after = text(await c.call_tool("whoami", {}))
            return before, after

        before, after = run(main)
        assert before != after
        assert "upstream session expired (HTTP 404); starting a new session" in gw.log()


def test_request_timeout_answers_the_call_and_the_session_goes_on(
    tmp_path: Path, upstreams: Callable[..., SdkUpstream]
) -> None:
    upstream = upstreams("stateful")
    config = remote_config(tmp_path / "mcp.json", {"sdk": {"url": upstream.url, "mcpgate": {"request_timeout": 1}}})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> tuple[str, str, str]:
            async with client(gw, "sdk", "legacy") as legacy:
                with pytest.raises(MCPError) as timed_out:
                    await legacy.call_tool("sleep", {"seconds": 60})
                after = text(await legacy.call_tool("add", {"a": 4, "b": 4}))
            async with client(gw, "sdk", MODERN) as modern:
                with pytest.raises(MCPError) as modern_timed_out:
                    await modern.call_tool("sleep", {"seconds": 60})
            return str(timed_out.value), after, str(modern_timed_out.value)

        error, after, modern_error = run(main)
        assert "remote server 'sdk'" in error and "request_timeout (1 s)" in error, error
        assert after == "8"
        assert "request_timeout (1 s)" in modern_error, modern_error


def test_a_remote_member_of_the_aggregate_in_both_eras(tmp_path: Path, upstreams: Callable[..., SdkUpstream]) -> None:
    """The hub starts a remote server's member child through its spec like a stdio one's (its prefix names it)."""
    upstream = upstreams("stateless")
    entries = {"far": {"url": upstream.url, "prefix": "sdk"}, "demo": DEMO_ENTRY}
    with serving({"MCPGATE_CONFIG": remote_config(tmp_path / "mcp.json", entries)}) as gw:

        async def main() -> list[str]:
            answers = []
            for mode in ("legacy", MODERN):
                async with Client(f"{gw.base}/mcp", mode=mode) as c:
                    names = {tool.name for tool in (await c.list_tools()).tools}
                    assert {"sdk__add", "demo__echo"} <= names, names
                    answers.append(text(await c.call_tool("sdk__add", {"a": 5, "b": 6})))
            return answers

        assert run(main) == ["11", "11"]
        assert "Traceback" not in gw.log()


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_an_upstream_of_one_era_serves_clients_of_both(era: str, tmp_path: Path) -> None:
    """A modern-only upstream (it refuses initialize) and a legacy-only one (it refuses 2026-07-28 requests):
    era "auto" finds out, and the client of the other era goes through the relay's bridge."""
    upstream = EraServer(era, tmp_path).start()
    try:
        config = remote_config(tmp_path / "mcp.json", {"one": {"url": upstream.url}})
        with serving({"MCPGATE_CONFIG": config}) as gw:

            async def main() -> list[str]:
                answers = []
                for mode in ("legacy", MODERN):
                    async with client(gw, "one", mode) as c:
                        answers.append(text(await c.call_tool("echo", {"message": mode})))
                return answers

            assert run(main) == ["legacy", MODERN]
    finally:
        upstream.stop()


def test_an_unset_variable_stops_the_start_naming_it_and_no_secret(tmp_path: Path) -> None:
    entry = {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Other": "${SET_ONE}", "X-Key": "${NOT_SET_ANYWHERE}"}}
    config = remote_config(tmp_path / "mcp.json", {"far": entry})
    out = gunicorn_refusal(
        {"MCPGATE_CONFIG": config, "SET_ONE": "visible-secret-value"}, "-b", f"127.0.0.1:{free_port()}"
    )
    assert "server 'far': headers.X-Key names the environment variable NOT_SET_ANYWHERE, which is not set" in out
    assert "visible-secret-value" not in out
