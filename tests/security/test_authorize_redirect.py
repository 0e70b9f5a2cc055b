"""Issue 20, finding 9: the embedded server as an open redirector. Anyone may register an https redirect URI (their
own web site); an /authorize request made wrong on purpose (a scope not offered, PKCE plain, another resource)
sent the browser there at once, with no user interaction, behind the gateway's own URL (RFC 9700 4.11.2). Errors
for a client no one has approved stay on the gateway's HTML page (400); a client a user approved, a loopback
redirect URI (a native app on the user's own machine) and a user's own Deny still go back to the client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.browser import Browser
from tests.support import Gateway, serving
from tests.support.oauth import embedded_env
from tests.support.security import PASSWORD, USER, USERS, authorize_url, public_client, register

SITE = "https://phish.example/callback"  # never fetched: the stand-in browser visits loopback only
LOOPBACK = "http://127.0.0.1:47312/callback"

WRONG_ON_PURPOSE = {  # what is wrong: (the request's parameters, the error it gets)
    "scope not offered": ({"scope": "mcp admin"}, "invalid_scope"),
    "plain PKCE": ({"code_challenge_method": "plain"}, "invalid_request"),
    "no PKCE": ({"code_challenge": "", "code_challenge_method": ""}, "invalid_request"),
    "another resource": ({"resource": "https://elsewhere.example/mcp"}, "invalid_target"),
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    state: Path = tmp_path_factory.mktemp("authorize-redirect")
    with serving(embedded_env(state, USERS, MCPGATE_OAUTH_REGISTER_LIMIT="1000"), behind=True) as gateway:
        yield gateway


def new_client(gw: Gateway, redirect_uri: str) -> str:
    reply = register(gw.port, public_client(redirect_uri))
    assert reply.status == 201, reply
    return str(reply.json()["client_id"])


def get(url: str) -> requests.Response:
    return requests.get(url, allow_redirects=False, timeout=30)


@pytest.mark.parametrize("wrong", sorted(WRONG_ON_PURPOSE))
def test_errors_for_a_client_no_one_approved_stay_on_the_gateways_page(gw: Gateway, wrong: str) -> None:
    client_id = new_client(gw, SITE)
    params, error = WRONG_ON_PURPOSE[wrong]
    reply = get(authorize_url(gw.port, client_id, SITE, **params))
    assert reply.status_code == 400 and "Location" not in reply.headers, (reply.status_code, reply.headers)
    assert reply.headers["Content-Type"].startswith("text/html"), reply.headers
    assert reply.headers["X-Frame-Options"] == "DENY" and reply.headers["Cache-Control"] == "no-store"
    assert "cannot go on" in reply.text and error in reply.text and "phish.example" not in reply.text


def test_after_a_user_approved_the_client_its_errors_go_back_to_it(gw: Gateway) -> None:
    client_id = new_client(gw, SITE)
    approved = Browser(USER, PASSWORD).visit(authorize_url(gw.port, client_id, SITE), stop_at=SITE)
    assert approved.url.startswith(SITE + "?") and approved.params["code"], approved.describe()
    url = authorize_url(gw.port, client_id, SITE, scope="mcp admin", state="s1")
    reply = get(url)
    assert reply.status_code == 302 and reply.headers["Location"].startswith(SITE + "?"), reply.status_code
    assert "error=invalid_scope" in reply.headers["Location"] and "state=s1" in reply.headers["Location"]


def test_a_loopback_client_gets_its_errors_at_once(gw: Gateway) -> None:
    client_id = new_client(gw, LOOPBACK)
    reply = get(authorize_url(gw.port, client_id, LOOPBACK, scope="mcp admin"))
    assert reply.status_code == 302 and reply.headers["Location"].startswith(LOOPBACK + "?error=invalid_scope")


def test_a_users_deny_goes_back_to_the_client(gw: Gateway) -> None:
    client_id = new_client(gw, SITE)
    denied = Browser(USER, PASSWORD, consent="deny").visit(authorize_url(gw.port, client_id, SITE), stop_at=SITE)
    assert denied.url.startswith(SITE + "?") and denied.params["error"] == "access_denied", denied.describe()
    assert "code" not in denied.params
