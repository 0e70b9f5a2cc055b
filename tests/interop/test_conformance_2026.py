"""The official conformance suite's 2026-07-28 server scenarios (0.2.0-alpha.12, `--requirements 2026-07-28`)
through gunicorn mcpgate.wsgi, wrapping (a) tests/fixtures/conformance_server.py, an SDK-written child that speaks
2026-07-28 itself (its MRTR tools answer input_required on their own), and (b) the same fixture as a legacy-only
child (conformance_server_legacy.py: initialize only; its MRTR tools send real requests, which the gateway's bridge
turns into InputRequiredResults), and (c) the SDK-written child started through `sh -c "sleep 5; exec ..."`, slower
to start than MCPGATE_PROBE_TIMEOUT, as a server run through `npx -y` or `uvx` may be. Every scored check passes; no
expected-failures file.

Also, without npm: the fixture itself through the official SDK client over stdio, in both eras, so a failing
conformance run can be told apart from a broken fixture."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters, types

from tests.interop import conformance
from tests.support import FIXTURES, MODERN, Gateway, modern_body, post_modern, wait_for

REVISION = "2026-07-28"
SCORED = 37  # scenarios `conformance list --server --requirements 2026-07-28` names
CHILDREN = {
    "modern": "conformance_server.py",
    "legacy": "conformance_server_legacy.py",
    "slow": "conformance_server.py",
}
SLOW_START = 5  # seconds the "slow" child sleeps before the server starts (as `npx -y` or `uvx` may on a first run)
INPUT_KEY = "dev.mcpgate/inputKey"  # how the legacy fixture names its input requests for the bridge
HANG_GUARD = 60
READY = re.compile(r"pooled child \S+ speaks ")  # the log line of a pooled child whose probe has ended


def not_scored(stdout: str) -> set[str]:
    """The scenarios the CLI ran but says do not count ("Not scored for 2026-07-28: ..." and its list)."""
    _, _, tail = stdout.partition(f"Not scored for {REVISION}")
    return set(re.findall(r"^\s+[✓✗] (\S+) \(", tail, re.MULTILINE))


@pytest.mark.npm
@pytest.mark.parametrize("child", list(CHILDREN))
def test_every_scored_2026_check_passes(gateway_factory: Any, tmp_path: Path, child: str) -> None:
    conformance.ensure_installed()
    env = {"MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / CHILDREN[child]}"}
    if child == "slow":  # longer than MCPGATE_PROBE_TIMEOUT: still served as the 2026-07-28 server it is
        env["MCPGATE_COMMAND"] = shlex.join(["sh", "-c", f"sleep {SLOW_START}; exec {env['MCPGATE_COMMAND']}"])
    if child == "legacy":
        # The suite leaves MRTR calls unanswered on purpose (missing input, tampered state); on a legacy child each
        # parks its child until a full pool evicts it after a second, so with the default 4 children a later check
        # that allows only 500 ms (sep-2575-server-no-log-without-loglevel) can wait out an eviction. Room for
        # them all keeps each check about the one rule it tests.
        env["MCPGATE_POOL_CHILDREN"] = "12"
    gw = gateway_factory(env)
    if child == "legacy":
        warm_legacy_pool(gw)
    url = f"http://localhost:{gw.port}/mcp"  # a loopback name: dns-rebinding-protection compares against it
    result = conformance.run(["server", "--url", url, "--requirements", REVISION], tmp_path, suite=conformance.NEXT)
    ran = re.findall(r"^=== Running scenario: (\S+) ===$", result.stdout, re.MULTILINE)
    scored = [name for name in ran if name not in not_scored(result.stdout)]
    checks = {name: items for name, items in conformance.read_checks(tmp_path).items() if name[7:] in scored}
    passed, failed, warned = conformance.tally(checks)
    print(
        f"\nconformance {REVISION} ({child} child): {len(scored)} scored scenarios, {passed} of "
        f"{passed + len(failed)} checks passed, {len(failed)} failed, {len(warned)} warnings"
    )
    for line in warned:
        print("  warning:", line)
    for line in failed:
        print("  FAILED:", line)
    assert len(scored) == SCORED, result.stdout[-3000:] + result.stderr[-3000:]
    assert not failed, "\n".join(failed) + "\n" + gw.log_tail()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def warm_legacy_pool(gw: Gateway) -> None:
    """Hand the suite a pool whose spare child is up, as a gateway that has served for a while has.

    A call that may ask its client for input takes a legacy child to itself, so the suite's next plain call
    (sep-2575-server-no-log-without-loglevel, right after an elicitation left parked) needs another child. A cold
    gateway starts that spare only once its first child is up, a moment before, and this fixture takes 1 to 2 s
    to start on a loaded two-core machine: the call waited for it past the check's fixed 500 ms. The first
    request starts the first child (and, once it is up, the spare); the spare's probe ending is the event."""
    discovered = post_modern(gw, modern_body("warm-up", "server/discover"))
    assert discovered.status == 200, discovered
    assert wait_for(lambda: len(READY.findall(gw.log())) >= 2, timeout=60), gw.log_tail()


# --------------------------------------------------------------------------- the fixture itself, over stdio

ANSWERS = {"name": "Grace", "color": "blue", "ok": True, "context": "tests"}
asked: list[types.ElicitRequestParams] = []


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    asked.append(params)
    wanted = params.requested_schema.get("properties", {}) if isinstance(params, types.ElicitRequestFormParams) else {}
    return types.ElicitResult(action="accept", content={key: ANSWERS[key] for key in wanted})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="stub", content=types.TextContent(type="text", text="Hi"))


async def on_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///tmp/root", name="root")])


def fixture_client(script: str, mode: str) -> Client:
    server = StdioServerParameters(command=sys.executable, args=[str(FIXTURES / script)])
    return Client(
        server,
        mode=mode,  # type: ignore[arg-type]
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        list_roots_callback=on_roots,
    )


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return result.content[0].text  # type: ignore[union-attr]


async def mrtr_round_trips(c: Client, modern: bool) -> None:
    assert text(await c.call_tool("test_input_required_result_elicitation", {})) == "Hello, Grace"
    assert text(await c.call_tool("test_input_required_result_sampling", {})) == "The model said: Hi"
    assert text(await c.call_tool("test_input_required_result_list_roots", {})) == "1 root(s)"
    assert text(await c.call_tool("test_input_required_result_request_state", {})).startswith("Confirmed")
    three = text(await c.call_tool("test_input_required_result_multiple_inputs", {}))
    assert three == "Got all three: Grace, 1 root(s)"
    rounds = text(await c.call_tool("test_input_required_result_multi_round", {}))
    assert rounds == ("Round 3: likes blue" if modern else "Grace likes blue")
    prompt = await c.get_prompt("test_input_required_result_prompt")
    assert prompt.messages[0].content.text == "Use this context: tests"  # type: ignore[union-attr]
    assert text(await c.call_tool("test_x_mcp_header", {"region": "eu"})) == "Region: eu"


def run(body: Any) -> None:
    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            await body()

    anyio.run(main)


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
def test_the_fixture_answers_its_mrtr_tools_in_both_eras(mode: str) -> None:
    async def body() -> None:
        asked.clear()
        async with fixture_client(CHILDREN["modern"], mode) as c:
            assert (c.protocol_version == MODERN) == (mode == MODERN)
            tools = {tool.name: tool for tool in (await c.list_tools()).tools}
            assert tools["test_x_mcp_header"].input_schema["properties"]["region"]["x-mcp-header"] == "Region"
            assert "test_missing_capability" in tools and "test_trigger_tool_change" in tools
            await mrtr_round_trips(c, modern=mode == MODERN)
        legacy_keys = [(p.meta or {}).get(INPUT_KEY) for p in asked]
        assert ("user_name" in legacy_keys) == (mode == "legacy"), legacy_keys

    run(body)


def test_the_legacy_fixture_refuses_the_2026_era() -> None:
    async def body() -> None:
        async with fixture_client(CHILDREN["legacy"], "auto") as c:  # server/discover fails: initialize instead
            assert c.protocol_version != MODERN
            await mrtr_round_trips(c, modern=False)

    run(body)


def test_a_2026_request_without_sampling_gets_missing_capability() -> None:
    async def body() -> None:
        server = StdioServerParameters(command=sys.executable, args=[str(FIXTURES / CHILDREN["modern"])])
        async with Client(server, mode=MODERN) as c:  # no callbacks: no client capabilities
            with pytest.raises(Exception) as caught:
                await c.call_tool("test_missing_capability", {})
            assert getattr(caught.value, "code", None) == -32021, caught.value

    run(body)
