"""Per-user credentials stay their user's (issue 26), through gunicorn in embedded OAuth mode with the debug log and
/metrics on: a principal's child never gets another principal's value (interleaved calls of two users in both
eras; a sealed value copied into another principal's row does not open there), no value appears in any log line,
/metrics, /healthz or error body of the run, and a missing or wrong MCPGATE_VAULT_KEY stops the start with one
line. The child (tests/fixtures/slot_echo_server.py) answers with digests of what it was given, so the values
never travel back through the gateway's log."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import HEADERS, Gateway, call, gunicorn_refusal, init_body, serving
from tests.support.vault import SDK_GUARD, VaultPage, access_token, url_of, vault_env, vault_key

VALUES = {user: f"{user}-{secrets.token_hex(12)}" for user in ("alice", "bob")}
BODIES: list[str] = []  # every error body the run got


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, dict[str, str], Path, str]]:
    tmp = tmp_path_factory.mktemp("vault-isolation")
    key = vault_key()
    env = vault_env(tmp, key, MCPGATE_LOG_LEVEL="debug", MCPGATE_METRICS="true")
    with serving(env) as gw:
        tokens = {user: access_token(gw, user) for user in VALUES}
        for user, value in VALUES.items():
            VaultPage(gw, user).set(value)
        yield gw, tokens, tmp, key


async def digests(gw: Gateway, token: str, mode: str, calls: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    out = []
    with anyio.fail_after(SDK_GUARD):
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=SDK_GUARD)) as http,
            Client(streamable_http_client(url_of(gw), http_client=http), mode=mode) as client,
        ):
            for _ in range(calls):
                result = await client.call_tool("digest", {})
                block = result.content[0]
                assert isinstance(block, types.TextContent)
                out.append(block.text)
    return out


def test_a_principals_children_never_get_another_principals_value(run: Any) -> None:
    gw, tokens, tmp, _key = run
    seen: dict[tuple[str, str, int], list[str]] = {}

    async def one(user: str, mode: str, n: int) -> None:
        seen[(user, mode, n)] = await digests(gw, tokens[user], mode, 6)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for n in range(2):
                for user in VALUES:
                    for mode in ("legacy", "2026-07-28"):
                        group.start_soon(one, user, mode, n)

    anyio.run(main)
    for (user, _mode, _n), answers in seen.items():
        assert set(answers) == {f"{digest(VALUES[user])}|{digest(VALUES[user])}"}, (user, answers)
    # alice's sealed value copied into bob's row (a store written behind the gateway's back): it does not open
    # for bob, so bob's next child is refused (the elicitation), never started with alice's value
    with sqlite3.connect(tmp / "state" / "vault.sqlite3") as db:
        rows = dict(db.execute("SELECT principal, value FROM slots WHERE slot = 'echo_token'").fetchall())
        (alice,) = [p for p in rows if p.endswith("#user:alice")]
        (bob,) = [p for p in rows if p.endswith("#user:bob")]
        db.execute("UPDATE slots SET value = ? WHERE principal = ?", (rows[alice], bob))
    headers = {**HEADERS, "Authorization": f"Bearer {tokens['bob']}"}
    reply = gw.request("POST", "/servers/echo/mcp", body=init_body(), headers=headers)
    BODIES.append(reply.body.decode())
    assert reply.json()["error"]["code"] == -32042, reply
    assert "does not open" in gw.log()
    VaultPage(gw, "bob").set(VALUES["bob"])  # bob's own value again, for what follows


def test_no_value_reaches_a_log_line_metrics_healthz_or_an_error_body(run: Any) -> None:
    gw, tokens, _tmp, key = run
    headers = {**HEADERS, "Authorization": f"Bearer {tokens['alice']}"}
    opened = gw.request("POST", "/servers/echo/mcp", body=init_body(), headers=headers)
    session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    failed = gw.request("POST", "/servers/echo/mcp", body=call("no_such_tool", {}), headers=session)
    BODIES.append(failed.body.decode())
    forged = VaultPage(gw, "alice").post(csrf_token="x", slot="echo_token", action="set", value=VALUES["alice"])
    BODIES.append(forged.text)
    too_long = VaultPage(gw, "alice").post(csrf_token="x", slot="nope", action="set", value=VALUES["bob"])
    BODIES.append(too_long.text)
    scraped = [gw.request("GET", path, headers=headers).body.decode() for path in ("/metrics", "/healthz")]
    assert "mcpgate_" in scraped[0], scraped[0][:200]
    page = VaultPage(gw, "alice").page()
    everything = "\n".join([gw.log(), *scraped, *BODIES, page])
    for value in [*VALUES.values(), key]:
        assert value not in everything, "a secret value reached a log line, /metrics, /healthz or a body"
    assert "--token=${user_secret:echo_token}" in gw.log()  # the debug log shows the placeholder


def test_a_missing_or_wrong_vault_key_stops_the_start_with_one_line(run: Any, tmp_path: Path) -> None:
    _gw, _tokens, tmp, key = run
    env = vault_env(tmp, vault_key())  # the same state, another key
    env = {name: value.replace("{port}", "1") for name, value in env.items()}
    wrong = gunicorn_refusal(env, "-b", "127.0.0.1:0")
    assert "MCPGATE_VAULT_KEY does not open the vault" in wrong and env["MCPGATE_VAULT_KEY"] not in wrong
    assert key not in wrong
    env.pop("MCPGATE_VAULT_KEY")
    missing = gunicorn_refusal(env, "-b", "127.0.0.1:0")
    assert "set MCPGATE_VAULT_KEY" in missing, missing
