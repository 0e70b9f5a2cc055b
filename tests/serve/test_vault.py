"""Per-user credentials (issue 26) through gunicorn in embedded OAuth mode: three users, each signed in through the
real sign-in pages, fill their slot on the vault's page; a stdio child (tests/fixtures/slot_echo_server.py) echoes
the value it was started with (env and argv); the official SDK calls it in both eras, interleaved. A changed slot
stops the holders (their in-flight call gets an error naming the reason) and reaches new calls; an empty slot is
answered with a URL-mode elicitation (2025: the -32042 error; 2026-07-28: input_required) and the retry succeeds.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
import requests
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from tests.support import (
    HEADERS,
    Gateway,
    init_body,
    modern_body,
    modern_headers,
    reply_message,
    serving,
    wait_for,
)
from tests.support.fleet import redis_server
from tests.support.vault import (
    SDK_GUARD,
    SERVER,
    USERS,
    VaultPage,
    access_token,
    echo,
    echo_once,
    url_of,
    vault_env,
    vault_key,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, dict[str, str], dict[str, VaultPage]]]:
    tmp = tmp_path_factory.mktemp("vault")
    with serving(vault_env(tmp, MCPGATE_LOG_LEVEL="debug")) as gw:
        tokens = {user: access_token(gw, user) for user in USERS}
        pages = {user: VaultPage(gw, user) for user in USERS}
        yield gw, tokens, pages


def test_three_users_in_interleaved_sessions_of_both_eras_each_see_only_their_own_value(site: Any) -> None:
    gw, tokens, pages = site
    values = {user: f"{user}-{secrets.token_hex(8)}" for user in USERS}
    for user in USERS:
        pages[user].set(values[user])
    seen: dict[tuple[str, str], list[str]] = {}

    async def run(user: str, mode: str) -> None:
        seen[(user, mode)] = await echo(url_of(gw), tokens[user], mode, calls=8)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _round in range(2):
                for user in USERS:
                    for mode in ("legacy", "2026-07-28"):
                        group.start_soon(run, user, mode)

    anyio.run(main)
    pids: dict[str, set[str]] = {user: set() for user in USERS}
    for (user, _mode), answers in seen.items():
        for answer in answers:
            env_value, arg_value, pid = answer.split("|")
            assert (env_value, arg_value) == (values[user], values[user]), (user, answer)
            pids[user].add(pid)
    # the pool groups children by principal and each 2025 session has its own: no process served two users
    assert not (pids["alice"] & pids["bob"] or pids["alice"] & pids["carol"] or pids["bob"] & pids["carol"]), pids
    assert len(seen) == 6 and all(len(answers) == 8 for answers in seen.values())
    assert not [value for value in values.values() if value in pages["alice"].page()], "a value was shown back"


def test_a_changed_slot_stops_its_holders_and_reaches_new_calls_others_untouched(site: Any) -> None:
    gw, tokens, pages = site
    pages["alice"].set("alice-steady")
    pages["bob"].set("bob-old")
    alice_pid = echo_once(gw, tokens["alice"], "2026-07-28").split("|")[2]
    assert echo_once(gw, tokens["bob"], "2026-07-28").startswith("bob-old|bob-old|")
    errors: list[str] = []

    async def held(mode: str) -> None:
        headers = {"Authorization": f"Bearer {tokens['bob']}"}
        with anyio.fail_after(SDK_GUARD):
            async with (
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=SDK_GUARD)) as http,
                Client(streamable_http_client(url_of(gw), http_client=http), mode=mode) as client,
            ):
                try:
                    result = await client.call_tool("hold", {"seconds": 45})
                    errors.append(f"answered: {result}")
                except MCPError as exc:  # the SDK raises the JSON-RPC error
                    errors.append(str(exc))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(held, "legacy")
            group.start_soon(held, "2026-07-28")
            # both calls are in flight once bob's children are busy: change the slot from another thread
            await anyio.sleep(0)
            await anyio.to_thread.run_sync(lambda: wait_for(lambda: bob_busy(gw), 30, "bob's calls in flight"))
            await anyio.to_thread.run_sync(lambda: pages["bob"].set("bob-new"))

    anyio.run(main)
    assert len(errors) == 2 and all("credential slot 'echo_token' was changed" in e for e in errors), errors
    wait_for(lambda: echo_once(gw, tokens["bob"], "2026-07-28").startswith("bob-new|bob-new|"), 2.0, "the new value")
    assert echo_once(gw, tokens["bob"], "legacy").startswith("bob-new|bob-new|")
    assert echo_once(gw, tokens["alice"], "2026-07-28").split("|")[2] == alice_pid  # alice's child untouched


def bob_busy(gw: Gateway) -> bool:
    """Whether two `hold` calls are in flight (the gateway's log names each child's incoming call at debug)."""
    return gw.log().count('"name":"hold"') >= 2 or gw.log().count('"name": "hold"') >= 2


def test_the_page_refuses_a_form_without_its_csrf_token_and_never_shows_a_value(site: Any) -> None:
    gw, _tokens, pages = site
    page = pages["carol"]
    forged = page.post(csrf_token="forged", slot="echo_token", action="set", value="planted")
    assert forged.status_code == 400 and "expired" in forged.text
    other = requests.post(gw.base + "/vault", data={"slot": "echo_token", "action": "set", "value": "x"}, timeout=30)
    assert other.status_code == 400  # another browser (no session, no token)
    for bad in ("", "x" * 8193, "nul\x00inside"):  # empty, past MCPGATE_VAULT_VALUE_BYTES, no env value can hold it
        refused = page.post(csrf_token=page.csrf(), slot="echo_token", action="set", value=bad)
        assert refused.status_code == 400 and "MCPGATE_VAULT_VALUE_BYTES" in refused.text
    unknown = page.post(csrf_token=page.csrf(), slot="not_declared", action="set", value="x")
    assert unknown.status_code == 400 and "No such credential" in unknown.text
    page.set("carol-visible?")
    text = page.page()
    assert "carol-visible?" not in text and "set 20" in text, text
    page.delete()
    assert "empty" in page.page()


def test_an_empty_slot_is_a_url_elicitation_and_the_retry_after_filling_it_succeeds(site: Any) -> None:
    gw, tokens, pages = site
    page = pages["carol"]
    page.delete() if "set 20" in page.page() else None
    headers = {**HEADERS, "Authorization": f"Bearer {tokens['carol']}"}
    refused = gw.request("POST", f"/servers/{SERVER}/mcp", body=init_body(), headers=headers).json()
    assert refused["id"] == 1 and refused["error"]["code"] == -32042, refused
    (elicitation,) = refused["error"]["data"]["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["url"] == gw.base + "/vault", elicitation
    # 2026-07-28 without URL elicitation declared, or a request that cannot be answered input_required: an error
    # naming the page (-32042 is not a 2026-07-28 code)
    calls: list[tuple[str, dict[str, Any], str | None]] = [
        ("tools/call", {"name": "secret", "arguments": {}}, "secret"),
        ("tools/list", {}, None),
    ]
    for method, params, name in calls:
        body = modern_body(7, method, params)
        sent = {**modern_headers(method, name), "Authorization": f"Bearer {tokens['carol']}"}
        answer = reply_message(gw.request("POST", f"/servers/{SERVER}/mcp", body=body, headers=sent))
        assert answer["id"] == 7 and answer["error"]["code"] == -32603, answer
        assert gw.base + "/vault" in answer["error"]["message"] and "result" not in answer
    asked: list[str] = []

    async def fill_it(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams) and params.url == gw.base + "/vault"
        asked.append(params.url)
        await anyio.to_thread.run_sync(lambda: page.set("carol-filled"))
        return types.ElicitResult(action="accept")

    answers = anyio.run(lambda: echo(url_of(gw), tokens["carol"], "2026-07-28", elicitation_callback=fill_it))
    assert asked == [gw.base + "/vault"] and answers[0].startswith("carol-filled|carol-filled|"), answers
    assert echo_once(gw, tokens["carol"], "legacy").startswith("carol-filled|")


# -- a fleet: two instances on one Redis --------------------------------------------------------------------------


def modern_secret(gw: Gateway, host: str, token: str) -> str:
    """The echo tool's answer to one 2026-07-28 call at `gw` (the fleet's public Host)."""
    body = modern_body(secrets.randbelow(10**9), "tools/call", {"name": "secret", "arguments": {}})
    headers = {**modern_headers("tools/call", "secret"), "Authorization": f"Bearer {token}", "Host": host}
    answer = reply_message(gw.request("POST", f"/servers/{SERVER}/mcp", body=body, headers=headers))
    return str(answer["result"]["content"][0]["text"])


def test_in_a_fleet_a_slot_set_on_one_instance_stops_the_holders_on_another(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    key, started = vault_key(), []
    try:
        with redis_server() as url:
            first = Gateway(vault_env(tmp_path_factory.mktemp("one"), key, REDIS_URL=url))
            started.append(first)
            first.wait_ready()
            second = Gateway(
                vault_env(tmp_path_factory.mktemp("two"), key, REDIS_URL=url, MCPGATE_PUBLIC_URL=first.base)
            )
            started.append(second)
            second.wait_ready()
            host = f"127.0.0.1:{first.port}"
            token, page = access_token(first, "alice"), VaultPage(first, "alice")
            page.set("fleet-one")
            old = modern_secret(second, host, token)
            assert old.startswith("fleet-one|fleet-one|"), old
            page.set("fleet-two")  # on the first instance: the second's child holds the old value
            wait_for(lambda: "child echo/pool-1 stopped" in second.log(), 2.0, "the second instance's holder stopped")
            assert modern_secret(second, host, token).startswith("fleet-two|fleet-two|")
    finally:
        for gw in started:
            gw.stop()
