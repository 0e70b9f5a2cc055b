"""Helpers for the OAuth tests: tests/fixtures/oidc_issuer.py as a running issuer (tokens it mints, a gateway in
resource-server mode against it), a gateway in embedded mode, and the official SDK client signing in (its
loopback callback, token storage, provider), JWT claims, a client's /authorize query, a code redemption and a
whole sign-in. The generic pieces (gateways, processes, requests) are tests/support/'s; the `issuer` fixture
(an oidc_issuer per test module) is tests/conftest.py's."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import queue
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import httpx2
import requests
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from tests.browser import Browser, Outcome
from tests.support.gateway import FIXTURES, Gateway, stop_process
from tests.support.http import HEADERS, Reply, Served, init_body


@contextlib.contextmanager
def oidc_issuer(*args: str, user: str = "alice", timeout: float = 20.0) -> Iterator[str]:
    """tests/fixtures/oidc_issuer.py on a free loopback port for a `with` block: yields its issuer URL (its
    docstring lists the endpoints; `args` are its other flags, e.g. "--prefix", "/tenant"), stopped by PID."""
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES / "oidc_issuer.py"), "--user", user, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(timeout)
        if not ready or not ready[0].startswith("http://"):
            raise RuntimeError(f"oidc_issuer did not start (exit {proc.poll()})")
        yield ready[0].strip()
    finally:
        stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def mint_token(issuer: str, claims: dict[str, Any], **options: Any) -> str:
    """A token the issuer at `issuer` makes with these claims (`options`: its /mint's, e.g. opaque=True)."""
    reply = requests.post(issuer + "/mint", json={"claims": claims, **options}, timeout=10)
    reply.raise_for_status()
    return str(reply.json()["token"])


def resource_server_env(issuer: str, **extra: str) -> dict[str, str]:
    """A gateway in resource-server mode against oidc_issuer.py at `issuer` (its JWTs, and opaque tokens by
    introspection as its preregistered client) on its own loopback address; `extra`: more settings."""
    return {
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_OAUTH_INTROSPECTION_URL": issuer + "/introspect",
        "MCPGATE_OAUTH_CLIENT_ID": "test-client",
        "MCPGATE_OAUTH_CLIENT_SECRET": "test-secret",
        **extra,
    }


def principal_tokens(issuer: str, gw: Gateway, subjects: Iterable[str]) -> dict[str, str]:
    """An access token for `gw`'s endpoint (scope mcp) per subject: one principal each."""
    audience = f"http://127.0.0.1:{gw.port}/mcp"
    return {sub: mint_token(issuer, {"sub": sub, "aud": audience, "scope": "mcp"}) for sub in subjects}


# -- the embedded authorization server ----------------------------------------------------------------------------


def embedded_env(state_dir: Path | str, users: str, **extra: str) -> dict[str, str]:
    """A gateway in embedded mode on its own loopback address: who may sign in (`users`, MCPGATE_OAUTH_USERS's
    name:hash pairs), its state under `state_dir`; `extra`: more settings."""
    return {
        "MCPGATE_AUTH_MODE": "embedded",
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_USERS": users,
        "MCPGATE_STATE_DIR": str(state_dir),
        **extra,
    }


def admitted(gw: Gateway, token: str) -> bool:
    """Whether the MCP endpoint lets the token in (a ping without a session: 400 past the guard, 401 not)."""
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers)
    assert reply.status in (400, 401), reply
    return reply.status == 400


def pkce_challenge(verifier: str) -> str:
    """The S256 code_challenge of a PKCE verifier."""
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


def authorize_query(
    client_id: str, redirect_uri: str, resource: str, verifier: str, state: str, /, **extra: str
) -> dict[str, str]:
    """The /authorize parameters a public client sends (a code for scope mcp, PKCE S256 of `verifier`, the
    resource); `extra` overrides or adds parameters, these among them ("" drops one)."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": "mcp",
        "state": state,
        "code_challenge": pkce_challenge(verifier),
        "code_challenge_method": "S256",
        "resource": resource,
        **extra,
    }
    return {name: value for name, value in query.items() if value != ""}


def register_public_client(base: str, redirect_uri: str, client_name: str) -> str:
    """The client_id of a public client registered now at the embedded server at `base`."""
    body = {"client_name": client_name, "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none"}
    registered = requests.post(base + "/register", json=body, timeout=30)
    assert registered.status_code == 201, registered.text
    return str(registered.json()["client_id"])


# -- the official SDK client signing in with OAuth (its loopback callback, token storage, provider) -------------


SDK_HANG_GUARD = 60.0


class Callback:
    """A client's loopback redirect target: answers 200 and hands each query it receives to the client."""

    def __init__(self) -> None:
        self.queries: queue.Queue[dict[str, str]] = queue.Queue()
        received = self.queries

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                received.put(dict(parse_qsl(urlsplit(self.path).query)))
                body = b"Signed in. You can close this page."
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class TokenMemory:
    """The SDK's TokenStorage in memory: what the client registered and was issued, for the test to look at."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class SdkUser:
    """One person at one official-SDK client: a stand-in browser (`browser`, replaceable between calls), the
    client's loopback callback and token storage, every sign-in walk the browser made (`walks`). close() at the
    end (stops the callback)."""

    def __init__(self, browser: Browser, client_name: str = "mcpgate tests (SDK)") -> None:
        self.browser = browser
        self.client_name = client_name
        self.callback = Callback()
        self.storage = TokenMemory()
        self.walks: list[Outcome] = []

    def close(self) -> None:
        self.callback.close()

    async def open_browser(self, authorization_url: str) -> None:
        outcome = await anyio.to_thread.run_sync(self.browser.visit, authorization_url)
        self.walks.append(outcome)
        assert outcome.status == 200 and outcome.url.startswith(self.callback.url + "?"), outcome.describe()

    async def wait_for_callback(self) -> AuthorizationCodeResult:
        query = await anyio.to_thread.run_sync(lambda: self.callback.queries.get(timeout=SDK_HANG_GUARD))
        assert "code" in query, query
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    def provider(self, url: str) -> OAuthClientProvider:
        metadata = OAuthClientMetadata(
            client_name=self.client_name,
            redirect_uris=[self.callback.url],  # type: ignore[list-item]  # pydantic validates the string
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        return OAuthClientProvider(url, metadata, self.storage, self.open_browser, self.wait_for_callback)

    def call_add(self, url: str, expired: bool = False, mode: str = "legacy", tool: str = "add") -> Any:
        """Connect with OAuth (signing in when the storage holds no token; refreshing first when `expired`)
        and call the demo's add (`tool`: by another name, e.g. an aggregate's), in the era `mode` names
        ("legacy": initialize; MODERN: 2026-07-28)."""

        async def main() -> Any:
            provider = self.provider(url)
            if expired:
                provider.context.token_expiry_time = 1.0  # as if the stored token's lifetime had run out
            timeout = httpx2.Timeout(30, read=SDK_HANG_GUARD)
            with anyio.fail_after(SDK_HANG_GUARD):
                async with (
                    httpx2.AsyncClient(auth=provider, timeout=timeout) as http,
                    Client(streamable_http_client(url, http_client=http), mode=mode) as client,
                ):
                    result = await client.call_tool(tool, {"a": 2, "b": 3})
                    return result.structured_content

        return anyio.run(main)

    def claims(self) -> dict[str, Any]:
        """The access token's claims (read, not verified: the gateway verified it)."""
        assert self.storage.tokens is not None
        return jwt_claims(self.storage.tokens.access_token)


def jwt_claims(token: str) -> dict[str, Any]:
    """A JWT's claims, read and not verified (the gateway that issued or admitted it verified it)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def redeem_code(
    base: str, code: str, verifier: str, client_id: str, redirect_uri: str, **extra: str
) -> requests.Response:
    """The token endpoint's answer for an authorization code, its PKCE verifier included; `extra`: more form
    fields (resource, ...)."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "client_id": client_id,
        "code_verifier": verifier,
        **extra,
    }
    return requests.post(base + "/token", data=data, timeout=30)


SIGN_IN_CALLBACK = "http://127.0.0.1:9/callback"  # never fetched: the browser stops there


def sign_in(base: str, user: str, password: str, resource: str | None = None) -> dict[str, Any]:
    """The token endpoint's answer (plus the client_id) for `user` signing in to the embedded server at `base`
    for `resource` (default base + "/mcp"): a public client registered with a loopback redirect URI, the
    stand-in browser through login and consent, the code redeemed with its PKCE verifier."""
    resource = resource or base + "/mcp"
    client_id = register_public_client(base, SIGN_IN_CALLBACK, "sign_in")
    verifier = secrets.token_urlsafe(40)
    query = authorize_query(client_id, SIGN_IN_CALLBACK, resource, verifier, secrets.token_hex(4))
    outcome = Browser(user, password).visit(f"{base}/authorize?{urlencode(query)}", stop_at=SIGN_IN_CALLBACK)
    assert "code" in outcome.params, outcome.describe()
    issued = redeem_code(base, outcome.params["code"], verifier, client_id, SIGN_IN_CALLBACK, resource=resource)
    assert issued.status_code == 200, issued.text
    return {**issued.json(), "client_id": client_id}


def post_with_token(gw: Served, token: str | None, body: Any = None, path: str = "/mcp", **headers: str) -> Reply:
    """POST `body` (an initialize by default) with `Authorization: Bearer <token>` (none for None); the token must
    never come back in the reply's body or headers."""
    sent = {**HEADERS, **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    reply = gw.request("POST", path, body=body if body is not None else init_body(), headers=sent)
    if token:
        assert token not in reply.body.decode(errors="replace") + str(reply.headers), reply
    return reply
