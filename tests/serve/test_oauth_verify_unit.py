"""The resource server's token checks in process, against tests/fixtures/oidc_issuer.py on loopback: the JWT
verifier and its key cache, introspection and its cache, the composite, and the guard's challenges."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import pytest
import requests
from joserfc.jwk import KeySet

from mcpgate.config.settings import Settings
from mcpgate.serve.front.auth import bearer_token
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth.identity import Identity, TokenRejected
from mcpgate.serve.oauth.introspection import EitherVerifier, IntrospectionVerifier, introspection_problem
from mcpgate.serve.oauth.jwt_verifier import (
    IssuerUnavailable,
    JwksCache,
    JwtVerifier,
    claims_problem,
    metadata_urls,
    scopes_of,
)
from mcpgate.serve.oauth.resource import ResourceGuard, challenge, token_in_query, verifier_for
from tests.support import free_port
from tests.support.oauth import mint_token, oidc_issuer

AUD = "https://gw.example/mcp"


def mint(issuer: str, claims: dict[str, Any] | None = None, **options: Any) -> str:
    return mint_token(issuer, {"aud": AUD, "scope": "mcp", **(claims or {})}, **options)


def stats(issuer: str) -> dict[str, int]:
    return dict(requests.get(issuer + "/stats", timeout=10).json())


def verifier(issuer: str, **options: Any) -> JwtVerifier:
    return JwtVerifier(issuer, AUD, JwksCache(issuer=issuer, **options))


def rejected(check: Any, token: str) -> str:
    with pytest.raises(TokenRejected) as info:
        check.verify(token)
    assert token not in str(info.value)
    return str(info.value)


# -- JWTs ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["rs256", "es256"])
def test_a_valid_token_names_its_issuer_subject_scopes_and_client(issuer: str, key: str) -> None:
    token = mint(issuer, {"scope": "mcp extra", "client_id": "c1"}, key=key)
    identity = verifier(issuer).verify(token)
    assert identity == Identity(issuer, "alice", frozenset({"mcp", "extra"}), "c1", frozenset({AUD}))
    assert identity.principal == f"{issuer}#alice"


def test_scp_lists_are_scopes_and_an_audience_list_may_name_us(issuer: str) -> None:
    token = mint(issuer, {"scope": None, "scp": ["mcp", "b"], "aud": ["other", AUD]})
    assert verifier(issuer).verify(token).scopes == {"mcp", "b"}


@pytest.mark.parametrize(
    ("claims", "options", "reason"),
    [
        # times as offsets from the moment the test runs (the whole suite runs longer than these offsets)
        ({"exp": -120}, {}, "expired"),
        ({"nbf": 600}, {}, "not valid yet"),
        ({"iat": 600}, {}, "not valid yet"),
        ({"aud": "https://elsewhere.example/mcp"}, {}, "another audience"),
        ({"iss": "https://impostor.example"}, {}, "another issuer"),
        ({"sub": ""}, {}, "no subject"),
        ({}, {"key": "bad"}, "signature"),
        ({}, {"key": "none"}, "algorithm"),
        ({}, {"key": "rs256", "header": {"kid": "es256-1"}}, "signature"),  # an EC key named for RS256
    ],
)
def test_bad_tokens_are_rejected_with_a_safe_reason(
    issuer: str, claims: dict[str, Any], options: dict[str, Any], reason: str
) -> None:
    now = int(time.time())
    claims = {name: now + value if name in ("exp", "nbf", "iat") else value for name, value in claims.items()}
    assert reason in rejected(verifier(issuer), mint(issuer, claims, **options))


def test_the_clock_skew_allowance_is_a_minute(issuer: str) -> None:
    token = mint(issuer, {"exp": int(time.time()) - 20, "nbf": int(time.time()) + 20})
    assert verifier(issuer).verify(token).subject == "alice"


def test_hmac_signed_with_the_public_key_is_refused(issuer: str) -> None:
    """The classic confusion: HS256 keyed with the issuer's public key; it must never pass as a signature."""
    jwks = requests.get(issuer + "/jwks", timeout=10).json()
    public = KeySet.import_key_set(jwks).get_by_kid("rs256-1")
    secret = public.as_pem(private=False)

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    header = b64(json.dumps({"alg": "HS256", "kid": "rs256-1"}).encode())
    payload = b64(json.dumps({"iss": issuer, "sub": "eve", "aud": AUD, "exp": now + 300, "scope": "mcp"}).encode())
    signature = b64(hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    assert "algorithm" in rejected(verifier(issuer), f"{header}.{payload}.{signature}")
    with pytest.raises(ValueError):
        JwtVerifier(issuer, AUD, JwksCache(issuer=issuer), algorithms=("HS256",))


def test_not_a_jwt_and_oversized_tokens(issuer: str) -> None:
    check = verifier(issuer)
    assert "not a JWT" in rejected(check, "opaque-token")
    assert "not a JWT" in rejected(check, "a.b")
    assert "too large" in rejected(check, "x" * 20000)


def test_an_unknown_kid_refreshes_the_keys_once_per_cooldown(issuer: str) -> None:
    check = verifier(issuer, cooldown=3600)
    check.verify(mint(issuer))  # the first fetch
    before = stats(issuer)["jwks"]
    token = mint(issuer, key="unpublished")
    assert "signing key is unknown" in rejected(check, token)
    assert stats(issuer)["jwks"] == before + 1  # refreshed once
    assert "signing key is unknown" in rejected(check, token)
    assert stats(issuer)["jwks"] == before + 1  # not again within the cool-down


def test_a_rotated_key_is_found_by_the_refresh(issuer: str) -> None:
    check = verifier(issuer)
    check.verify(mint(issuer))
    kid = requests.post(issuer + "/rotate", json={"alg": "ES256"}, timeout=10).json()["kid"]
    assert check.verify(mint(issuer, key=kid)).subject == "alice"


def test_the_extra_check_may_refuse(issuer: str) -> None:
    check = JwtVerifier(issuer, AUD, JwksCache(issuer=issuer), extra_check=lambda c: "revoked" if c["jti"] else None)
    assert rejected(check, mint(issuer)) == "revoked"


def test_discovery_with_a_path_in_the_issuer_and_an_explicit_jwks_url() -> None:
    with oidc_issuer("--prefix", "/tenant") as url:
        assert url.endswith("/tenant")
        assert verifier(url).verify(mint(url)).issuer == url
        explicit = JwtVerifier(url, AUD, JwksCache(jwks_url=url + "/jwks"))
        assert explicit.verify(mint(url)).subject == "alice"


def test_an_unreachable_issuer_is_unavailable_not_a_bad_token() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    check = verifier(url)
    with pytest.raises(IssuerUnavailable):
        check.verify("eyJhbGciOiJSUzI1NiJ9.e30.c2ln")


def test_metadata_urls_follow_rfc8414_then_oidc() -> None:
    assert metadata_urls("https://a.example") == [
        "https://a.example/.well-known/oauth-authorization-server",
        "https://a.example/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://a.example/t1") == [
        "https://a.example/.well-known/oauth-authorization-server/t1",
        "https://a.example/t1/.well-known/openid-configuration",
        "https://a.example/.well-known/openid-configuration/t1",
    ]


def test_claims_problem_and_scopes_pure() -> None:
    now = 1_000_000.0
    good = {"iss": "i", "aud": "a", "sub": "s", "exp": now + 10}
    assert claims_problem(good, "i", "a", now) is None
    assert claims_problem({**good, "exp": None}, "i", "a", now) == "the token has no expiry"
    assert claims_problem({**good, "exp": True}, "i", "a", now) == "the token has no expiry"
    assert claims_problem({**good, "aud": ["x", "a"]}, "i", "a", now) is None
    assert claims_problem({**good, "aud": None}, "i", "a", now) == "the token is meant for another audience"
    assert scopes_of({"scope": "a b"}) == {"a", "b"}
    assert scopes_of({"scp": "a b"}) == {"a", "b"}
    assert scopes_of({}) == frozenset()


# -- introspection -------------------------------------------------------------------------------------------


def introspector(issuer: str, secret: str = "test-secret") -> IntrospectionVerifier:
    return IntrospectionVerifier(issuer + "/introspect", "test-client", secret, AUD, issuer)


def test_an_active_opaque_token_is_cached_by_its_hash(issuer: str) -> None:
    check = introspector(issuer)
    token = mint(issuer, {"client_id": "c2"}, opaque=True)
    before = stats(issuer)["introspect"]
    assert check.verify(token) == Identity(issuer, "alice", frozenset({"mcp"}), "c2", frozenset({AUD}))
    assert check.verify(token).subject == "alice"
    assert stats(issuer)["introspect"] == before + 1
    assert all(token not in key for key in check.admitted.items)


def test_inactive_foreign_and_expired_opaque_tokens_are_rejected(issuer: str) -> None:
    check = introspector(issuer)
    assert "not active" in rejected(check, "never-issued")
    assert "another audience" in rejected(check, mint(issuer, {"aud": "https://x.example"}, opaque=True))
    assert "another issuer" in rejected(check, mint(issuer, {"iss": "https://x.example"}, opaque=True))
    token = mint(issuer, opaque=True)
    requests.post(issuer + "/revoke", data={"token": token}, auth=("test-client", "test-secret"), timeout=10)
    assert "not active" in rejected(check, token)


def test_the_caches_are_bounded(issuer: str) -> None:
    check = IntrospectionVerifier(
        issuer + "/introspect", "test-client", "test-secret", AUD, issuer, entries=3, negative_entries=3
    )
    for index in range(6):
        rejected(check, f"made-up-{index}")
        check.verify(mint(issuer, opaque=True))
    assert len(check.refused.items) == 3 and len(check.admitted.items) == 3


def test_wrong_introspection_credentials_are_the_gateways_problem(issuer: str) -> None:
    with pytest.raises(IssuerUnavailable):
        introspector(issuer, secret="wrong").verify(mint(issuer, opaque=True))


def test_introspection_problem_pure() -> None:
    now = 1000.0
    answer = {"active": True, "aud": "a", "sub": "s", "exp": now + 5}
    assert introspection_problem(answer, "", "a", now) is None
    assert introspection_problem({**answer, "active": "true"}, "", "a", now) == "the token is not active"
    assert introspection_problem({**answer, "exp": now - 100}, "", "a", now) == "the token has expired"
    assert introspection_problem({**answer, "sub": None}, "", "a", now) == "the token names no subject"


def test_either_sends_jwts_to_the_jwt_verifier_and_the_rest_to_introspection(issuer: str) -> None:
    either = EitherVerifier(verifier(issuer), introspector(issuer))
    assert either.verify(mint(issuer)).subject == "alice"
    assert either.verify(mint(issuer, {"sub": "bob"}, opaque=True)).subject == "bob"
    before = stats(issuer)["introspect"]
    only_introspection = EitherVerifier(None, introspector(issuer))
    assert only_introspection.verify(mint(issuer, {"sub": "carol"})).subject == "carol"  # a JWT, introspected
    assert stats(issuer)["introspect"] == before + 1


def test_verifier_for_follows_the_settings(issuer: str) -> None:
    base = {"MCPGATE_PUBLIC_URL": "https://gw.example", "MCPGATE_OAUTH_ISSUER": issuer}
    jwt_only = verifier_for(Settings.from_env(base))
    assert isinstance(jwt_only, JwtVerifier)
    assert jwt_only.verify(mint(issuer)).subject == "alice"
    assert isinstance(jwt_only.key_source, JwksCache)
    introspect = {"MCPGATE_OAUTH_INTROSPECTION_URL": issuer + "/introspect", "MCPGATE_OAUTH_CLIENT_ID": "test-client"}
    both = verifier_for(Settings.from_env({**base, **introspect, "MCPGATE_OAUTH_CLIENT_SECRET": "test-secret"}))
    assert isinstance(both, EitherVerifier)
    assert both.verify(mint(issuer, opaque=True)).subject == "alice"
    audience = verifier_for(Settings.from_env({**base, "MCPGATE_OAUTH_AUDIENCE": "api://gw"}))
    assert audience.verify(mint(issuer, {"aud": "api://gw"})).subject == "alice"


# -- the guard (no HTTP server: a stub verifier) -----------------------------------------------------------------


class Stub:
    def __init__(self, outcome: Identity | Exception) -> None:
        self.outcome = outcome

    def verify(self, token: str, client: str | None = None) -> Identity:
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def guard(outcome: Identity | Exception, scopes: str = "mcp,files") -> ResourceGuard:
    settings = Settings.from_env({"MCPGATE_PUBLIC_URL": "https://gw.example/base/", "MCPGATE_OAUTH_SCOPES": scopes})
    return ResourceGuard(settings, Stub(outcome), ["https://as.example", ""])


def refusal(resource_guard: ResourceGuard, authorization: str | None = None, query: str = "") -> Refusal:
    environ = {"QUERY_STRING": query}
    if authorization is not None:
        environ["HTTP_AUTHORIZATION"] = authorization
    with pytest.raises(Refusal) as info:
        resource_guard.authenticate(environ)
    return info.value


PRM = "https://gw.example/.well-known/oauth-protected-resource/base/mcp"
OURS = frozenset({"https://gw.example/base/mcp"})  # the audience of a token for the guard's resource


def test_guard_challenges() -> None:
    alice = Identity("https://as.example", "alice", frozenset({"mcp"}), audiences=OURS)
    missing = refusal(guard(alice))
    assert (missing.status, missing.headers["WWW-Authenticate"]) == (
        401,
        f'Bearer scope="mcp files", resource_metadata="{PRM}"',
    )
    assert refusal(guard(alice), "Basic dXNlcjpwdw==").status == 401
    bad = refusal(guard(TokenRejected("the token has expired")), "Bearer sekrit")
    assert bad.headers["WWW-Authenticate"] == (
        f'Bearer error="invalid_token", error_description="the token has expired", scope="mcp files", '
        f'resource_metadata="{PRM}"'
    )
    step_up = refusal(guard(alice), "Bearer sekrit")
    assert step_up.status == 403
    assert step_up.headers["WWW-Authenticate"].startswith('Bearer error="insufficient_scope"')
    assert 'scope="mcp files"' in step_up.headers["WWW-Authenticate"]
    query = refusal(guard(alice), None, "a=1&access_token=sekrit")
    assert (query.status, 'error="invalid_request"' in query.headers["WWW-Authenticate"]) == (400, True)
    assert refusal(guard(alice), "Bearer ").status == 401  # "Bearer" and nothing: no credential at all
    assert refusal(guard(alice), "Bearer a b").status == 400
    down = refusal(guard(IssuerUnavailable("http://as down")), "Bearer sekrit")
    assert (down.status, down.headers["Retry-After"]) == (503, "5")
    for each in (bad, step_up, query, down):
        assert "sekrit" not in each.message + json.dumps(each.headers)


def test_guard_admits_and_names_the_principal() -> None:
    alice = Identity("https://as.example", "alice", frozenset({"mcp", "files", "more"}), audiences=OURS)
    assert guard(alice).authenticate({"HTTP_AUTHORIZATION": "bearer tok"}) == "https://as.example#alice"
    anyone = Identity("i", "s", frozenset(), audiences=OURS)
    assert guard(anyone, scopes="").authenticate({"HTTP_AUTHORIZATION": "Bearer t"}) == "i#s"


def test_guard_metadata() -> None:
    resource_guard = guard(Identity("i", "s", frozenset()))
    assert resource_guard.metadata() == {
        "resource": "https://gw.example/base/mcp",
        "authorization_servers": ["https://as.example"],
        "scopes_supported": ["mcp", "files"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpgate",
    }
    assert resource_guard.metadata_url == PRM


def test_pure_helpers() -> None:
    assert bearer_token(None) is None
    assert bearer_token("Bearer  abc ") == "abc"
    assert bearer_token("Token abc") is None
    assert challenge("u", [], "invalid_token", 'say "hi" \\ now') == (
        'Bearer error="invalid_token", error_description="say hi  now", resource_metadata="u"'
    )
    assert token_in_query("access_token=")
    assert not token_in_query("x=access_token")
