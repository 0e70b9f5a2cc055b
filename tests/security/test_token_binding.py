"""Issue 20, finding 3: an access token's stored jti binds the claims it was issued with. With the embedded
server's signing key in hand (read, say, from a state directory a child could reach), a signed-in user re-signed
their own token with another subject under its valid jti and became that user: the revocation check found the
jti row without comparing anything. Now any claim that differs from the issued token's is refused (401), and
such a token cannot revoke the real one either. A real gunicorn, the real sign-in pages, the real key."""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import RSAKey

from mcpgate.serve.oauth import passwords
from mcpgate.serve.oauth.redis_storage import RedisStorage
from mcpgate.serve.oauth.storage import SqliteStorage, access_binding
from tests.support import HEADERS, Gateway, serving
from tests.support.fleet import redis_server
from tests.support.oauth import admitted, embedded_env, jwt_claims, sign_in

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    state = tmp_path_factory.mktemp("binding") / "state"
    users = ",".join(f"{name}:{passwords.make_hash(PASSWORD)}" for name in ("alice", "bob"))
    with serving(embedded_env(state, users), behind=True) as gw:
        yield gw, state


@pytest.fixture(scope="module")
def alice(site: tuple[Gateway, Path]) -> dict[str, Any]:
    return sign_in(site[0].base, "alice", PASSWORD)


def signing_key(state: Path) -> RSAKey:
    """The embedded server's private key, as a process of the gateway's user reads it from the state directory."""
    db = sqlite3.connect(state / "oauth.sqlite3")
    try:
        (value,) = db.execute("SELECT value FROM secrets WHERE name = 'signing-key:1'").fetchone()
    finally:
        db.close()
    return RSAKey.import_key(json.loads(value))


def resigned(token: str, key: RSAKey, **changes: Any) -> str:
    """`token` signed again with `key` (same header, so the same kid), its claims changed by `changes`."""
    segment = token.split(".")[0]
    header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    return jwt.encode(header, {**jwt_claims(token), **changes}, key, algorithms=["RS256"])


def auth(token: str) -> dict[str, str]:
    return {**HEADERS, "Authorization": f"Bearer {token}"}


def test_a_token_for_another_subject_under_a_valid_jti_is_refused(
    site: tuple[Gateway, Path], alice: dict[str, Any]
) -> None:
    gw, state = site
    token, key = alice["access_token"], signing_key(state)
    assert admitted(gw, token)
    assert admitted(gw, resigned(token, key))  # the very claims signed again: the key is the real one
    as_bob = resigned(token, key, sub="bob")
    assert not admitted(gw, as_bob)
    reply = gw.request("POST", body={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=auth(as_bob))
    assert reply.status == 401 and "revoked" in reply.headers.get("www-authenticate", ""), reply


@pytest.mark.parametrize(
    "changes",
    [{"client_id": "another-client"}, {"exp": 4102444800}, {"scope": "mcp admin"}, {"iat": 1}],
    ids=["client", "expiry", "scope", "issued-at"],
)
def test_any_other_changed_claim_is_refused(
    site: tuple[Gateway, Path], alice: dict[str, Any], changes: dict[str, Any]
) -> None:
    gw, state = site
    assert not admitted(gw, resigned(alice["access_token"], signing_key(state), **changes))
    assert admitted(gw, alice["access_token"])


def test_a_token_resigned_for_another_subject_cannot_revoke_the_real_one(site: tuple[Gateway, Path]) -> None:
    gw, state = site
    tokens = sign_in(gw.base, "alice", PASSWORD)
    as_bob = resigned(tokens["access_token"], signing_key(state), sub="bob")
    data = {"token": as_bob, "token_type_hint": "access_token", "client_id": tokens["client_id"]}
    assert requests.post(gw.base + "/revoke", data=data, timeout=30).status_code == 200
    assert admitted(gw, tokens["access_token"])


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_both_stores_bind_the_jti_to_its_claims(kind: str, tmp_path: Path) -> None:
    claims = {"sub": "user:alice", "client_id": "c1", "exp": int(time.time()) + 600, "jti": "j1", "scope": "mcp"}
    with redis_server() if kind == "redis" else contextlib.nullcontext("") as url:
        store: Any = RedisStorage.from_url(url, "binding-test:") if url else SqliteStorage(str(tmp_path))
        store.add_access("j1", "family-1", claims["exp"], access_binding(claims))
        assert not store.access_revoked("j1", access_binding(claims))
        assert store.access_revoked("j1", access_binding({**claims, "sub": "user:bob"}))
        assert store.access_revoked("j1", access_binding({**claims, "exp": claims["exp"] + 1}))
        store.close()
