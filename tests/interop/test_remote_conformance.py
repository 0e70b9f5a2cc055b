"""The official conformance suite's server scenarios through the hub's paths: (a) a remote upstream, the
conformance fixture (tests/fixtures/conformance_server.py) served over HTTP by the SDK itself (`--http PORT`) and
published by the gateway as a `url` entry: every scenario that passes against the stdio-published fixture
(test_conformance_server.py, test_conformance_2026.py) must pass here too, in both eras (2026-07-28 also with the
upstream spoken to in the 2025 era, its calls bridged by the gateway); (b) a group of that one
fixture (stdio), where names are namespaced: only the scenarios that name no tool or prompt can pass as they are.

Why (b) cannot run everything: every member's tool, prompt and resource-template names reach the client as
`<prefix>__<name>` (core/hub_lists.py); a prefix is 1 to 64 characters (no empty prefix), and a group of one
server namespaces like any other group. The suite calls `test_simple_text`, gets `test_simple_prompt`, completes
`test_prompt_with_arguments` and looks for `json_schema_2020_12_tool` by those names, which the aggregate calls
`conf__test_simple_text` etc. Resources keep their URIs, so the resource scenarios run whole."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop import conformance
from tests.support import FIXTURES, Gateway, free_port, modern_body, modern_headers, stop_process
from tests.support.waiting import wait_listening

pytestmark = pytest.mark.npm

REVISION = "2026-07-28"
SCORED_2026 = 37  # as test_conformance_2026.py: the scenarios the CLI scores for 2026-07-28
FIXTURE = FIXTURES / "conformance_server.py"
# scenarios of the 0.1.16 suite that name no tool, prompt or template: they run on the aggregate as they are
NAMELESS = {
    "server-initialize",
    "logging-set-level",
    "ping",
    "tools-list",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
}
# the same for the 0.2.0-alpha.12 suite's 2026-07-28 scenarios (server-stateless names its diagnostic tools)
NAMELESS_2026 = {
    "tools-list",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "sep-2164-resource-not-found",
    "prompts-list",
    "caching",
    "input-required-result-unsupported-methods",
    "input-required-result-validate-input",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
    "http-header-validation",
}
GROUPS = {"solo": "conf", "far": "remote"}  # a group of one stdio member, a group of one remote member


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The fixture served by the SDK's own Streamable HTTP server; its URL."""
    conformance.ensure_installed()
    port = free_port()
    log = tmp_path_factory.mktemp("upstream") / "fixture.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, str(FIXTURE), "--http", str(port)], stdout=out, stderr=out)
    try:
        wait_listening(port, proc, "the conformance fixture over HTTP", log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_process(proc)


@pytest.fixture(scope="module")
def gateway(upstream: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """`remote`: the HTTP fixture as a url entry (`remote25`: the same in the 2025 era); `conf`: the fixture over
    stdio; `remote` and `conf` each alone in a group."""
    path = tmp_path_factory.mktemp("config") / "mcp.json"
    servers = {
        "remote": {"url": upstream},
        # spoken to as a 2025 server, 2026-07-28 calls bridged by the pool; room for the MRTR calls the suite leaves
        # unanswered (each keeps its child), as test_conformance_2026.py gives its legacy child
        "remote25": {"url": upstream, "era": "2025", "mcpgate": {"pool_children": 12}},
        "conf": {"command": sys.executable, "args": [str(FIXTURE)]},
    }
    path.write_text(json.dumps({"mcpServers": servers, "groups": {g: {"servers": [m]} for g, m in GROUPS.items()}}))
    gw = Gateway({"MCPGATE_CONFIG": str(path)})
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def report(label: str, checks: dict[str, list[dict[str, object]]]) -> tuple[int, list[str]]:
    passed, failed, warned = conformance.tally(checks)
    print(f"\n{label}: {len(checks)} scenarios, {passed} checks passed, {len(failed)} failed, {len(warned)} warnings")
    for line in warned:
        print("  warning:", line)
    for line in failed:
        print("  FAILED:", line)
    return passed, failed


def test_every_server_scenario_passes_through_a_remote_upstream(gateway: Gateway, tmp_path: Path) -> None:
    url = f"http://localhost:{gateway.port}/servers/remote/mcp"
    result = conformance.run(["server", "--url", url, "--suite", "all"], tmp_path)
    passed, failed = report("conformance server, remote upstream", conformance.read_checks(tmp_path))
    assert not failed, "\n".join(failed) + "\n" + gateway.log_tail()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert passed >= 43  # as many as through the stdio-published fixture


@pytest.mark.parametrize("server", ["remote", "remote25"])
def test_every_scored_2026_check_passes_through_a_remote_upstream(
    gateway: Gateway, tmp_path: Path, server: str
) -> None:
    url = f"http://localhost:{gateway.port}/servers/{server}/mcp"
    args = ["server", "--url", url, "--requirements", REVISION]
    result = conformance.run(args, tmp_path, suite=conformance.NEXT)
    ran = re.findall(r"^=== Running scenario: (\S+) ===$", result.stdout, re.MULTILINE)
    _, _, tail = result.stdout.partition(f"Not scored for {REVISION}")
    unscored = set(re.findall(r"^\s+[✓✗] (\S+) \(", tail, re.MULTILINE))
    scored = [name for name in ran if name not in unscored]
    checks = {name: items for name, items in conformance.read_checks(tmp_path).items() if name[7:] in scored}
    _, failed = report(f"conformance {REVISION}, remote upstream {server}", checks)
    assert len(scored) == SCORED_2026, result.stdout[-3000:] + result.stderr[-3000:]
    assert not failed, "\n".join(failed) + "\n" + gateway.log_tail()


def test_an_unanswered_input_request_holds_up_no_other_call_on_a_2025_upstream(gateway: Gateway) -> None:
    """A remote spoken to in the 2025 era: a 2026-07-28 call left at input_required keeps its pooled child, the
    next caller's call is served by another (the relay's bridge in one shared child made it wait up to 120 s)."""
    path = "/servers/remote25/mcp"
    asks = modern_body(1, "tools/call", {"name": "test_streaming_elicitation", "arguments": {}}, {"elicitation": {}})
    asked = gateway.request("POST", path, asks, modern_headers("tools/call", "test_streaming_elicitation"))
    assert asked.status == 200 and b'"input_required"' in asked.body, asked  # the client never answers it
    plain = modern_body(2, "tools/call", {"name": "test_simple_text", "arguments": {}})
    try:
        answered = gateway.request("POST", path, plain, modern_headers("tools/call", "test_simple_text"), timeout=15)
    except TimeoutError:
        pytest.fail("a plain call waited 15 s behind another caller's unanswered input request")
    assert answered.status == 200 and b"simple text response" in answered.body, answered


@pytest.mark.parametrize("group", list(GROUPS))
def test_the_scenarios_naming_nothing_pass_on_a_group_of_one(gateway: Gateway, tmp_path: Path, group: str) -> None:
    url = f"http://localhost:{gateway.port}/groups/{group}/mcp"
    conformance.run(["server", "--url", url, "--suite", "all"], tmp_path)
    scored(f"conformance server, group {group}", conformance.read_checks(tmp_path), NAMELESS, gateway)


@pytest.mark.parametrize("group", list(GROUPS))
def test_the_2026_scenarios_naming_nothing_pass_on_a_group_of_one(gateway: Gateway, tmp_path: Path, group: str) -> None:
    url = f"http://localhost:{gateway.port}/groups/{group}/mcp"
    conformance.run(["server", "--url", url, "--requirements", REVISION], tmp_path, suite=conformance.NEXT)
    scored(f"conformance {REVISION}, group {group}", conformance.read_checks(tmp_path), NAMELESS_2026, gateway)


def scored(label: str, checks: dict[str, list[dict[str, object]]], nameless: set[str], gateway: Gateway) -> None:
    """Every check of the scenarios in `nameless` passes; the others (they name a tool or prompt) are listed."""
    every = {name.removeprefix("server-"): items for name, items in checks.items()}
    assert nameless <= set(every), sorted(nameless - set(every))
    passed, failed = report(label, {n: every[n] for n in nameless})
    _, named, _ = conformance.tally({n: items for n, items in every.items() if n not in nameless})
    print(f"  not scored (they name a tool or prompt): {sorted({line.split(':')[0] for line in named})}")
    assert not failed, "\n".join(failed) + "\n" + gateway.log_tail()
    assert passed >= len(nameless)
