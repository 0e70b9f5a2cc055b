"""Per-user OAuth to a remote upstream, its security (issue 26): a sign-in's state is bound to the principal who
started it (another signed-in user presenting it is refused and keeps nothing; the owner can still finish it), is
single use, and the sign-in asks with PKCE S256 and the upstream as the resource; the upstream tokens kept for a
user show in no log, /healthz or /metrics of either server; the gateway's own token never reaches the upstream.
The real servers of tests/serve/test_upstream_signin.py (its `site` fixture)."""

from __future__ import annotations

import base64
import hashlib
import json
from urllib.parse import parse_qsl, urlsplit

import requests

from mcpgate.serve.vault.crypto import Cipher, key_bytes
from mcpgate.serve.vault.store import SqliteVaultStore
from tests.serve.test_upstream_signin import SERVER, USERS, Site, site  # noqa: F401 - the fixture


def test_a_state_started_by_one_user_is_refused_for_another_and_stays_the_owners(site: Site) -> None:  # noqa: F811
    authorize = site.start_signin("alice")
    params = site.upstream_code("alice", authorize)
    replayed = site.callback("bob", params)  # bob's browser, signed in to the gateway as bob, with alice's code
    assert replayed.status_code == 400 and "not started by you" in replayed.text, replayed.text
    refused = site.initialize("bob")
    if refused.get("error") is None:  # bob may have signed in upstream in an earlier test
        site.sign_out_upstream("bob")
        refused = site.initialize("bob")
    assert refused["error"]["code"] == -32042, refused
    finished = site.callback("alice", params)  # the owner finishes it: nothing of it was spent by bob's attempt
    assert finished.status_code == 200 and "Signed in" in finished.text, finished.text
    again = site.callback("alice", params)  # single use
    assert again.status_code == 400 and "not started by you" in again.text, again.text


def test_the_signin_asks_with_pkce_s256_and_the_upstream_as_resource(site: Site) -> None:  # noqa: F811
    query = dict(parse_qsl(urlsplit(site.start_signin("bob")).query))
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43, query
    assert query["resource"] == site.upstream.url and query["redirect_uri"] == site.page + "/callback", query
    assert len(query["state"]) >= 32, query


def test_upstream_tokens_never_in_logs_healthz_or_metrics_and_the_clients_token_never_upstream(
    site: Site,  # noqa: F811
) -> None:
    for user in USERS:
        if site.initialize(user).get("error"):
            site.sign_in_upstream(user)
    secrets_seen = []
    store = SqliteVaultStore(str(site.state))
    cipher = Cipher(key_bytes(site.key))
    for user in USERS:
        principal = site.principal(user)
        sealed = store.get(principal, f"oauth:{SERVER}")
        assert sealed is not None, user
        record = json.loads(cipher.open(principal, f"oauth:{SERVER}", sealed))
        tokens = record["tokens"]
        secrets_seen += [tokens["access_token"], tokens.get("refresh_token") or tokens["access_token"]]
    store.close()
    assert len(set(secrets_seen)) == 4  # two users, two tokens each, all different
    shown = [site.gateway.log(), site.upstream.log()]
    for gw in (site.gateway, site.upstream):
        shown.append(requests.get(gw.base + "/healthz", timeout=30).text)
        shown.append(requests.get(gw.base + "/metrics", timeout=30).text)
    for text in shown:
        for secret in secrets_seen:
            assert secret not in text
            assert hashlib.sha256(secret.encode()).hexdigest() not in text
    # the gateway's own tokens (the MCP clients') are never what the upstream saw: its principals are its users
    for principal in site.upstream_principals():
        assert any(upstream_user in principal for upstream_user in USERS.values()), principal
        assert site.gateway.base not in principal
    for token in site.tokens.values():
        assert base64.urlsafe_b64encode(token.encode()).decode()[:40] not in site.upstream.log()
        assert token not in site.upstream.log()
