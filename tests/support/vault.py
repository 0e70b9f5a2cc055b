"""Helpers for the per-user credential tests (tests/serve/test_vault.py, tests/security/test_vault_isolation.py): a
gateway in embedded OAuth mode publishing tests/fixtures/slot_echo_server.py with one slot, a user signed in through
the real sign-in pages, one browser on the vault's page, and the SDK client calling the echo tool in either era."""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpgate.serve.oauth import passwords
from tests.browser import Browser
from tests.support.fleet import Balancer
from tests.support.gateway import FIXTURES, Gateway
from tests.support.http import write_config
from tests.support.oauth import embedded_env, sign_in

PASSWORD = "vault test password"
USERS = ("alice", "bob", "carol")
SERVER = "echo"
CSRF = re.compile(r"name='csrf_token' value='([^']+)'")
ENTRY = {
    "command": sys.executable,
    "args": [str(FIXTURES / "slot_echo_server.py"), "--token=${user_secret:echo_token}"],
    "env": {"ECHO_TOKEN": {"user_secret": "echo_token"}},
    "user_secrets": {"echo_token": {"label": "Echo token", "help": "https://example.com/tokens"}},
}
SDK_GUARD = 60.0


def vault_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def vault_env(tmp: Path, key: str | None = None, **extra: str) -> dict[str, str]:
    """A gateway in embedded mode publishing the echo server (its slot) for USERS, the vault under `tmp`."""
    users = ",".join(f"{user}:{passwords.make_hash(PASSWORD)}" for user in USERS)
    config = write_config(tmp / "servers.json", {SERVER: ENTRY})
    env = embedded_env(tmp / "state", users, MCPGATE_CONFIG=config, **extra)
    env["MCPGATE_VAULT_KEY"] = key or vault_key()
    return env


def access_token(gw: Gateway | Balancer, user: str) -> str:
    """`user` signed in through the embedded server's pages (login, consent), for the echo server's resource."""
    return str(sign_in(gw.base, user, PASSWORD, resource=f"{gw.base}/servers/{SERVER}/mcp")["access_token"])


class VaultPage:
    """One user's browser on the vault's page: signed in through its own form."""

    def __init__(self, gw: Gateway | Balancer, user: str) -> None:
        self.base, self.http = gw.base, requests.Session()
        reply = self.http.post(
            self.base + "/vault/login",
            data={"csrf_token": self.csrf(), "username": user, "password": PASSWORD},
            allow_redirects=False,
            timeout=60,
        )
        assert reply.status_code == 303, reply.text

    def page(self) -> str:
        reply = self.http.get(self.base + "/vault", timeout=30)
        assert reply.status_code == 200 and reply.headers["cache-control"] == "no-store", reply.text
        return reply.text

    def csrf(self) -> str:
        found = CSRF.search(self.page())
        assert found, "no CSRF token on the page"
        return found.group(1)

    def post(self, **form: str) -> requests.Response:
        return self.http.post(self.base + "/vault", data=form, allow_redirects=False, timeout=30)

    def set(self, value: str) -> None:
        reply = self.post(csrf_token=self.csrf(), slot="echo_token", action="set", value=value)
        assert reply.status_code == 303, reply.text

    def delete(self) -> None:
        reply = self.post(csrf_token=self.csrf(), slot="echo_token", action="delete")
        assert reply.status_code == 303, reply.text


async def tool_texts(
    url: str,
    token: str,
    mode: str,
    tool: str,
    arguments: Callable[[int], dict[str, Any]],
    calls: int = 1,
    **options: Any,
) -> list[str]:
    """The text answers of `calls` calls of `tool` (the n-th with `arguments(n)`) in one SDK client of `mode`
    ("legacy": a 2025 session), with `token` as its bearer."""
    headers = {"Authorization": f"Bearer {token}"}
    out = []
    with anyio.fail_after(SDK_GUARD):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=SDK_GUARD)) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode, **options) as client,
        ):
            for n in range(calls):
                result = await client.call_tool(tool, arguments(n))
                assert not result.is_error, result
                block = result.content[0]
                assert isinstance(block, types.TextContent)
                out.append(block.text)
    return out


async def echo(url: str, token: str, mode: str, calls: int = 1, **options: Any) -> list[str]:
    """The slot-echo child's secret tool's answers to `calls` calls in one SDK client of `mode`."""
    return await tool_texts(url, token, mode, "secret", lambda _n: {}, calls, **options)


def interleaved(
    call: Callable[[str, str], Awaitable[list[str]]],
    users: Iterable[str],
    modes: Iterable[str] = ("legacy", "2026-07-28"),
) -> dict[tuple[str, str], list[str]]:
    """`call(user, mode)` for every user in every mode at once (one task each): the answers by (user, mode)."""
    seen: dict[tuple[str, str], list[str]] = {}

    async def run(user: str, mode: str) -> None:
        seen[(user, mode)] = await call(user, mode)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for user in users:
                for mode in modes:
                    group.start_soon(run, user, mode)

    anyio.run(main)
    return seen


def echo_once(gw: Gateway, token: str, mode: str) -> str:
    return anyio.run(lambda: echo(url_of(gw), token, mode))[0]


def url_of(gw: Gateway | Balancer) -> str:
    return f"{gw.base}/servers/{SERVER}/mcp"


# -- resource-server mode: the page signs the browser in through the external authorization server ---------------


def rs_vault_env(tmp: Path, issuer: str, key: str | None = None, **extra: str) -> dict[str, str]:
    """A gateway in resource-server mode (tokens of `issuer`) publishing the echo server (its slot), the vault
    under `tmp`; `extra`: more settings (MCPGATE_OAUTH_AUDIENCE, MCPGATE_VAULT_CLIENT_ID, ...)."""
    return {
        "MCPGATE_AUTH_MODE": "resource-server",
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_CONFIG": write_config(tmp / "servers.json", {SERVER: ENTRY}),
        "MCPGATE_STATE_DIR": str(tmp / "state"),
        "MCPGATE_VAULT_KEY": key or vault_key(),
        **extra,
    }


def authorization_env(tmp: Path, **extra: str) -> dict[str, str]:
    """Another gateway in embedded mode, USERS signing in with PASSWORD: the authorization server of a
    resource-server gateway."""
    users = ",".join(f"{user}:{passwords.make_hash(PASSWORD)}" for user in USERS)
    return embedded_env(tmp / "authorization-server", users, **extra)


def rs_callback(
    http: requests.Session,
    base: str,
    user: str,
    password: str = PASSWORD,
    back: str = "/vault",
    tamper: Callable[[str], str] | None = None,
) -> str:
    """The callback URL a sign-in on the page at `base` comes back with, not yet fetched: the page's Sign in
    (in `http`, the browser's cookies at the gateway), then the stand-in browser through the authorization
    server's pages as `user` (`tamper`: changes the authorization URL first)."""
    csrf = CSRF.search(http.get(base + "/vault", timeout=30).text)
    assert csrf, "no CSRF token on the page"
    form = {"csrf_token": csrf.group(1), "next": back}
    start = http.post(base + "/vault/signin", data=form, allow_redirects=False, timeout=60)
    assert start.status_code == 303, start.text
    url = start.headers["location"]
    outcome = Browser(user, password).visit(tamper(url) if tamper else url, stop_at=base + "/vault/callback")
    assert outcome.url.startswith(base + "/vault/callback?"), outcome.describe()
    return outcome.url


class RsVaultPage(VaultPage):
    """One user's browser on the vault's page of a resource-server gateway, signed in through its authorization
    server (the page's Sign in, the authorization server's pages, the page's callback)."""

    def __init__(self, gw: Gateway | Balancer, user: str, password: str = PASSWORD) -> None:
        self.base, self.http = gw.base, requests.Session()
        reply = self.http.get(rs_callback(self.http, self.base, user, password), allow_redirects=False, timeout=60)
        assert reply.status_code == 303 and reply.headers["location"] == "/vault", reply.text


def gateway_token(base: str, user: str) -> str:
    """`user`'s access token from the embedded gateway at `base` for its own endpoint (the audience a
    resource-server gateway using it is given as MCPGATE_OAUTH_AUDIENCE)."""
    return str(sign_in(base, user, PASSWORD, resource=base + "/mcp")["access_token"])


def audited_principals(audit: Path) -> list[str]:
    """The principal of every tools/call an upstream mcpgate served, in order, from its audit log (MCPGATE_AUDIT_LOG
    at `audit`): what the upstream saw, for the per-user OAuth tests."""
    if not audit.exists():
        return []
    lines = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
    return [str(line.get("principal")) for line in lines if line.get("event") == "call"]
