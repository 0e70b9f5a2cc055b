"""A refresh of a user's rotating upstream tokens (serve/vault/upstream_refresh.py), one holder at a time: a loser of
the lease uses the tokens its holder saved instead of refreshing, a dead holder's lease lapses, and a refused
refresh after which newer tokens are found is not the end of the sign-in (the vault in SQLite, the authorization
server's token endpoint a small HTTP server of the test's that counts the refreshes it is sent)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import gevent

from mcpgate.config.settings import Settings
from mcpgate.serve.vault import upstream_oauth, upstream_refresh
from mcpgate.serve.vault.crypto import Cipher
from mcpgate.serve.vault.store import SqliteVaultStore
from mcpgate.serve.vault.upstream_oauth import UpstreamSignIn
from mcpgate.serve.vault.vault import Vault
from tests import support

PRINCIPAL = "https://gw.example#user:alice"
LEASE = upstream_refresh.LEASE + "up"


@contextlib.contextmanager
def token_endpoint(answer: Callable[[dict[str, str]], tuple[int, dict[str, Any]]]) -> Iterator[tuple[str, list[str]]]:
    """A token endpoint on a loopback port answering each refresh with `answer(form)`: its URL and the refresh
    tokens it was sent, in order."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            from urllib.parse import parse_qsl

            form = dict(parse_qsl(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()))
            seen.append(form.get("refresh_token", ""))
            status, body = answer(form)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def signin_with(tmp_path: Path, endpoint: str, expires_in: float = 10.0) -> UpstreamSignIn:
    """A worker's sign-in to server `up` holding alice's tokens AT-1/RT-1 (due: within the refresh margin)."""
    key = os.urandom(32)
    settings = Settings(public_url="https://gw.example", vault_key=base64.b64encode(key).decode())
    vault = Vault(SqliteVaultStore(str(tmp_path)), Cipher(key), settings)
    config = upstream_oauth.parse({"type": "user_oauth"}, "servers.up.auth")
    config.attach(vault)
    signin = config.upstream(settings, "up", "https://up.example/mcp")
    signin.write_tokens(PRINCIPAL, record("AT-1", "RT-1", endpoint, expires_in))
    vault.put(PRINCIPAL, "oauth-grant:up", "{}")
    return signin


def record(access: str, refresh: str, endpoint: str, expires_in: float = 3600.0) -> dict[str, Any]:
    tokens = {"access_token": access, "refresh_token": refresh, "expires_at": time.time() + expires_in}
    client = {"client_id": "c", "token_endpoint_auth_method": "none"}
    return {"client": client, "resource": "https://up.example/mcp", "token_endpoint": endpoint, "tokens": tokens}


def fresh(access: str, refresh: str) -> tuple[int, dict[str, Any]]:
    return 200, {"access_token": access, "token_type": "Bearer", "expires_in": 3600, "refresh_token": refresh}


REFUSED = (400, {"error": "invalid_grant", "error_description": "the refresh token was already used"})


def test_a_loser_of_the_lease_uses_the_tokens_its_holder_saved_and_sends_no_refresh(tmp_path: Path) -> None:
    with token_endpoint(lambda form: fresh("AT-x", "RT-x")) as (url, seen):
        signin = signin_with(tmp_path, url)
        store = signin.vault.store
        assert store is not None and store.lease(PRINCIPAL, LEASE, "another instance", 30.0)
        seen_tokens = dict(signin.tokens(PRINCIPAL)["tokens"])  # type: ignore[index]
        waiting = gevent.spawn(signin.refresh, PRINCIPAL, seen_tokens)
        gevent.sleep(0)  # it looked, lost the lease and waits (its next look after a sleep)
        assert not waiting.dead
        signin.write_tokens(PRINCIPAL, record("AT-2", "RT-2", url))  # the holder's refresh, saved
        store.release(PRINCIPAL, LEASE, "another instance")
        outcome = waiting.get(timeout=30)
    assert outcome.record is not None and outcome.record["tokens"]["access_token"] == "AT-2", outcome
    assert not outcome.over and seen == []  # nothing sent: RT-1 is the holder's to spend


def test_a_dead_holders_lease_lapses_and_the_waiter_refreshes_itself_once(tmp_path: Path) -> None:
    with token_endpoint(lambda form: fresh("AT-2", "RT-2")) as (url, seen):
        signin = signin_with(tmp_path, url)
        store = signin.vault.store
        assert store is not None and store.lease(PRINCIPAL, LEASE, "a holder that died", 0.3)
        outcome = signin.refresh(PRINCIPAL, dict(signin.tokens(PRINCIPAL)["tokens"]))  # type: ignore[index]
        assert outcome.record is not None and outcome.record["tokens"]["access_token"] == "AT-2", outcome
        assert seen == ["RT-1"] and signin.tokens(PRINCIPAL)["tokens"]["refresh_token"] == "RT-2"  # type: ignore[index]
        assert store.lease(PRINCIPAL, LEASE, "next", 30.0)  # released after the refresh


def test_a_refused_refresh_after_which_newer_tokens_are_found_is_not_the_end(tmp_path: Path) -> None:
    signin: list[UpstreamSignIn] = []

    def spent_meanwhile(form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        # another holder (whose lease lapsed) spent RT-1 and saved its tokens just before this one came
        signin[0].write_tokens(PRINCIPAL, record("AT-2", "RT-2", "http://unused.invalid/token"))
        return REFUSED

    with token_endpoint(spent_meanwhile) as (url, _seen):
        signin.append(signin_with(tmp_path, url))
        outcome = signin[0].refresh(PRINCIPAL, dict(signin[0].tokens(PRINCIPAL)["tokens"]))  # type: ignore[index]
    assert outcome.record is not None and outcome.record["tokens"]["access_token"] == "AT-2" and not outcome.over


def test_a_refused_refresh_with_nothing_newer_ends_it_and_an_unreachable_server_does_not(tmp_path: Path) -> None:
    with token_endpoint(lambda form: REFUSED) as (url, seen):
        signin = signin_with(tmp_path / "refused", url)
        token, _stamp = signin.token_source(PRINCIPAL)
        assert token.on_unauthorized(None, "Bearer AT-1") is False and seen == ["RT-1"]
        # the grant ends in a greenlet of its own: waited for until it has
        assert support.wait_for(lambda: not signin.signed_in(PRINCIPAL), 10, sleep=gevent.sleep)
    with token_endpoint(lambda form: REFUSED) as (url, _seen):
        pass  # (its port closed now: nobody answers there)
    signin = signin_with(tmp_path / "unreachable", url)
    token, _stamp = signin.token_source(PRINCIPAL)
    assert token.on_unauthorized(None, "Bearer AT-1") is False
    assert not token._ending  # no end was begun (its greenlet would end the grant): nothing to wait for
    assert signin.signed_in(PRINCIPAL)  # kept: the next call tries again
