"""Resource-server mode through gunicorn, by raw HTTP, against tests/fixtures/oidc_issuer.py on loopback: the
protected resource metadata, the exact challenges, every kind of bad token, the kid refresh, step-up, a token
in the URL, opaque tokens by introspection, an issuer that is down, sessions bound to their principal, and no
token ever in a log line or an error body."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from mcpgate.core.wire import PROTOCOL_VERSION, SESSION_ID
from tests.support import Gateway, call, free_port, reply_message, serving
from tests.support.oauth import mint_token, oidc_issuer, post_with_token, resource_server_env

SEEN: list[str] = []  # every token this module sent: none may reach the gateway's log


def env_for(issuer: str, **extra: str) -> dict[str, str]:
    return resource_server_env(issuer, MCPGATE_LOG_LEVEL="debug", MCPGATE_ACCESS_LOG="-", **extra)


@pytest.fixture(scope="module")
def gw(issuer: str) -> Iterator[Gateway]:
    with serving(env_for(issuer), behind=True) as gateway:
        yield gateway


def resource(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}/mcp"


def prm_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}/.well-known/oauth-protected-resource/mcp"


def mint(issuer: str, gw: Gateway, claims: dict[str, Any] | None = None, **options: Any) -> str:
    token = mint_token(issuer, {"aud": resource(gw), "scope": "mcp", **(claims or {})}, **options)
    SEEN.append(token)
    return token


def jwks_fetches(issuer: str) -> int:
    return int(requests.get(issuer + "/stats", timeout=10).json()["jwks"])


# -- metadata and challenges ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
def test_protected_resource_metadata_in_both_forms_is_open(gw: Gateway, issuer: str, path: str) -> None:
    reply = gw.request("GET", path)
    assert reply.status == 200 and reply.content_type.startswith("application/json"), reply
    assert reply.json() == {
        "resource": resource(gw),
        "authorization_servers": [issuer],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpgate",
    }


def test_no_token_is_a_401_naming_the_metadata_and_the_scope(gw: Gateway) -> None:
    reply = post_with_token(gw, None)
    assert reply.status == 401, reply
    assert reply.headers["www-authenticate"] == f'Bearer scope="mcp", resource_metadata="{prm_url(gw)}"'
    assert reply.json()["error"]["message"].startswith("Unauthorized")
    assert gw.request("GET", "/sse", headers={"Accept": "text/event-stream"}).status == 401  # every MCP endpoint


def test_a_valid_token_opens_a_session_and_calls_a_tool(gw: Gateway, issuer: str) -> None:
    token = mint(issuer, gw)
    reply = post_with_token(gw, token)
    assert reply.status == 200, reply
    session = {SESSION_ID: reply.headers[SESSION_ID.lower()], PROTOCOL_VERSION: "2025-11-25"}
    assert (
        post_with_token(gw, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **session).status == 202
    )
    result = reply_message(post_with_token(gw, token, call("echo", {"message": "hi"}), **session))
    assert "hi" in str(result["result"]), result


def test_another_principal_cannot_use_the_session(gw: Gateway, issuer: str) -> None:
    reply = post_with_token(gw, mint(issuer, gw))
    session = {SESSION_ID: reply.headers[SESSION_ID.lower()], PROTOCOL_VERSION: "2025-11-25"}
    assert (
        post_with_token(gw, mint(issuer, gw, {"sub": "mallory"}), call("echo", {"message": "x"}), **session).status
        == 404
    )


NOW = int(time.time())


@pytest.mark.parametrize(
    ("claims", "options", "description"),
    [
        ({"exp": NOW - 600}, {}, "the token has expired"),
        ({"nbf": NOW + 3600}, {}, "the token is not valid yet (nbf)"),
        ({"aud": "https://elsewhere.example/mcp"}, {}, "the token is meant for another audience"),
        ({"iss": "https://impostor.example"}, {}, "the token was issued by another issuer"),
        ({}, {"key": "bad"}, "the token's signature does not verify"),
        ({}, {"key": "none"}, "the token's signing algorithm is not accepted"),
    ],
)
def test_bad_tokens_are_401_invalid_token_with_the_reason(
    gw: Gateway, issuer: str, claims: dict[str, Any], options: dict[str, Any], description: str
) -> None:
    reply = post_with_token(gw, mint(issuer, gw, claims, **options))
    assert reply.status == 401, reply
    assert reply.headers["www-authenticate"] == (
        f'Bearer error="invalid_token", error_description="{description}", scope="mcp", '
        f'resource_metadata="{prm_url(gw)}"'
    )
    assert reply.json()["error"]["message"] == f"Unauthorized: {description}"


def test_missing_scope_is_a_403_step_up(gw: Gateway, issuer: str) -> None:
    reply = post_with_token(gw, mint(issuer, gw, {"scope": "profile"}))
    assert reply.status == 403, reply
    assert reply.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="the token lacks the scope mcp", scope="mcp", '
        f'resource_metadata="{prm_url(gw)}"'
    )


def test_a_token_in_the_query_string_is_a_400(gw: Gateway, issuer: str) -> None:
    token = mint(issuer, gw)
    reply = post_with_token(gw, token, path=f"/mcp?access_token={token}")  # refused even beside a good header
    assert reply.status == 400, reply
    assert reply.headers["www-authenticate"].startswith('Bearer error="invalid_request"')


def test_opaque_tokens_by_introspection(gw: Gateway, issuer: str) -> None:
    assert post_with_token(gw, mint(issuer, gw, opaque=True)).status == 200
    inactive = "opaque-never-issued-" + "x" * 20
    SEEN.append(inactive)
    reply = post_with_token(gw, inactive)
    assert reply.status == 401, reply
    assert 'error_description="the token is not active"' in reply.headers["www-authenticate"]


# -- keys --------------------------------------------------------------------------------------------------------


@pytest.fixture
def own_issuer() -> Iterator[str]:
    """An issuer of the test's own (these tests rotate keys and count fetches)."""
    with oidc_issuer() as url:
        yield url


def test_an_unknown_kid_refreshes_once_then_is_refused(
    own_issuer: str, gateway_factory: Callable[..., Gateway]
) -> None:
    gateway = gateway_factory(env_for(own_issuer))
    assert post_with_token(gateway, mint(own_issuer, gateway)).status == 200
    fetched = jwks_fetches(own_issuer)
    token = mint(own_issuer, gateway, key="unpublished")
    for _ in range(3):
        reply = post_with_token(gateway, token)
        assert reply.status == 401, reply
        assert "the token's signing key is unknown" in reply.headers["www-authenticate"]
    assert jwks_fetches(own_issuer) == fetched + 1


def test_a_rotated_key_is_accepted_after_one_refresh(own_issuer: str, gateway_factory: Callable[..., Gateway]) -> None:
    gateway = gateway_factory(env_for(own_issuer))
    assert post_with_token(gateway, mint(own_issuer, gateway)).status == 200
    fetched = jwks_fetches(own_issuer)
    kid = requests.post(own_issuer + "/rotate", json={"alg": "ES256", "retire": True}, timeout=10).json()["kid"]
    assert post_with_token(gateway, mint(own_issuer, gateway, key=kid)).status == 200
    assert post_with_token(gateway, mint(own_issuer, gateway, key=kid)).status == 200
    assert jwks_fetches(own_issuer) == fetched + 1


def test_an_unreachable_issuer_is_a_503_not_a_401(gateway_factory: Callable[..., Gateway]) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    gateway = gateway_factory(env_for(down, MCPGATE_OAUTH_INTROSPECTION_URL=""))
    reply = post_with_token(gateway, "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ.eyJzdWIiOiJ4In0.c2ln")
    assert reply.status == 503, reply
    assert reply.headers["retry-after"] == "5"
    assert "authorization server cannot be reached" in reply.json()["error"]["message"]
    assert "cannot check an access token" in gateway.log()


# -- last: the module's log ------------------------------------------------------------------------------------


def test_no_token_reaches_the_log(gw: Gateway) -> None:
    log = gw.log()
    assert "refused an access token: the token has expired" in log  # the refusals were logged, without tokens
    assert len(SEEN) > 10
    parts = [part for token in SEEN for part in (token, token.split(".")[-1]) if len(part) > 8]  # or its signature
    leaked = [part for part in parts if part in log]
    assert not leaked
