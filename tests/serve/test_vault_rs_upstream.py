"""Per-user OAuth to a remote upstream (/vault/oauth/<server>) on a gateway in resource-server mode (issue 26): the
user signs in to the gateway's page through the gateway's authorization server (another mcpgate in embedded mode),
which brings the browser back to the upstream's page; there the user signs in to the upstream (a third mcpgate in
embedded mode, its own users, pages and DCR), and that user's MCP calls (a token of the authorization server) carry
their own upstream token, read at the upstream in its audit log; another user's calls are asked to sign in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
import requests
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcpgate.serve.oauth import passwords
from tests.browser import Browser
from tests.support import HEADERS, Gateway, init_body, serving, wait_for
from tests.support.http import write_config
from tests.support.oauth import embedded_env
from tests.support.vault import (
    PASSWORD,
    SDK_GUARD,
    audited_principals,
    authorization_env,
    gateway_token,
    rs_callback,
    rs_vault_env,
)

UPSTREAM_USERS = {"alice": "up-alice", "bob": "up-bob"}
SERVER = "up"
CSRF = re.compile(r"name='csrf_token' value='([^']+)'")


@dataclass
class Site:
    gateway: Gateway
    audit: Path
    tokens: dict[str, str]  # each user's MCP token, from the gateway's authorization server

    @property
    def page(self) -> str:
        return f"{self.gateway.base}/vault/oauth/{SERVER}"

    def initialize(self, user: str) -> dict[str, Any]:
        headers = {**HEADERS, "Authorization": f"Bearer {self.tokens[user]}"}
        reply = self.gateway.request("POST", f"/servers/{SERVER}/mcp", body=init_body(), headers=headers)
        return reply.json()  # type: ignore[no-any-return]

    def upstream_principals(self) -> list[str]:
        return audited_principals(self.audit)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("vault-rs-upstream")
    audit = tmp / "upstream-audit.jsonl"
    users = ",".join(f"{name}:{passwords.make_hash(PASSWORD)}" for name in UPSTREAM_USERS.values())
    with (
        serving(authorization_env(tmp)) as auth,
        serving(embedded_env(tmp / "upstream", users, MCPGATE_AUDIT_LOG=str(audit))) as upstream,
    ):
        entry = {"url": upstream.url, "auth": {"type": "user_oauth", "label": "the test upstream"}}
        config = write_config(tmp / "servers-up.json", {SERVER: entry})
        env = rs_vault_env(tmp, auth.base, MCPGATE_OAUTH_AUDIENCE=auth.base + "/mcp", MCPGATE_CONFIG=config)
        with serving(env) as gateway:
            tokens = {user: gateway_token(auth.base, user) for user in UPSTREAM_USERS}
            yield Site(gateway, audit, tokens)


async def echo(site: Site, user: str) -> str:
    url = f"{site.gateway.base}/servers/{SERVER}/mcp"
    headers = {"Authorization": f"Bearer {site.tokens[user]}"}
    with anyio.fail_after(SDK_GUARD):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=SDK_GUARD)) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):
            result = await client.call_tool("echo", {"message": user})
            assert not result.is_error, result
            block = result.content[0]
            assert isinstance(block, types.TextContent)
            return block.text


def asked_to_sign_in(site: Site, user: str) -> bool:
    answer = site.initialize(user)
    if "error" not in answer:
        return False
    assert answer["error"]["code"] == -32042, answer
    return bool(answer["error"]["data"]["elicitations"][0]["url"] == site.page)


def sign_in_upstream(site: Site, user: str) -> None:
    """`user`'s browser: the upstream's page, signed in to the gateway through its authorization server (and back
    to that page), then signed in to the upstream through the upstream's own pages."""
    http = requests.Session()
    first = http.get(site.page, timeout=30).text
    assert "action='/vault/signin'" in first and f"value='/vault/oauth/{SERVER}'" in first, first
    back = http.get(rs_callback(http, site.gateway.base, user, back=f"/vault/oauth/{SERVER}"), allow_redirects=False)
    assert back.status_code == 303 and back.headers["location"] == f"/vault/oauth/{SERVER}", back.text
    page = http.get(site.page, timeout=30).text
    assert "not signed in" in page, page
    csrf = CSRF.search(page)
    assert csrf
    start = http.post(site.page, data={"csrf_token": csrf.group(1), "action": "signin"}, allow_redirects=False)
    assert start.status_code == 303, start.text
    outcome = Browser(UPSTREAM_USERS[user], PASSWORD).visit(start.headers["location"], stop_at=site.page + "/callback")
    assert outcome.url.startswith(site.page + "/callback?"), outcome.describe()
    done = http.get(outcome.url, timeout=60)
    assert done.status_code == 200 and "Signed in" in done.text, done.text


def test_each_user_signs_in_upstream_from_the_resource_server_page_and_their_calls_carry_their_own_token(
    site: Site,
) -> None:
    for user in UPSTREAM_USERS:
        assert asked_to_sign_in(site, user)
    sign_in_upstream(site, "alice")
    assert anyio.run(echo, site, "alice") == "alice"
    wait_for(lambda: len(site.upstream_principals()) >= 1, timeout=20, what="the upstream's audit line")
    (first,) = site.upstream_principals()
    assert first.endswith("up-alice"), first
    assert asked_to_sign_in(site, "bob")  # alice's upstream sign-in is alice's
    sign_in_upstream(site, "bob")
    assert anyio.run(echo, site, "bob") == "bob"
    wait_for(lambda: len(site.upstream_principals()) >= 2, timeout=20, what="the upstream's audit line")
    assert site.upstream_principals()[1].endswith("up-bob"), site.upstream_principals()
    log = site.gateway.log()
    assert "access_token" not in log and "Bearer ey" not in log
