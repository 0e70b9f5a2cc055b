"""Per-user credentials in a fleet (issue 26): three instances on one Redis behind the deploy recipe's HAProxy
(sticky routing), one public URL, the vault in Redis. Three users signed in through the balancer fill their slot on
the vault's page (whichever instance serves it) and call the echo child through the balancer: 300 calls in
interleaved SDK sessions of both eras, then RAW_CALLS more from concurrent raw-HTTP clients (2025 sessions and
2026-07-28 requests, every user in both): no call sees another user's value. A slot changed through the page
reaches every new call of that user within the issue's 2 s, whichever instance answers it (the other instances'
holders are stopped by the Redis generation). GET /admin/vault counts the slot's three principals and shows one
principal's slot when asked by name, never a value. At the end no value is in any instance's log, HAProxy's log,
/metrics, /healthz or any error body."""

from __future__ import annotations

import functools
import http.client
import json
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.support import Gateway, modern_body, modern_headers, wait_for
from tests.support.fleet import RECIPE, Balancer, haproxy, held_port, instances
from tests.support.http import HEADERS, init_body
from tests.support.vault import SERVER, USERS, VaultPage, access_token, echo, url_of, vault_env, vault_key

CALLS = 25  # per client: 3 users x 2 eras x 2 clients x 25 = 300 calls
RAW_CLIENTS = 4  # raw-HTTP clients per user and era (24 at once)
RAW_CALLS = 24 * 405  # the raw burst's calls: with the SDK's 300 and the 15 after the change, 10,035 in all
ADMIN = "vault-fleet-admin-token-5d1e"
PATH = f"/servers/{SERVER}/mcp"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Balancer, list[Gateway]]]:
    with held_port() as port, held_port() as dead:
        common = vault_env(
            tmp_path_factory.mktemp("vault-fleet"),
            vault_key(),
            MCPGATE_PUBLIC_URL=f"http://127.0.0.1:{port}",
            MCPGATE_ADMIN_TOKEN=ADMIN,
            MCPGATE_METRICS="true",
        )
        with instances(secrets.token_urlsafe(32), **common) as (_url, start):
            started = {f"i{n}": start(f"i{n}") for n in (1, 2, 3)}
            env = {"HAPROXY_BIND": "127.0.0.1:{port}", "HAPROXY_ADMIN": "{admin}", "MCPGATE_ROUTING": "sticky"}
            env.update({f"MCPGATE_I{n}": f"127.0.0.1:{started[f'i{n}'].port}" for n in (1, 2, 3)})
            env["MCPGATE_I4"] = f"127.0.0.1:{dead}"  # nobody there
            with haproxy(RECIPE, env, port=port) as lb:
                up = {f"sticky/i{n}" for n in (1, 2, 3)}
                wait_for(
                    lambda: up <= {srv for srv, ok in lb.servers_up().items() if ok}, 30, "instances up behind haproxy"
                )
                yield lb, list(started.values())


def test_three_users_across_three_instances_each_see_only_their_own_value_and_a_change_reaches_all(
    fleet: tuple[Balancer, list[Gateway]],
) -> None:
    lb, gateways = fleet
    tokens = {user: access_token(lb, user) for user in USERS}
    pages = {user: VaultPage(lb, user) for user in USERS}
    values = {user: f"{user}-{secrets.token_hex(8)}" for user in USERS}
    for user in USERS:
        pages[user].set(values[user])
    seen: dict[tuple[str, str, int], list[str]] = {}

    async def one(user: str, mode: str, n: int) -> None:
        seen[(user, mode, n)] = await echo(url_of(lb), tokens[user], mode, calls=CALLS)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for n in range(2):
                for user in USERS:
                    for mode in ("legacy", "2026-07-28"):
                        group.start_soon(one, user, mode, n)

    anyio.run(main)
    wrong = [(user, a) for (user, _m, _n), answers in seen.items() for a in answers if not a.startswith(values[user])]
    assert not wrong and sum(len(a) for a in seen.values()) == 12 * CALLS, wrong[:3]
    answered, errors = raw_burst(lb, tokens)
    wrong = [(user, a) for user, answers in answered.items() for a in answers if not a.startswith(values[user] + "|")]
    assert not errors and not wrong and sum(map(len, answered.values())) == RAW_CALLS, (errors[:3], wrong[:3])
    admin_counts_without_values(lb, values)
    # bob's slot changed through whichever instance serves the page: every instance holding a child of bob's
    # (the pool keeps them; the 2025 sessions ended with their clients) stops it within the 2 s
    holders = [gw for gw in gateways if "#user:bob (pid" in gw.log()]
    assert holders
    pages["bob"].set("bob-changed")
    stopped = "the credential slot 'echo_token' was changed by its owner"
    wait_for(lambda: all(stopped in gw.log() for gw in holders), 2.0, "bob's children stopped on every instance")
    for mode in ("2026-07-28", "legacy"):
        answers: Any = anyio.run(functools.partial(echo, url_of(lb), tokens["bob"], mode, calls=6))
        assert all(answer.startswith("bob-changed|bob-changed|") for answer in answers), answers
    alice = anyio.run(lambda: echo(url_of(lb), tokens["alice"], "legacy", calls=3))
    assert all(answer.startswith(values["alice"]) for answer in alice), alice
    secrets_nowhere(lb, gateways, [*values.values(), "bob-changed"], errors)


class RawClient:
    """One user's raw-HTTP client through the balancer on a kept-alive connection: a 2025 session ("legacy") or
    2026-07-28 requests; `errors` holds the body of every reply that is not a tool's result."""

    def __init__(self, lb: Balancer, token: str, mode: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=60)
        self.headers = {**HEADERS, "Authorization": f"Bearer {token}"}
        self.mode, self.errors, self.next_id = mode, list[str](), 1
        if mode == "legacy":
            status, headers, _ = self.post(init_body(), self.headers)
            assert status == 200, status
            self.headers |= {"Mcp-Session-Id": headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert self.post(initialized, self.headers)[0] == 202

    def post(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, http.client.HTTPMessage, str]:
        self.conn.request("POST", PATH, json.dumps(body), headers)
        reply = self.conn.getresponse()
        return reply.status, reply.headers, reply.read().decode()

    def call(self) -> str | None:
        """The secret tool's text (None: an error, kept in `errors`)."""
        self.next_id += 1
        params = {"name": "secret", "arguments": {}}
        if self.mode == "legacy":
            body, headers = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call", "params": params}, {}
        else:
            body, headers = modern_body(self.next_id, "tools/call", params), modern_headers("tools/call", "secret")
        status, reply_headers, text = self.post(body, {**self.headers, **headers})
        data = text
        if reply_headers.get("content-type", "").startswith("text/event-stream"):  # the last event's data
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")][-1]
        message = json.loads(data) if status == 200 else {}
        result = message.get("result") or {}
        if status != 200 or "error" in message or result.get("isError"):
            self.errors.append(f"{status} {text}")
            return None
        return str(result["content"][0]["text"])


def raw_burst(lb: Balancer, tokens: dict[str, str]) -> tuple[dict[str, list[str]], list[str]]:
    """RAW_CALLS calls from RAW_CLIENTS raw clients per user and era at once: each user's answers, every error."""
    answered: dict[str, list[str]] = {user: [] for user in USERS}
    errors: list[str] = []
    clients = [(user, mode) for user in USERS for mode in ("legacy", "2026-07-28") for _ in range(RAW_CLIENTS)]
    each = RAW_CALLS // len(clients)

    def run(user: str, mode: str) -> None:
        client = RawClient(lb, tokens[user], mode)
        try:
            answers = [client.call() for _ in range(each)]
        finally:
            client.conn.close()
        answered[user].extend(answer for answer in answers if answer is not None)  # list.extend: atomic
        errors.extend(client.errors)

    started = time.monotonic()
    threads = [threading.Thread(target=run, args=client, daemon=True) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    elapsed = time.monotonic() - started
    print(f"raw burst: {RAW_CALLS} calls from {len(clients)} clients in {elapsed:.1f} s")  # the figure (pytest -s)
    return answered, errors


def admin_counts_without_values(lb: Balancer, values: dict[str, str]) -> None:
    """GET /admin/vault: the slot's three principals (no value, no principal); one principal's slot by name."""
    auth = {"Authorization": f"Bearer {ADMIN}"}
    reply = lb.request("GET", "/admin/vault", headers=auth)
    assert reply.status == 200, reply
    slot = reply.json()["servers"][SERVER]["echo_token"]
    assert slot["principals"] == len(USERS) and slot["first_set"] <= slot["last_set"], slot
    assert not any(value in reply.body.decode() or user in reply.body.decode() for user, value in values.items())
    one = lb.request("GET", f"/admin/vault?principal={lb.base}%23user:alice", headers=auth)
    assert one.status == 200 and one.json()["servers"][SERVER]["echo_token"]["set"] is True, one
    assert values["alice"] not in one.body.decode()
    nobody = lb.request("GET", "/admin/vault?principal=nobody", headers=auth).json()
    assert nobody["servers"][SERVER]["echo_token"] == {"label": "Echo token", "set": False}, nobody


def secrets_nowhere(lb: Balancer, gateways: list[Gateway], values: list[str], errors: list[str]) -> None:
    """No value in any instance's log, /metrics or /healthz, in HAProxy's log, or in any error body."""
    places = {"haproxy log": lb.log(), "error bodies": "\n".join(errors)}
    for gw in gateways:
        places[f"{gw.port} log"] = gw.log()
        places[f"{gw.port} /metrics"] = gw.request("GET", "/metrics").body.decode()
        places[f"{gw.port} /healthz"] = gw.request("GET", "/healthz").body.decode()
    assert "mcpgate_" in places[f"{gateways[0].port} /metrics"]
    leaked = [(where, value) for where, text in places.items() for value in values if value in text]
    assert not leaked, leaked
