"""Per-user credentials in a fleet (issue 26): three instances on one Redis behind the deploy recipe's HAProxy
(sticky routing), one public URL, the vault in Redis. Three users signed in through the balancer fill their slot on
the vault's page (whichever instance serves it) and call the echo child in interleaved SDK sessions of both eras
through the balancer: no call sees another user's value; a slot changed through the page reaches every new call of
that user within the issue's 2 s, whichever instance answers it (the other instances' holders are stopped by the
Redis generation)."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from tests.support import Gateway, free_port, wait_for
from tests.support.fleet import RECIPE, Balancer, haproxy, instances
from tests.support.vault import USERS, VaultPage, access_token, echo, url_of, vault_env, vault_key

CALLS = 25  # per client: 3 users x 2 eras x 2 clients x 25 = 300 calls


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Balancer, list[Gateway]]]:
    port = free_port()
    common = vault_env(
        tmp_path_factory.mktemp("vault-fleet"), vault_key(), MCPGATE_PUBLIC_URL=f"http://127.0.0.1:{port}"
    )
    with instances(secrets.token_urlsafe(32), **common) as (_url, start):
        started = {f"i{n}": start(f"i{n}") for n in (1, 2, 3)}
        env = {"HAPROXY_BIND": "127.0.0.1:{port}", "HAPROXY_ADMIN": "{admin}", "MCPGATE_ROUTING": "sticky"}
        env.update({f"MCPGATE_I{n}": f"127.0.0.1:{started[f'i{n}'].port}" for n in (1, 2, 3)})
        env["MCPGATE_I4"] = f"127.0.0.1:{free_port()}"  # nobody there
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
