"""Issue 20, finding 8: a registration flood. One address filled MCPGATE_OAUTH_CLIENT_LIMIT in minutes and /register
then refused everyone for a day. Now each address may register MCPGATE_OAUTH_REGISTER_LIMIT times a minute (429
past it; X-Forwarded-For from a client that is no listed proxy changes nothing), and a full table forgets its
oldest registration never used instead of refusing; a client a user signed in with is never forgotten. The table
rule runs against both storages (SQLite, and Redis started for the test); each loopback source address
(127.0.0.0/8) is another client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.browser import Browser
from tests.support import Gateway, serving
from tests.support.fleet import redis_server
from tests.support.oauth import embedded_env
from tests.support.security import PASSWORD, USER, USERS, authorize_url, public_client, register

CALLBACK = "http://127.0.0.1:47313/callback"  # never fetched: the browser stops there


def new_client(gw: Gateway, source: str = "127.0.0.1") -> str:
    reply = register(gw.port, public_client(CALLBACK), source=source)
    assert reply.status == 201, reply
    return str(reply.json()["client_id"])


def known(gw: Gateway, client_id: str) -> bool:
    """Whether /authorize knows the client (its sign-in page) or not (the error page naming invalid_client)."""
    reply = requests.get(authorize_url(gw.port, client_id, CALLBACK), allow_redirects=False, timeout=30)
    assert reply.status_code in (200, 400), (reply.status_code, reply.text[:300])
    if reply.status_code == 400:
        assert "invalid_client" in reply.text, reply.text[:300]
    return reply.status_code == 200


def sign_in(gw: Gateway, browser: Browser, client_id: str) -> None:
    """A user signs in with the client and approves it: it got a code, it is used."""
    outcome = browser.visit(authorize_url(gw.port, client_id, CALLBACK), stop_at=CALLBACK)
    assert outcome.url.startswith(CALLBACK + "?") and outcome.params.get("code"), outcome.describe()


def test_registrations_are_limited_per_address(tmp_path: Path) -> None:
    with serving(embedded_env(tmp_path, USERS, MCPGATE_OAUTH_REGISTER_LIMIT="3")) as gw:
        for _ in range(3):
            new_client(gw, source="127.0.0.3")
        refused = register(gw.port, public_client(CALLBACK), source="127.0.0.3")
        assert refused.status == 429, refused
        assert int(refused.headers["retry-after"]) >= 1 and refused.json()["error"] == "temporarily_unavailable"
        # the client's own X-Forwarded-For is not believed (no MCPGATE_FORWARDED_FOR_PROXIES)
        spoofed = register(gw.port, public_client(CALLBACK), source="127.0.0.3", X_Forwarded_For="198.51.100.7")
        assert spoofed.status == 429, spoofed
        new_client(gw, source="127.0.0.4")  # another address is not held back


@pytest.fixture(params=["sqlite", "redis"])
def full_table(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway keeping at most 3 clients, its state in SQLite or in a Redis of its own."""
    env = embedded_env(tmp_path, USERS, MCPGATE_OAUTH_CLIENT_LIMIT="3", MCPGATE_OAUTH_REGISTER_LIMIT="1000")
    with contextlib.ExitStack() as stack:
        if request.param == "redis":
            env["REDIS_URL"] = stack.enter_context(redis_server())
        yield stack.enter_context(serving(env))


def test_a_full_table_forgets_its_oldest_unused_registration(full_table: Gateway) -> None:
    gw, browser = full_table, Browser(USER, PASSWORD)
    used = new_client(gw)
    sign_in(gw, browser, used)
    oldest, older = new_client(gw), new_client(gw)  # the table is full now
    newer = new_client(gw)  # room made: the oldest never used is forgotten
    assert not known(gw, oldest) and known(gw, older) and known(gw, newer) and known(gw, used)
    newest = new_client(gw)
    assert not known(gw, older) and known(gw, newer) and known(gw, newest)
    sign_in(gw, browser, used)  # the used one is never forgotten
    sign_in(gw, browser, newer)
    sign_in(gw, browser, newest)
    full = register(gw.port, public_client(CALLBACK))  # every client kept was used: only now refused
    assert full.status == 503 and full.json()["error"] == "temporarily_unavailable", full
    assert known(gw, used) and known(gw, newer) and known(gw, newest)
