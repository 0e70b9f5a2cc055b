"""The vault's page in resource-server mode (issue 26): the gateway checks tokens of an external authorization server,
and its page signs the browser in through that same server as an OAuth client (authorization code, PKCE S256, the
audience the MCP endpoint accepts as `resource`), checks the token as the MCP endpoint does, and keeps the
principal that user's MCP calls carry.

Two set-ups over real processes: a resource-server gateway whose authorization server is another mcpgate in
embedded mode (its login and consent pages, a client registered dynamically by the page; MCPGATE_OAUTH_AUDIENCE its
endpoint, the tokens' audience), and one whose authorization server is tests/fixtures/oidc_issuer.py (the page's
client preregistered; the tokens' audience the gateway's own). The slot is tests/fixtures/slot_echo_server.py's.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import pytest
import requests

from tests.support import HEADERS, Gateway, init_body, serving
from tests.support.oauth import mint_token, oidc_issuer
from tests.support.vault import (
    SERVER,
    RsVaultPage,
    authorization_env,
    echo,
    gateway_token,
    rs_callback,
    rs_vault_env,
    url_of,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Gateway]]:
    """(the authorization server: an embedded gateway, the resource-server gateway using it)."""
    tmp = tmp_path_factory.mktemp("vault-rs")
    with serving(authorization_env(tmp)) as auth:
        env = rs_vault_env(tmp, auth.base, MCPGATE_OAUTH_AUDIENCE=auth.base + "/mcp")
        with serving(env, behind=True) as gw:
            yield auth, gw


@pytest.fixture(scope="module")
def fixture_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Gateway]]:
    """(the oidc_issuer fixture signing in alice, a resource-server gateway using it with a preregistered client)."""
    tmp = tmp_path_factory.mktemp("vault-rs-fixture")
    with oidc_issuer(user="alice") as issuer:
        env = rs_vault_env(
            tmp, issuer, MCPGATE_VAULT_CLIENT_ID="test-client", MCPGATE_VAULT_CLIENT_SECRET="test-secret"
        )
        with serving(env, behind=True) as gw:
            yield issuer, gw


def initialize(gw: Gateway, token: str) -> dict[str, Any]:
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    return gw.request("POST", f"/servers/{SERVER}/mcp", body=init_body(), headers=headers).json()  # type: ignore[no-any-return]


def asks_for_the_page(gw: Gateway, token: str) -> bool:
    """Whether the token's initialize is answered with the URL elicitation of the vault's page (its slot empty)."""
    answer = initialize(gw, token)
    if "error" not in answer:
        return False
    assert answer["error"]["code"] == -32042, answer
    (elicitation,) = answer["error"]["data"]["elicitations"]
    assert elicitation["url"] == gw.base + "/vault", elicitation
    return True


def echoed(gw: Gateway, token: str, mode: str) -> str:
    env_value, arg_value, _pid = anyio.run(lambda: echo(url_of(gw), token, mode))[0].split("|")
    assert env_value == arg_value
    return str(env_value)


def test_a_user_signed_in_on_the_page_fills_the_slot_their_own_mcp_calls_get(site: Any) -> None:
    auth, gw = site
    tokens = {user: gateway_token(auth.base, user) for user in ("alice", "bob")}
    for token in tokens.values():
        assert asks_for_the_page(gw, token)
    alice = RsVaultPage(gw, "alice")
    assert "Signed in as user:alice" in alice.page() and "empty" in alice.page()
    values = {user: f"{user}-{secrets.token_hex(8)}" for user in ("alice", "bob")}
    alice.set(values["alice"])
    for mode in ("legacy", "2026-07-28"):
        assert echoed(gw, tokens["alice"], mode) == values["alice"]
    assert asks_for_the_page(gw, tokens["bob"])  # alice's value is alice's: bob's call still asks for his own
    bob = RsVaultPage(gw, "bob")
    bob.set(values["bob"])
    for mode in ("legacy", "2026-07-28"):
        assert echoed(gw, tokens["bob"], mode) == values["bob"]
        assert echoed(gw, tokens["alice"], mode) == values["alice"]
    alice.delete()
    assert asks_for_the_page(gw, tokens["alice"]) and echoed(gw, tokens["bob"], "legacy") == values["bob"]
    log = gw.log()
    assert not any(value in log for value in values.values())


def test_the_page_principal_is_the_mcp_principal_with_the_fixture_issuer(fixture_site: Any) -> None:
    issuer, gw = fixture_site
    page = RsVaultPage(gw, "alice")  # the fixture signs in alice whoever types
    value = f"fixture-{secrets.token_hex(8)}"
    page.set(value)
    audience = url_of(gw)

    def token(sub: str) -> str:
        return mint_token(issuer, {"sub": sub, "aud": audience, "scope": "mcp"})

    assert echoed(gw, token("alice"), "legacy") == value  # the page's principal: issuer#alice
    assert asks_for_the_page(gw, token("bob"))  # another subject of the same issuer
    assert asks_for_the_page(gw, token("alice ")) and asks_for_the_page(gw, token("Alice"))
    page.delete()


def with_param(url: str, name: str, value: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query[name] = value
    return urlunsplit(parts._replace(query=urlencode(query)))


def test_a_token_for_another_audience_is_refused_at_the_callback(fixture_site: Any) -> None:
    _issuer, gw = fixture_site
    http = requests.Session()
    other = "http://127.0.0.1:9/mcp"
    callback = rs_callback(http, gw.base, "alice", tamper=lambda url: with_param(url, "resource", other))
    refused = http.get(callback, allow_redirects=False, timeout=60)
    assert refused.status_code == 400 and "another audience" in refused.text, refused.text
    assert "Signed in as" not in http.get(gw.base + "/vault", timeout=30).text
    # the same browser, the resource untouched: signed in
    assert http.get(rs_callback(http, gw.base, "alice"), allow_redirects=False, timeout=60).status_code == 303
    assert "Signed in as alice" in http.get(gw.base + "/vault", timeout=30).text


def test_the_callback_is_bound_to_its_browser_and_used_once(site: Any) -> None:
    _auth, gw = site
    mine = requests.Session()
    callback = rs_callback(mine, gw.base, "carol", back="/vault/oauth/tracker")
    before = mine.cookies.copy()
    stranger = requests.Session()  # another browser presenting carol's callback: refused, not signed in
    refused = stranger.get(callback, allow_redirects=False, timeout=60)
    assert refused.status_code == 400 and "not started in this browser" in refused.text, refused.text
    assert "Signed in as" not in stranger.get(gw.base + "/vault", timeout=30).text
    done = mine.get(callback, allow_redirects=False, timeout=60)
    assert done.status_code == 303 and done.headers["location"] == "/vault/oauth/tracker", done.text
    cookie = done.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie, cookie
    assert "Signed in as user:carol" in mine.get(gw.base + "/vault", timeout=30).text
    again = mine.get(callback, allow_redirects=False, timeout=60)  # its state was taken from the cookie
    assert again.status_code == 400, again.text
    replay = requests.Session()  # the cookie from before the callback, copied: the state was redeemed already
    replay.cookies.update(before)
    replayed = replay.get(callback, allow_redirects=False, timeout=60)
    assert replayed.status_code == 400 and "finished already" in replayed.text, replayed.text
    assert "Signed in as" not in replay.get(gw.base + "/vault", timeout=30).text


def test_the_sign_in_form_and_its_csrf_check(site: Any) -> None:
    _auth, gw = site
    http = requests.Session()
    page = http.get(gw.base + "/vault", timeout=30)
    assert page.status_code == 200 and "action='/vault/signin'" in page.text and "password" not in page.text
    forged = http.post(gw.base + "/vault/signin", data={"csrf_token": "x"}, allow_redirects=False, timeout=30)
    assert forged.status_code == 400
    assert http.post(gw.base + "/vault/login", data={}, timeout=30).status_code in (404, 405)  # no password form
    set_without = http.post(gw.base + "/vault", data={"slot": "echo_token", "action": "set", "value": "x"}, timeout=30)
    assert set_without.status_code in (400, 403)
    outside = rs_callback(http, gw.base, "alice", back="https://evil.example/")
    landed = http.get(outside, allow_redirects=False, timeout=60)
    assert landed.status_code == 303 and landed.headers["location"] == "/vault", landed.text
