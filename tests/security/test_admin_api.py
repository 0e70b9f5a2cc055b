"""Issue 25: the management API (/admin/) answers only its administrator. Through a real gunicorn: without a
credential, with a wrong token, with a malformed Authorization, and with a normal user's OAuth access token
(resource-server mode against tests/fixtures/oidc_issuer.py) every endpoint is refused (401 or 403) and nothing is
decided; the admin token, or an OAuth token carrying MCPGATE_ADMIN_SCOPE, is let in; with neither set the API
does not exist (404); and the admin token never reaches the gateway's log, nor an answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Gateway, open_session, serving, worker_children
from tests.support.oauth import mint_token, oidc_issuer, resource_server_env

TOKEN = "the-admin-token-7f3a9c1e5b"
ENDPOINTS = [
    ("GET", "/admin/servers"),
    ("GET", "/admin/pins"),
    ("POST", "/admin/pins/approve"),
    ("POST", "/admin/pins/reject"),
    ("POST", "/admin/reload"),
    ("GET", "/admin/vault"),
]
DECISION = {"server": "default", "tool": "echo", "fingerprint": "0" * 64}
SCOPE = "mcpgate-admin"


def ask(gw: Gateway, method: str, path: str, authorization: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    reply = gw.request(method, path, body=DECISION if method == "POST" else None, headers=headers)
    return reply.status, reply.body


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    state = tmp_path_factory.mktemp("state")
    environ = {"MCPGATE_ADMIN_TOKEN": TOKEN, "MCPGATE_TOOL_PINS": "block", "MCPGATE_STATE_DIR": str(state)}
    with serving(environ, behind=True) as served:
        yield served


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong-token", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", f"Bearer {TOKEN} extra", "Bearer "],
    ids=["none", "wrong", "a prefix", "another scheme", "malformed", "empty"],
)
@pytest.mark.parametrize(("method", "path"), ENDPOINTS, ids=[f"{m} {p}" for m, p in ENDPOINTS])
def test_refused_without_the_admin_token(gw: Gateway, method: str, path: str, authorization: str | None) -> None:
    status, body = ask(gw, method, path, authorization)
    assert status == 401, body
    assert b"Unauthorized" in body and TOKEN.encode() not in body


def test_an_unknown_path_is_told_only_to_the_administrator(gw: Gateway) -> None:
    assert ask(gw, "GET", "/admin/secrets", None)[0] == 401
    status, body = ask(gw, "GET", "/admin/secrets", f"Bearer {TOKEN}")
    assert status == 404 and b"/admin/servers" in body


def test_the_admin_token_is_let_in_and_never_logged(gw: Gateway) -> None:
    status, body = ask(gw, "GET", "/admin/servers", f"Bearer {TOKEN}")
    assert status == 200, body
    assert b'"name":"default"' in body
    status, body = ask(gw, "POST", "/admin/pins/approve", f"Bearer {TOKEN}")
    assert status == 409, body  # authenticated; no such pending change
    status, body = ask(gw, "GET", "/admin/vault", f"Bearer {TOKEN}")
    assert status == 200 and body == b'{"store":"off","servers":{}}', body  # no server has user secrets
    ask(gw, "GET", "/admin/servers", f"Bearer {TOKEN}x")
    assert TOKEN not in gw.log()
    open_session(gw)  # a child started: the admin token is not in its environment
    pids = worker_children(gw)
    assert pids
    for pid in pids:
        assert TOKEN.encode() not in Path(f"/proc/{pid}/environ").read_bytes()


def test_without_a_token_or_scope_the_api_does_not_exist(tmp_path: Path) -> None:
    with serving({"MCPGATE_TOOL_PINS": "warn", "MCPGATE_STATE_DIR": str(tmp_path)}) as gw:
        for method, path in ENDPOINTS:
            assert ask(gw, method, path, f"Bearer {TOKEN}")[0] == 404


def test_a_normal_users_oauth_token_is_refused() -> None:
    with oidc_issuer() as issuer, serving(resource_server_env(issuer, MCPGATE_ADMIN_SCOPE=SCOPE)) as gw:
        audience = f"http://127.0.0.1:{gw.port}/mcp"
        user = mint_token(issuer, {"sub": "alice", "aud": audience, "scope": "mcp"})
        other = mint_token(issuer, {"sub": "alice", "aud": "http://elsewhere.example/mcp", "scope": SCOPE})
        for method, path in ENDPOINTS:
            status, body = ask(gw, method, path, f"Bearer {user}")
            assert status == 403 and SCOPE.encode() in body, body
            assert ask(gw, method, path, f"Bearer {other}")[0] == 401  # another audience's, scope or not
            assert ask(gw, method, path, "Bearer not-a-jwt")[0] == 401
        admin = mint_token(issuer, {"sub": "root", "aud": audience, "scope": f"mcp {SCOPE}"})
        assert ask(gw, "GET", "/admin/servers", f"Bearer {admin}")[0] == 200
        assert user not in gw.log() and admin not in gw.log()
