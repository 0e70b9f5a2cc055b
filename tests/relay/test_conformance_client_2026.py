"""The conformance suite's 2026-07-28 client scenarios (0.2.0-alpha.12) against the relay in modern mode.

The client under test is tests/fixtures/conformance_host.py in its --modern mode (a raw NDJSON stdio host
sending 2026-07-28 requests with _meta, answering input_required results) launching
`python -m mcpgate.relay URL --protocol-era modern`; the suite's scenario server is the upstream. What each
scenario sends and checks: the scenario sources in tests/.peers/conformance-next (dist/index.js).

`--spec-version 2026-07-28` is passed to every scenario: tools_call and json-schema-2020-12-preservation
were introduced before 2026-07-28 and would otherwise run against the suite's stateful 2025 mock.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.interop import conformance
from tests.support import FIXTURES

pytestmark = pytest.mark.npm

SPEC_VERSION = "2026-07-28"
SCENARIOS = [
    "tools_call",
    "request-metadata",
    "sep-2322-client-request-state",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
]
# The least number of SUCCESS checks each scenario emits when the client does everything it asks for (a
# client that skips part of a scenario gets SKIPPED or fewer checks, not only FAILURE).
MIN_PASSED = {
    "tools_call": 2,
    "request-metadata": 7,
    "sep-2322-client-request-state": 5,
    "http-standard-headers": 9,
    "http-custom-headers": 18,
    "http-invalid-tool-headers": 12,
    "json-schema-ref-no-deref": 1,
    "json-schema-2020-12-preservation": 9,
}
# Scenarios whose runner accepts a non-zero exit of the client (the client may refuse what it is shown).
CLIENT_ERROR_ALLOWED = {"http-invalid-tool-headers"}


def host_command() -> str:
    return f"{sys.executable} {FIXTURES / 'conformance_host.py'} --modern {sys.executable} -m mcpgate.relay"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_client_scenario_2026_passes(scenario: str, tmp_path: Path) -> None:
    conformance.ensure_installed()
    result = conformance.run(
        ["client", "--command", host_command(), "--scenario", scenario, "--spec-version", SPEC_VERSION],
        tmp_path,
        timeout=120,
        suite=conformance.NEXT,
    )
    checks = conformance.read_checks(tmp_path)
    passed, failed, warned = conformance.tally(checks)
    print(f"\nconformance 2026 client {scenario}: {passed} passed, {len(failed)} failed, {len(warned)} warnings")
    output = result.stdout[-4000:] + "\n--- stderr ---\n" + result.stderr[-6000:]
    assert checks, output
    assert not failed, "\n".join(failed) + "\n" + output
    assert not warned, "\n".join(warned) + "\n" + output
    assert passed >= MIN_PASSED[scenario], output
    if scenario not in CLIENT_ERROR_ALLOWED:
        assert result.returncode == 0, output
