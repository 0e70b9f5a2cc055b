"""The conformance suite's client auth scenarios against the relay signing in (issue 13).

The client under test is tests/fixtures/conformance_auth_host.py: conformance_host.py (the SDK host, or
its --modern NDJSON host for 2026-07-28) launching `python -m mcpgate.relay URL` with a fresh config
directory and BROWSER set to tests/fixtures/oauth_browser.py, which follows the authorization redirect
to the relay's loopback callback (the suite's authorization servers approve at once). Scenarios run
four at a time. Every scenario must pass with no failure and no warning; the table is printed.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.interop import conformance
from tests.support import FIXTURES

pytestmark = pytest.mark.npm

PARALLEL = 4
# 0.1.16: its 22 auth/* scenarios but one extension: cross-app-access (an enterprise IdP token exchange the
# relay does not do).
SCENARIOS_0_1_16 = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-basic",  # extension: relay/oauth/grants.py
    "auth/client-credentials-jwt",  # extension: private_key_jwt (MCPGATE_OAUTH_CLIENT_KEY)
]
# 0.2.0-alpha.12 at --spec-version 2026-07-28 (a stateless server; the host in --modern mode).
SCENARIOS_2026 = [
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/authorization-server-migration",
    "auth/iss-supported",
    "auth/iss-not-advertised",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
]


def host_command(modern: bool) -> str:
    mode = " --modern" if modern else ""
    return f"{sys.executable} {FIXTURES / 'conformance_auth_host.py'}{mode} {sys.executable} -m mcpgate.relay"


def run_scenario(scenario: str, out: Path, modern: bool) -> tuple[str, int, list[str], str]:
    args = ["client", "--command", host_command(modern), "--scenario", scenario]
    if modern:
        args += ["--spec-version", "2026-07-28"]
    result = conformance.run(args, out, timeout=180, suite=conformance.NEXT if modern else conformance.PEERS)
    checks = conformance.read_checks(out)
    passed, failed, warned = conformance.tally(checks)
    problems = failed + warned + ([] if checks else ["no checks written"])
    return scenario, passed, problems, result.stdout[-3000:] + result.stderr[-3000:]


def run_all(scenarios: list[str], tmp_path: Path, modern: bool) -> None:
    conformance.ensure_installed()
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda s: run_scenario(s, tmp_path / s.replace("/", "_"), modern), scenarios))
    print()
    for scenario, passed, problems, _ in results:
        print(f"{'PASS' if not problems else 'FAIL'} {scenario}: {passed} checks passed, {len(problems)} problems")
    bad = [f"{s}: {p}\n{output}" for s, _, p, output in results if p]
    assert not bad, "\n\n".join(bad)


def test_auth_scenarios_0_1_16(tmp_path: Path) -> None:
    run_all(SCENARIOS_0_1_16, tmp_path, modern=False)


def test_auth_scenarios_2026_07_28(tmp_path: Path) -> None:
    run_all(SCENARIOS_2026, tmp_path, modern=True)


def test_the_token_never_reaches_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sign-in with the relay at debug level: its log names the sign-in, never the token."""
    log = tmp_path / "relay.log"
    monkeypatch.setenv("MCPGATE_AUTH_HOST_STDERR", str(log))
    conformance.ensure_installed()
    _, _, problems, output = run_scenario("auth/scope-step-up", tmp_path / "out", modern=False)
    assert not problems, f"{problems}\n{output}"
    text = log.read_text()
    assert "signed in to" in text and "to sign in, open this URL" in text, text[-3000:]
    tokens = {
        check["details"]["token"]
        for checks in conformance.read_checks(tmp_path / "out").values()
        for check in checks
        if isinstance(check.get("details"), dict) and isinstance(check["details"].get("token"), str)
    }
    assert "test-token-" not in text, text[-3000:]
    assert not any(token in text for token in tokens)
