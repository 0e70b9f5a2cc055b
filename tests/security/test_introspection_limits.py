"""Issue 20, finding 18: in resource-server mode every opaque token the cache did not know cost the issuer an
introspection request, without bound per client address, and made-up tokens shared one cache with the admitted
ones. Now one address may cause MCPGATE_OAUTH_INTROSPECTION_LIMIT lookups a minute (429 with Retry-After past it,
the issuer not asked), refused tokens are remembered in a bounded cache of their own, and another address (or a
token already admitted) is not held back. A real gunicorn against tests/fixtures/oidc_issuer.py, whose /stats
counts the introspection requests it answered; each loopback source address (127.0.0.0/8) is another client."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest
import requests

from mcpgate.serve.oauth.identity import TokenRejected
from mcpgate.serve.oauth.introspection import IntrospectionVerifier
from tests.support import HEADERS, Gateway, Reply, init_body, send, serving
from tests.support.oauth import mint_token, resource_server_env

LIMIT = 5
ATTACKER, BYSTANDER = "127.0.0.5", "127.0.0.6"


@pytest.fixture(scope="module")
def gw(issuer: str) -> Iterator[Gateway]:
    with serving(resource_server_env(issuer, MCPGATE_OAUTH_INTROSPECTION_LIMIT=str(LIMIT)), behind=True) as gateway:
        yield gateway


def introspections(issuer: str) -> int:
    return int(requests.get(issuer + "/stats", timeout=10).json()["introspect"])


def opaque_token(issuer: str, audience: str) -> str:
    return mint_token(issuer, {"aud": audience, "scope": "mcp"}, opaque=True)


def initialize(gw: Gateway, token: str, source: str) -> Reply:
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    return send("127.0.0.1", gw.port, "POST", "/mcp", json.dumps(init_body()).encode(), headers, source=source)


def test_made_up_tokens_from_one_address_cost_the_issuer_at_most_the_limit(gw: Gateway, issuer: str) -> None:
    admitted = opaque_token(issuer, gw.url)
    assert initialize(gw, admitted, ATTACKER).status == 200  # admitted (and cached) before the flood
    before = introspections(issuer)
    statuses = [initialize(gw, "made-up-" + secrets.token_urlsafe(24), ATTACKER).status for _ in range(4 * LIMIT)]
    assert introspections(issuer) - before <= LIMIT, statuses
    assert statuses[: LIMIT - 1] == [401] * (LIMIT - 1), statuses
    assert statuses[-1] == 429 and set(statuses) <= {401, 429}, statuses
    limited = initialize(gw, "made-up-" + secrets.token_urlsafe(24), ATTACKER)
    assert limited.status == 429 and int(limited.headers["retry-after"]) >= 1, limited
    assert limited.json()["error"]["message"].startswith("Too Many Requests"), limited
    # the bystander's new token is looked up; the attacker's own admitted token still answers from the cache
    assert initialize(gw, opaque_token(issuer, gw.url), BYSTANDER).status == 200
    assert initialize(gw, admitted, ATTACKER).status == 200


def test_a_repeated_bad_token_is_asked_about_once(gw: Gateway, issuer: str) -> None:
    token = "made-up-" + secrets.token_urlsafe(24)
    before = introspections(issuer)
    statuses = {initialize(gw, token, "127.0.0.7").status for _ in range(3 * LIMIT)}
    assert statuses == {401} and introspections(issuer) - before == 1


def test_refused_tokens_never_push_an_admitted_one_out(issuer: str) -> None:
    audience = "http://127.0.0.1:1/mcp"
    check = IntrospectionVerifier(issuer + "/introspect", "test-client", "test-secret", audience, issuer, entries=2)
    admitted = opaque_token(issuer, audience)
    assert check.verify(admitted).subject == "alice"
    for _ in range(10):
        with pytest.raises(TokenRejected):
            check.verify("made-up-" + secrets.token_urlsafe(24))
    before = introspections(issuer)
    assert check.verify(admitted).subject == "alice" and introspections(issuer) == before
