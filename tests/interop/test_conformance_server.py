"""The official conformance suite's server scenarios, through gunicorn mcpgate.wsgi wrapping an SDK stdio server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.interop import conformance
from tests.support import FIXTURES

pytestmark = pytest.mark.npm


def test_every_server_scenario_passes(gateway_factory: Any, tmp_path: Path) -> None:
    conformance.ensure_installed()
    gw = gateway_factory({"MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'conformance_server.py'}"})
    url = f"http://localhost:{gw.port}/mcp"  # a loopback name: dns-rebinding-protection compares against it
    result = conformance.run(["server", "--url", url, "--suite", "all"], tmp_path)
    checks = conformance.read_checks(tmp_path)
    passed, failed, warned = conformance.tally(checks)
    print(
        f"\nconformance server: {len(checks)} scenarios, {passed} checks passed, {len(failed)} failed, "
        f"{len(warned)} warnings"
    )
    for line in warned:
        print("  warning:", line)
    assert not failed, "\n".join(failed) + "\n" + result.stdout[-3000:]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(checks) >= 32 and passed >= 43
