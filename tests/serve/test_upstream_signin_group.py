"""Per-user OAuth to a remote upstream as a member of a group (issue 26): one endpoint, /groups/team/mcp, for a
remote server with `"auth": {"type": "user_oauth"}` (a real mcpgate in embedded OAuth mode, as in
tests/serve/test_upstream_signin.py) and the stdio demo server. Each principal's hub gives the remote member that
principal's own upstream session: every call of `up__echo` through the group carries its caller's own upstream
token (read at the upstream, whose audit log names the principal of every tools/call), in both eras, from
interleaved sessions of two users. A user who has not signed in to the member is answered with the URL-mode
elicitation naming the member's sign-in page (2025: the initialize's -32042; 2026-07-28: input_required), and the
retry after signing in succeeds; no member child is left running for the refused attempt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anyio
import mcp.types as types
import pytest

from tests.serve.test_upstream_signin import PASSWORD, SERVER, USERS, Site, _users, vault_session
from tests.support import HEADERS, init_body, modern_body, modern_headers, reply_message, serving, wait_for
from tests.support.gateway import pid_gone
from tests.support.http import DEMO_ENTRY, write_config
from tests.support.oauth import embedded_env, sign_in
from tests.support.vault import interleaved, tool_texts, vault_key

GROUP = "team"
PATH = f"/groups/{GROUP}/mcp"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("upstream-signin-group")
    audit = tmp / "upstream-audit.jsonl"
    upstream_env = embedded_env(tmp / "upstream-state", _users(list(USERS.values())), MCPGATE_AUDIT_LOG=str(audit))
    with serving(upstream_env) as upstream:
        servers = {SERVER: {"url": upstream.url, "auth": {"type": "user_oauth", "label": "the test upstream"}}}
        servers["demo"] = DEMO_ENTRY
        config = write_config(tmp / "servers.json", servers)
        with open(config) as file:  # the group beside the servers (write_config writes mcpServers alone)
            data = json.load(file)
        data["groups"] = {GROUP: {"servers": ["demo", SERVER]}}  # the demo starts first, then the remote refuses
        with open(config, "w") as file:
            json.dump(data, file)
        key = vault_key()
        env = embedded_env(tmp / "state", _users(list(USERS)), MCPGATE_CONFIG=config, MCPGATE_VAULT_KEY=key)
        env["MCPGATE_VAULT_POLL"] = "0.2"
        with serving(env) as gateway:
            resource = gateway.base + PATH
            tokens = {user: str(sign_in(gateway.base, user, PASSWORD, resource)["access_token"]) for user in USERS}
            browsers = {user: vault_session(gateway, user) for user in USERS}
            yield Site(upstream, gateway, audit, tokens, browsers, tmp / "state", key)


def initialize(site: Site, user: str) -> dict[str, Any]:
    headers = {**HEADERS, "Authorization": f"Bearer {site.tokens[user]}"}
    return site.gateway.request("POST", PATH, body=init_body(), headers=headers, timeout=60).json()  # type: ignore[no-any-return]


async def group_echo(site: Site, user: str, mode: str, calls: int = 1, **options: Any) -> list[str]:
    """The answers of `calls` calls of the remote member's echo (up__echo) through the group, in one SDK client."""

    def message(n: int) -> dict[str, Any]:
        return {"message": f"{user}-{n}"}

    return await tool_texts(
        site.gateway.base + PATH, site.tokens[user], mode, f"{SERVER}__echo", message, calls, **options
    )


def demo_pids(site: Site) -> list[int]:
    """The pid of every child of the group's demo member the gateway's log shows started."""
    return [int(pid) for pid in re.findall(rf"child\[{GROUP}/[^/\]]+/demo\] started pid=(\d+)", site.gateway.log())]


def test_a_user_not_signed_in_to_the_member_is_sent_to_its_page_and_the_retry_succeeds(site: Site) -> None:
    refused = initialize(site, "bob")
    assert refused.get("error", {}).get("code") == -32042, refused
    (elicitation,) = refused["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["url"] == site.page, elicitation
    # 2026-07-28: without URL elicitation declared, an error naming the page; with it, input_required (the SDK's)
    body = modern_body(7, "tools/call", {"name": f"{SERVER}__echo", "arguments": {"message": "x"}})
    headers = {**modern_headers("tools/call", f"{SERVER}__echo"), "Authorization": f"Bearer {site.tokens['bob']}"}
    answer = reply_message(site.gateway.request("POST", PATH, body=body, headers=headers, timeout=60))
    assert "result" not in answer and site.page in answer["error"]["message"], answer
    # the demo member each refused attempt had started is stopped with it: no child left running
    started = demo_pids(site)
    assert len(started) == 2, started
    wait_for(lambda: all(pid_gone(pid) for pid in started), timeout=10, what="the refused attempts' demo children gone")
    asked: list[str] = []

    async def sign_in_upstream(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        asked.append(params.url)
        await anyio.to_thread.run_sync(site.sign_in_upstream, "bob")
        return types.ElicitResult(action="accept")

    answers = anyio.run(lambda: group_echo(site, "bob", "2026-07-28", elicitation_callback=sign_in_upstream))
    assert asked == [site.page] and answers == ["bob-0"], (asked, answers)
    assert anyio.run(group_echo, site, "bob", "legacy") == ["bob-0"]  # and the 2025 initialize now succeeds


def test_each_principals_upstream_session_in_the_group_carries_their_own_token(site: Site) -> None:
    for user in USERS:
        if initialize(site, user).get("error"):
            site.sign_in_upstream(user)
    principals: dict[str, str] = {}
    for user in USERS:  # each user's upstream principal, as the upstream saw it
        before = len(site.upstream_principals())
        assert anyio.run(group_echo, site, user, "legacy") == [f"{user}-0"]
        wait_for(lambda n=before: len(site.upstream_principals()) > n, timeout=20, what="the upstream's audit line")
        principals[user] = site.upstream_principals()[before]
    assert principals["alice"] != principals["bob"], principals
    assert all(USERS[user] in principal for user, principal in principals.items()), principals
    before = len(site.upstream_principals())
    seen = interleaved(lambda user, mode: group_echo(site, user, mode, calls=5), USERS)
    for (user, _mode), answers in seen.items():
        assert answers == [f"{user}-{n}" for n in range(5)], answers
    wait_for(lambda: len(site.upstream_principals()) >= before + 20, timeout=30, what="20 audit lines upstream")
    counted = site.upstream_principals()[before:]
    assert counted.count(principals["alice"]) == 10 and counted.count(principals["bob"]) == 10, counted
