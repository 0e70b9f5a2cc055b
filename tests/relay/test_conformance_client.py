"""The official conformance suite's client scenarios (the non-auth ones) against the relay.

The client under test is tests/fixtures/conformance_host.py (an SDK stdio host) launching
`python -m mcpgate.relay URL`; the suite's test server is the upstream.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.interop import conformance
from tests.support import FIXTURES

pytestmark = pytest.mark.npm

SCENARIOS = ["initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_client_scenario_passes(scenario: str, tmp_path: Path) -> None:
    conformance.ensure_installed()
    command = f"{sys.executable} {FIXTURES / 'conformance_host.py'} {sys.executable} -m mcpgate.relay"
    result = conformance.run(["client", "--command", command, "--scenario", scenario], tmp_path, timeout=120)
    checks = conformance.read_checks(tmp_path)
    passed, failed, warned = conformance.tally(checks)
    print(f"\nconformance client {scenario}: {passed} checks passed, {len(failed)} failed, {len(warned)} warnings")
    assert checks, result.stdout[-3000:] + result.stderr[-3000:]
    assert not failed, "\n".join(failed) + "\n" + result.stdout[-3000:]
    assert not warned, "\n".join(warned)
    assert result.returncode == 0 and passed >= 1, result.stdout[-3000:] + result.stderr[-3000:]
