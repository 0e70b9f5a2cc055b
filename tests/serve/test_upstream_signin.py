"""Per-user OAuth to a remote upstream (issue 26): the upstream is a real protected MCP server (gunicorn mcpgate in
embedded OAuth mode serving the demo server, with its own users, sign-in pages and DCR), published by the gateway
under test (embedded OAuth for its own users) as a remote entry with `"auth": {"type": "user_oauth"}`.

Two gateway users (alice, bob) sign in to the gateway (its /authorize for their MCP token, its /vault form for the
browser session); each signs in to the upstream as a different upstream user through the upstream's real sign-in
and consent pages (tests/browser.py's stand-in browser), the gateway's callback receiving the code in that user's
gateway session. Which token each upstream call carried is read at the upstream: its audit log names the principal
of every tools/call.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import gevent
import httpx2
import mcp.types as types
import pytest
import requests
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcpgate.config.settings import Settings
from mcpgate.relay.oauth.discovery import Discovery, SignInError
from mcpgate.serve.oauth import passwords
from mcpgate.serve.servers import config_file
from mcpgate.serve.vault import upstream_oauth
from mcpgate.serve.vault.crypto import Cipher, key_bytes
from mcpgate.serve.vault.store import SqliteVaultStore
from mcpgate.serve.vault.vault import SlotsEmpty, Vault
from tests import support
from tests.browser import Browser
from tests.support import HEADERS, Gateway, init_body, modern_body, modern_headers, reply_message, serving, wait_for
from tests.support.http import write_config
from tests.support.oauth import embedded_env, sign_in
from tests.support.vault import audited_principals, interleaved, tool_texts, vault_key

PASSWORD = "upstream sign-in password"
USERS = {"alice": "up-alice", "bob": "up-bob"}  # gateway user -> the upstream user they sign in as
SERVER = "up"
SDK_GUARD = 60.0
TOKEN_TTL = 62  # the upstream's access tokens: the gateway refreshes them from 2 s after they are issued


def _users(names: list[str]) -> str:
    return ",".join(f"{name}:{passwords.make_hash(PASSWORD)}" for name in names)


@dataclass
class Site:
    upstream: Gateway
    gateway: Gateway
    audit: Path
    tokens: dict[str, str]  # each gateway user's MCP token for the gateway
    browsers: dict[str, requests.Session]  # each gateway user's browser session on the gateway's pages
    state: Path  # the gateway's MCPGATE_STATE_DIR (its vault.sqlite3)
    key: str  # the gateway's MCPGATE_VAULT_KEY

    def principal(self, user: str) -> str:
        """The gateway principal of `user` (issuer#subject), as the vault's rows name it."""
        with sqlite3.connect(self.state / "vault.sqlite3") as db:
            rows = {row[0] for row in db.execute("SELECT principal FROM slots")}
        (found,) = [row for row in rows if row.rsplit("#", 1)[-1] in (user, f"user:{user}")] or [
            row for row in rows if user in row.rsplit("#", 1)[-1]
        ]
        return found

    @property
    def url(self) -> str:
        return f"{self.gateway.base}/servers/{SERVER}/mcp"

    @property
    def page(self) -> str:
        return f"{self.gateway.base}/vault/oauth/{SERVER}"

    def upstream_principals(self) -> list[str]:
        """The principal of every tools/call the upstream served, in order."""
        return audited_principals(self.audit)

    def csrf(self, user: str) -> str:
        text = self.browsers[user].get(self.page, timeout=30).text
        start = text.index("name='csrf_token' value='") + len("name='csrf_token' value='")
        return text[start : text.index("'", start)]

    def start_signin(self, user: str) -> str:
        """The gateway's 303 to the upstream's authorization endpoint, for `user`'s browser."""
        reply = self.browsers[user].post(
            self.page, data={"csrf_token": self.csrf(user), "action": "signin"}, allow_redirects=False, timeout=60
        )
        assert reply.status_code == 303, reply.text
        return str(reply.headers["Location"])

    def upstream_code(self, user: str, authorize_url: str) -> dict[str, str]:
        """The upstream's sign-in and consent pages as `user`'s upstream user: the callback's parameters."""
        outcome = Browser(USERS[user], PASSWORD).visit(authorize_url, stop_at=self.page + "/callback")
        params = dict(parse_qsl(urlsplit(outcome.url).query))
        assert "code" in params and "state" in params, outcome.describe()
        return params

    def callback(self, user: str, params: dict[str, str]) -> requests.Response:
        return self.browsers[user].get(f"{self.page}/callback?{urlencode(params)}", timeout=60)

    def sign_in_upstream(self, user: str) -> None:
        reply = self.callback(user, self.upstream_code(user, self.start_signin(user)))
        assert reply.status_code == 200 and "Signed in" in reply.text, reply.text

    def sign_out_upstream(self, user: str) -> None:
        reply = self.browsers[user].post(
            self.page, data={"csrf_token": self.csrf(user), "action": "signout"}, timeout=60
        )
        assert reply.status_code == 200 and "Signed out" in reply.text, reply.text

    def initialize(self, user: str) -> dict[str, Any]:
        headers = {**HEADERS, "Authorization": f"Bearer {self.tokens[user]}"}
        reply = requests.post(self.url, json=init_body(), headers=headers, timeout=60)
        return dict(reply.json()) if reply.headers.get("content-type", "").startswith("application/json") else {}


def gateway_token(gw: Gateway, user: str) -> str:
    """`user`'s MCP token for the gateway's remote server, through the gateway's own sign-in pages."""
    return str(sign_in(gw.base, user, PASSWORD, resource=f"{gw.base}/servers/{SERVER}/mcp")["access_token"])


def vault_session(gw: Gateway, user: str) -> requests.Session:
    """A browser session signed in to the gateway's pages through the vault's form."""
    http = requests.Session()
    text = http.get(gw.base + "/vault", timeout=30).text
    start = text.index("name='csrf_token' value='") + len("name='csrf_token' value='")
    csrf = text[start : text.index("'", start)]
    reply = http.post(
        gw.base + "/vault/login",
        data={"csrf_token": csrf, "username": user, "password": PASSWORD},
        allow_redirects=False,
        timeout=60,
    )
    assert reply.status_code == 303, reply.text
    return http


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("upstream-signin")
    audit = tmp / "upstream-audit.jsonl"
    upstream_env = embedded_env(tmp / "upstream-state", _users(list(USERS.values())), MCPGATE_AUDIT_LOG=str(audit))
    upstream_env["MCPGATE_OAUTH_ACCESS_TTL"] = str(TOKEN_TTL)  # within a second of the refresh margin (60 s)
    with serving(upstream_env) as upstream:
        entry = {"url": upstream.url, "auth": {"type": "user_oauth", "label": "the test upstream"}}
        config = write_config(tmp / "servers.json", {SERVER: entry})
        key = vault_key()
        env = embedded_env(tmp / "state", _users(list(USERS)), MCPGATE_CONFIG=config, MCPGATE_VAULT_KEY=key)
        env["MCPGATE_VAULT_POLL"] = "0.2"
        with serving(env) as gateway:
            tokens = {user: gateway_token(gateway, user) for user in USERS}
            browsers = {user: vault_session(gateway, user) for user in USERS}
            yield Site(upstream, gateway, audit, tokens, browsers, tmp / "state", key)


async def echo(site: Site, user: str, mode: str, calls: int = 1, **options: Any) -> list[str]:
    def message(n: int) -> dict[str, Any]:
        return {"message": f"{user}-{n}"}

    return await tool_texts(site.url, site.tokens[user], mode, "echo", message, calls, **options)


def upstream_principal_of(site: Site, user: str) -> str:
    """The upstream principal of `user`'s calls (one call made now, read at the upstream)."""
    before = len(site.upstream_principals())
    assert anyio.run(echo, site, user, "legacy") == [f"{user}-0"]
    wait_for(lambda: len(site.upstream_principals()) > before, timeout=20, what="the upstream's audit line")
    return site.upstream_principals()[before]


def test_each_user_signs_in_upstream_and_each_upstream_call_carries_their_own_token(site: Site) -> None:
    # before signing in upstream: the call is answered with a URL-mode elicitation pointing at the sign-in page
    for user in USERS:
        refused = site.initialize(user)
        assert refused.get("error", {}).get("code") == -32042, refused
        (elicitation,) = refused["error"]["data"]["elicitations"]
        assert elicitation["mode"] == "url" and elicitation["url"] == site.page, elicitation
    for user in USERS:
        site.sign_in_upstream(user)
    principals = {user: upstream_principal_of(site, user) for user in USERS}
    assert principals["alice"] != principals["bob"], principals
    assert principals["alice"].endswith(USERS["alice"]) or USERS["alice"] in principals["alice"], principals
    before = len(site.upstream_principals())
    seen = interleaved(lambda user, mode: echo(site, user, mode, calls=5), USERS)
    for (user, _mode), answers in seen.items():
        assert answers == [f"{user}-{n}" for n in range(5)], answers
    wait_for(lambda: len(site.upstream_principals()) >= before + 20, timeout=30, what="20 audit lines upstream")
    counted = site.upstream_principals()[before:]
    assert sorted(set(counted)) == sorted(principals.values()), counted
    assert counted.count(principals["alice"]) == 10 and counted.count(principals["bob"]) == 10, counted
    # the tokens never show in the gateway's log
    log = site.gateway.log()
    assert "access_token" not in log and "Bearer ey" not in log


def test_signing_out_stops_that_users_children_and_asks_again_the_other_user_untouched(site: Site) -> None:
    for user in USERS:
        if site.initialize(user).get("error"):
            site.sign_in_upstream(user)
    assert anyio.run(echo, site, "bob", "2026-07-28") == ["bob-0"]  # bob's pooled child holds his token
    site.sign_out_upstream("bob")
    refused = site.initialize("bob")  # (the page's worker stops the holders before it answers)
    assert refused["error"]["code"] == -32042 and refused["error"]["data"]["elicitations"][0]["url"] == site.page
    body = modern_body(7, "tools/call", {"name": "echo", "arguments": {"message": "bob"}})
    headers = {**modern_headers("tools/call", "echo"), "Authorization": f"Bearer {site.tokens['bob']}"}
    answer = reply_message(site.gateway.request("POST", f"/servers/{SERVER}/mcp", body=body, headers=headers))
    assert "result" not in answer and site.page in answer["error"]["message"], answer  # no pooled child kept
    assert anyio.run(echo, site, "alice", "2026-07-28") == ["alice-0"]
    assert anyio.run(echo, site, "alice", "legacy") == ["alice-0"]
    site.sign_in_upstream("bob")  # and after signing in again, the retry succeeds
    assert anyio.run(echo, site, "bob", "2026-07-28") == ["bob-0"]


def stored_tokens(site: Site, user: str) -> dict[str, Any]:
    """The upstream tokens the gateway keeps for `user` (opened with the vault key, as only its operator can)."""
    store = SqliteVaultStore(str(site.state))
    try:
        principal = site.principal(user)
        sealed = store.get(principal, f"oauth:{SERVER}")
        assert sealed is not None, user
        record = json.loads(Cipher(key_bytes(site.key)).open(principal, f"oauth:{SERVER}", sealed))
    finally:
        store.close()
    return dict(record["tokens"])


def test_a_token_about_to_expire_is_refreshed_and_the_calls_go_on(site: Site) -> None:
    if site.initialize("alice").get("error"):
        site.sign_in_upstream("alice")
    first = stored_tokens(site, "alice")
    assert first.get("refresh_token") and first.get("expires_at"), sorted(first)
    principal = upstream_principal_of(site, "alice")

    def refreshed() -> bool:  # each call past the margin refreshes first
        assert anyio.run(echo, site, "alice", "2026-07-28") == ["alice-0"]
        return stored_tokens(site, "alice")["access_token"] != first["access_token"]

    wait_for(refreshed, timeout=60, what="a refreshed token")
    assert stored_tokens(site, "alice")["refresh_token"] != first["refresh_token"]  # rotated, and kept
    assert upstream_principal_of(site, "alice") == principal


def test_signing_out_ends_that_users_open_session_and_not_the_other_users(site: Site) -> None:
    for user in USERS:
        if site.initialize(user).get("error"):
            site.sign_in_upstream(user)

    async def main() -> None:
        opened = []
        with anyio.fail_after(SDK_GUARD):
            async with contextlib.AsyncExitStack() as stack:
                for user in USERS:
                    headers = {"Authorization": f"Bearer {site.tokens[user]}"}
                    http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=30))
                    transport = streamable_http_client(site.url, http_client=http)
                    client = await stack.enter_async_context(Client(transport, mode="legacy"))
                    assert not (await client.call_tool("echo", {"message": user})).is_error
                    opened.append(client)
                alice, bob = opened
                await anyio.to_thread.run_sync(site.sign_out_upstream, "bob")
                try:  # bob's upstream session was stopped with his sign-in: his session is gone, or the call fails
                    ended = (await bob.call_tool("echo", {"message": "bob"})).is_error
                except MCPError:
                    ended = True
                assert ended
                result = await alice.call_tool("echo", {"message": "alice"})  # alice's goes on, the same session
                assert not result.is_error and isinstance(result.content[0], types.TextContent), result
                assert result.content[0].text == "alice"

    anyio.run(main)


def has_token(signin: Any, principal: str) -> bool:
    try:
        signin.token_source(principal)
    except SlotsEmpty:
        return False
    return True


def test_step_up_on_insufficient_scope_asks_a_new_signin_with_the_union_of_scopes(tmp_path: Path) -> None:
    key = os.urandom(32)
    settings = Settings(public_url="https://gw.example", vault_key=base64.b64encode(key).decode())
    vault = Vault(SqliteVaultStore(str(tmp_path)), Cipher(key), settings)
    config = upstream_oauth.parse({"type": "user_oauth", "scope": "read"}, "servers.up.auth")
    config.attach(vault)
    signin = config.upstream(settings, "up", "https://up.example/mcp")
    record = {"client": {"client_id": "c"}, "resource": "https://up.example/mcp", "token_endpoint": "https://as/t"}
    record["tokens"] = {"access_token": "AT-1", "scope": "read", "expires_at": time.time() + 3600}
    vault.put("p#alice", "oauth:up", json.dumps(record))
    vault.put("p#alice", "oauth-grant:up", "{}")
    token, _stamp = signin.token_source("p#alice")
    assert token.authorization() == "Bearer AT-1" and "AT-1" not in repr(token)
    with pytest.raises(SlotsEmpty) as empty:
        signin.token_source("p#bob")
    assert empty.value.url == "https://gw.example/vault/oauth/up" and "AT-1" not in str(empty.value)
    assert not token.covers("https://elsewhere.example/mcp")  # its token goes to its upstream's origin alone
    challenge = 'Bearer error="insufficient_scope", scope="write", resource_metadata="https://up.example/x"'
    assert token.on_forbidden(challenge, "Bearer AT-1") is False
    # the grant ends in a greenlet of its own (the sweep stops this very child): waited for until it has
    assert support.wait_for(lambda: not has_token(signin, "p#alice"), 10, sleep=gevent.sleep)
    signin._discovery = Discovery(
        "https://up.example/mcp",
        "https://as.example",
        {"authorization_endpoint": "https://as.example/a", "token_endpoint": "https://as.example/t"}
        | {"code_challenge_methods_supported": ["S256"]},
    )
    signin._clients["https://as.example"] = {"client_id": "c", "token_endpoint_auth_method": "none"}
    query = dict(parse_qsl(urlsplit(signin.begin("p#alice")).query))
    assert query["scope"].split() == ["read", "write"] and query["resource"] == "https://up.example/mcp", query


def test_the_entry_is_checked_when_the_file_is_read() -> None:
    def entry(auth: dict[str, Any]) -> str:
        return json.dumps({"mcpServers": {"up": {"url": "https://up.example/mcp", "auth": auth}}})

    (server,) = config_file.parse(entry({"type": "user_oauth", "scope": "read write", "label": "Tracker"})).servers
    assert server.remote is not None and server.remote.auth.scope == ("read", "write")
    assert server.remote.auth.per_user and server.remote.auth.label == "Tracker"
    refusals = {
        "client_secret": "auth.client_secret: not a user_oauth field",
        "authorization_server": "auth.authorization_server: must be an https URL",
        "client_secret_env": "auth.client_secret_env: names",
    }
    values = {"client_secret": "x", "authorization_server": "http://as.example", "client_secret_env": "NOT_SET_X9"}
    for field, expected in refusals.items():
        with pytest.raises(config_file.ConfigError, match=re.escape(expected)):
            config_file.parse(entry({"type": "user_oauth", "client_id": "c", field: values[field]}))


def test_in_2026_07_28_the_call_asks_the_signin_by_url_elicitation_and_its_retry_succeeds(site: Site) -> None:
    if not site.initialize("bob").get("error"):
        site.sign_out_upstream("bob")
    asked: list[str] = []

    async def sign_in(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        asked.append(params.url)
        await anyio.to_thread.run_sync(site.sign_in_upstream, "bob")  # the user, in their browser
        return types.ElicitResult(action="accept")

    answers = anyio.run(lambda: echo(site, "bob", "2026-07-28", elicitation_callback=sign_in))
    assert asked == [site.page] and answers == ["bob-0"], (asked, answers)


def test_an_authorization_server_naming_a_plain_http_or_script_endpoint_is_refused(tmp_path: Path) -> None:
    key = os.urandom(32)
    settings = Settings(public_url="https://gw.example", vault_key=base64.b64encode(key).decode())
    config = upstream_oauth.parse({"type": "user_oauth"}, "servers.up.auth")
    config.attach(Vault(SqliteVaultStore(str(tmp_path)), Cipher(key), settings))
    signin = config.upstream(settings, "up", "https://up.example/mcp")
    signin._clients["https://as.example"] = {"client_id": "c", "token_endpoint_auth_method": "none"}
    for endpoint in ("http://as.example/a", "javascript:alert(1)"):
        metadata = {"authorization_endpoint": endpoint, "token_endpoint": "https://as.example/t"}
        signin._discovery = Discovery(
            "https://up.example/mcp", "https://as.example", metadata | {"code_challenge_methods_supported": ["S256"]}
        )
        with pytest.raises(SignInError, match="not https"):
            signin.begin("p#alice")
