"""Issue 20, finding 3: where children run as the gateway's user (no root, a Heroku-style dyno), the embedded
authorization server's secrets at rest were readable by them: the private signing key in the state directory
(SQLite) or in Redis, in the clear. With MCPGATE_STATE_KEY they are sealed (AES-GCM) with a key that lives only in
the setting and the non-dumpable worker, so reading the state teaches nothing; a state kept in the clear is
retired at the first start with a key (new keys, sealed); a wrong key, or none for a sealed state, stops the start
with one line; without a key the start warns once, naming the setting. A real gunicorn, the real sign-in pages."""

from __future__ import annotations

import base64
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from mcpgate.serve.oauth import passwords
from mcpgate.serve.oauth.sealing import MAGIC
from tests.support import Gateway, serving
from tests.support.fleet import redis_server
from tests.support.oauth import admitted, embedded_env, sign_in
from tests.support.security import refused_start

PASSWORD = "correct horse battery staple"
KEY = secrets.token_urlsafe(32)
OTHER_KEY = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def users() -> str:
    return f"alice:{passwords.make_hash(PASSWORD)}"


def keyed_env(users: str, state: Path, key: str | None) -> dict[str, str]:
    """An embedded gateway's settings, with MCPGATE_STATE_KEY `key` (None: not set)."""
    return embedded_env(state, users) if key is None else embedded_env(state, users, MCPGATE_STATE_KEY=key)


def public_n(gw: Gateway) -> str:
    """The signing key's modulus as the JWKS publishes it: its private JWK, kept in the clear, would hold it too."""
    (key,) = requests.get(gw.base + "/jwks", timeout=30).json()["keys"]
    return str(key["n"])


def state_bytes(state: Path) -> bytes:
    """Every byte a child of the gateway's user may read in the state directory (the database and its WAL)."""
    return b"".join(path.read_bytes() for path in sorted(state.iterdir()) if path.is_file())


def stored_secrets(state: Path) -> dict[str, bytes]:
    db = sqlite3.connect(state / "oauth.sqlite3")
    try:
        return {name: bytes(value) for name, value in db.execute("SELECT name, value FROM secrets")}
    finally:
        db.close()


def warnings_naming_the_key(log: str) -> list[str]:
    return [line for line in log.splitlines() if "MCPGATE_STATE_KEY is not set" in line]


def test_a_state_key_seals_the_state_and_retires_what_was_kept_in_the_clear(users: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with serving(keyed_env(users, state, None)) as gw:
        assert len(warnings_naming_the_key(gw.log())) == 1, gw.log()  # children run as the gateway's user
        plain = sign_in(gw.base, "alice", PASSWORD)
        plain_n = public_n(gw)
    assert plain_n.encode() in state_bytes(state)  # what a child read before: the private JWK in the clear

    with serving(keyed_env(users, state, KEY), port=gw.port) as gw:  # the same public URL: the grants stay valid
        assert warnings_naming_the_key(gw.log()) == []
        sealed_n = public_n(gw)
        assert sealed_n != plain_n  # the key kept in the clear was retired, not sealed: it may have been read
        assert not admitted(gw, plain["access_token"])
        data = {"grant_type": "refresh_token", "refresh_token": plain["refresh_token"], "client_id": plain["client_id"]}
        refreshed = requests.post(gw.base + "/token", data=data, timeout=30)
        assert refreshed.status_code == 200, refreshed.text  # a client signed in before refreshes and goes on
        assert admitted(gw, refreshed.json()["access_token"])
        assert admitted(gw, sign_in(gw.base, "alice", PASSWORD)["access_token"])  # the sealed cookie key works
    kept = stored_secrets(state)
    assert kept and all(value.startswith(MAGIC) for value in kept.values()), kept.keys()
    assert sealed_n.encode() not in state_bytes(state)

    with serving(keyed_env(users, state, KEY)) as gw:
        assert public_n(gw) == sealed_n  # the sealed key opens again with its key


@pytest.mark.parametrize("key", [OTHER_KEY, None], ids=["wrong-key", "no-key"])
def test_a_sealed_state_does_not_start_without_its_key(users: str, tmp_path: Path, key: str | None) -> None:
    state = tmp_path / "state"
    with serving(keyed_env(users, state, KEY)):
        pass
    log = refused_start(keyed_env(users, state, key))
    lines = [
        line for line in log.splitlines() if "MCPGATE_STATE_KEY" in line and line not in warnings_naming_the_key(log)
    ]
    assert len(lines) == 1 and "invalid setting" in lines[0] and "Traceback" not in log, log


def test_in_redis_the_keys_and_the_cluster_key_are_sealed_too(users: str, tmp_path: Path) -> None:
    with redis_server() as url:
        env = {**keyed_env(users, tmp_path / "unused", KEY), "REDIS_URL": url}
        with serving(env) as gw:
            assert admitted(gw, sign_in(gw.base, "alice", PASSWORD)["access_token"])
            n = public_n(gw)
        store: Any = redis.Redis.from_url(url)
        names = store.keys("mcpgate:oauth:secret:*")
        values = [base64.b64decode(store.get(name)) for name in names]
        assert len(values) == 2 and all(value.startswith(MAGIC) for value in values), names
        assert not any(n.encode() in value for value in values)
        assert store.get("mcpgate:cluster-key") is None  # the fleet's key is sealed too, under its own name
        assert base64.b64decode(store.get("mcpgate:secret:cluster-key")).startswith(MAGIC)
        store.close()
