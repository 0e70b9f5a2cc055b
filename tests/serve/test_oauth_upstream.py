"""Sign-in delegated to an upstream identity provider (serve/oauth/upstream.py): the allowlist and the identity
tables, then gunicorn in embedded mode signing in through tests/fixtures/oidc_issuer.py on loopback (state,
nonce and iss checked; a refused identity gets a clear page)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import re
import secrets
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from flask import Flask, redirect
from flask import request as flask_request
from werkzeug.serving import make_server

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.serve.front.app import create_app
from mcpgate.serve.oauth import upstream
from tests.support import Gateway
from tests.support.oauth import jwt_claims, oidc_issuer, redeem_code

CALLBACK = "http://127.0.0.1:9/callback"
ALLOWED = "alice@example.test,carol"


# -- tables -----------------------------------------------------------------------------------------------------


def test_github_identity_counts_only_verified_addresses() -> None:
    user = {"id": 583231, "login": "Octocat"}
    emails = [
        {"email": "Octo@Example.com", "verified": True, "primary": True},
        {"email": "old@example.com", "verified": False},
        "junk",
    ]
    who = upstream.github_identity(user, emails)
    assert who.subject == "github:583231" and who.label == "Octocat"
    assert who.names == {"octocat", "octo@example.com"} and who.subjects == {"github:583231"}
    for entry, allowed in [
        ("octocat", True),
        ("OCTOCAT", True),
        ("octo@example.com", True),
        ("old@example.com", False),
        ("583231", False),  # a bare entry is a login; the id counts only as github:583231
        ("github:583231", True),
        ("someone", False),
        ("*", True),
    ]:
        assert upstream.permitted(who, [entry]) is allowed, entry
    assert not upstream.permitted(who, [])
    with pytest.raises(upstream.UpstreamFailed):
        upstream.github_identity({"login": "x"}, [])


def test_oidc_identity_needs_a_verified_email_and_keeps_sub_exact() -> None:
    who = upstream.oidc_identity({"sub": "AbC", "email": "A@x.test", "email_verified": True})
    assert who.subject == "oidc:AbC" and who.label == "A@x.test"
    assert upstream.permitted(who, ["a@x.test"]) and upstream.permitted(who, ["AbC"])
    assert not upstream.permitted(who, ["abc"])  # a subject is case-sensitive
    unverified = upstream.oidc_identity({"sub": "AbC", "email": "A@x.test", "email_verified": False})
    assert not upstream.permitted(unverified, ["a@x.test"]) and unverified.label == "AbC"
    assert not upstream.permitted(upstream.oidc_identity({"sub": "AbC", "email": "A@x.test"}), ["a@x.test"])
    with pytest.raises(upstream.UpstreamFailed):
        upstream.oidc_identity({"email": "a@x.test", "email_verified": True})


def test_an_upstream_issuer_must_be_https_or_loopback() -> None:
    def settings(url: str) -> Settings:
        env = {
            "MCPGATE_OAUTH_UPSTREAM": url,
            "MCPGATE_PUBLIC_URL": "https://gw.example",
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_ID": "id",
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_SECRET": "secret",
            "MCPGATE_OAUTH_UPSTREAM_ALLOWED": "*",
        }
        return Settings.from_env(environ=env)

    for url in ("https://accounts.google.com", "http://127.0.0.1:5000", "github", "GitHub"):
        upstream.Upstream(settings(url))
    for url in ("http://idp.example.com", "ftp://x", "https://idp.example.com/?a=b", "accounts.google.com"):
        with pytest.raises(SettingsError):
            upstream.Upstream(settings(url))


# -- through gunicorn, against the loopback issuer --------------------------------------------------------------

_FORM = re.compile(r'<form method="post" action="(?P<action>[^"]*)">(?P<body>.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input type="hidden" name="(?P<name>[^"]+)" value="(?P<value>[^"]*)">')


class Flow:
    """One browser (a cookie jar) signing in through the upstream, step by step."""

    def __init__(self, site: Site) -> None:
        self.site, self.http = site, requests.Session()

    def get(self, url: str) -> requests.Response:
        return self.http.get(url, allow_redirects=False, timeout=30)

    def submit(self, page: requests.Response, **fields: str) -> requests.Response:
        match = _FORM.search(page.text)
        assert match, page.text[:500]
        hidden = {m["name"]: html.unescape(m["value"]) for m in _HIDDEN.finditer(match["body"])}
        url = self.site.base + html.unescape(match["action"])
        return self.http.post(url, data={**hidden, **fields}, allow_redirects=False, timeout=30)

    def to_callback(self) -> str:
        """Start at /authorize, press the upstream button, let the issuer approve: the callback URL."""
        login = self.get(self.site.base + self.site.path)
        assert login.status_code == 200 and "Sign in with " + self.site.issuer in login.text, login.text[:500]
        assert 'name="password"' not in login.text  # no local users here
        started = self.submit(login)
        assert started.status_code == 302, started.text[:300]
        assert started.headers["X-Frame-Options"] == "DENY"
        to_issuer = started.headers["Location"]
        query = parse_qs(urlsplit(to_issuer).query)
        assert to_issuer.startswith(self.site.issuer + "/authorize?")
        assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
        assert query["redirect_uri"] == [self.site.base + "/login/callback"]
        back = self.get(to_issuer)
        assert back.status_code == 302, back.text[:300]
        return str(back.headers["Location"])

    def callback(self, url: str) -> requests.Response:
        assert url.startswith(self.site.base + "/login/callback?"), url
        return self.get(url)


class Site:
    def __init__(self, gw: Gateway, issuer: str) -> None:
        self.gw, self.issuer = gw, issuer
        self.base = f"http://127.0.0.1:{gw.port}"
        self.resource = self.base + "/mcp"
        body = {"client_name": "Upstream Test", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        reply = requests.post(self.base + "/register", json=body, timeout=30)
        assert reply.status_code == 201, reply.text
        self.client_id = reply.json()["client_id"]
        self.verifier = secrets.token_urlsafe(40)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(self.verifier.encode()).digest()).rstrip(b"=")
        self.path = "/authorize?" + urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": CALLBACK,
                "scope": "mcp",
                "state": "st-up",
                "code_challenge": challenge.decode(),
                "code_challenge_method": "S256",
                "resource": self.resource,
            }
        )

    def user(self, name: str, **fields: Any) -> None:
        """Who the issuer signs in next."""
        reply = requests.post(self.issuer + "/config", json={"user": name, **fields}, timeout=30)
        assert reply.status_code == 200


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with oidc_issuer() as issuer:
        env = {
            "MCPGATE_AUTH_MODE": "embedded",
            "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
            "MCPGATE_STATE_DIR": str(tmp_path_factory.mktemp("state")),
            "MCPGATE_OAUTH_UPSTREAM": issuer,
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_ID": "test-client",
            "MCPGATE_OAUTH_UPSTREAM_CLIENT_SECRET": "test-secret",
            "MCPGATE_OAUTH_UPSTREAM_ALLOWED": ALLOWED,
        }
        gw = Gateway(env)
        try:
            gw.wait_ready()
            yield Site(gw, issuer)
        finally:
            gw.stop()


def code_of(reply: requests.Response) -> dict[str, list[str]]:
    assert reply.status_code == 302 and reply.headers["Location"].startswith(CALLBACK + "?"), reply.text[:300]
    return parse_qs(urlsplit(reply.headers["Location"]).query)


def test_an_allowed_upstream_identity_signs_in_and_consents(site: Site) -> None:
    site.user("alice")
    flow = Flow(site)
    back = flow.callback(flow.to_callback())
    assert back.status_code == 303 and back.headers["Location"] == site.path, back.text[:300]
    consent = flow.get(site.base + site.path)
    assert consent.status_code == 200 and "alice@example.test" in consent.text and site.client_id in consent.text
    granted = code_of(flow.submit(consent, action="allow"))
    token = redeem_code(site.base, granted["code"][0], site.verifier, site.client_id, CALLBACK)
    assert token.status_code == 200, token.text
    claims = jwt_claims(token.json()["access_token"])
    assert claims["sub"] == "oidc:alice"
    assert "test-secret" not in site.gw.log()


def test_a_subject_on_the_list_signs_in(site: Site) -> None:
    site.user("carol", email="carol@elsewhere.test")  # her address is not listed; her sub is
    flow = Flow(site)
    assert flow.callback(flow.to_callback()).status_code == 303


@pytest.mark.parametrize(
    ("name", "fields", "shown"),
    [
        ("bob", {}, "bob@example.test"),
        ("mallory", {"email": "alice@example.test", "email_verified": False}, "mallory"),  # unverified: no match
    ],
)
def test_an_identity_off_the_list_gets_a_clear_refusal(site: Site, name: str, fields: Any, shown: str) -> None:
    site.user(name, **fields)
    flow = Flow(site)
    refused = flow.callback(flow.to_callback())
    assert refused.status_code == 403, refused.text[:300]
    assert shown in refused.text and "does not let that account in" in refused.text
    assert "MCPGATE_OAUTH_UPSTREAM_ALLOWED" in refused.text and refused.headers["X-Frame-Options"] == "DENY"
    assert flow.get(site.base + site.path).status_code == 200  # still not signed in: the login page again
    assert 'action="/login/upstream?' in flow.get(site.base + site.path).text


def test_a_callback_with_another_browsers_state_is_refused(site: Site) -> None:
    site.user("alice")
    victim, attacker = Flow(site), Flow(site)
    attackers_callback = attacker.to_callback()
    victim.to_callback()  # the victim has a sign-in of its own in progress
    refused = victim.callback(attackers_callback)
    assert refused.status_code == 400 and "mismatching_state" in refused.text, refused.text[:300]
    fresh = Flow(site)  # a browser with no sign-in in progress at all
    assert fresh.callback(attackers_callback).status_code == 400


def test_a_callback_naming_another_issuer_is_refused(site: Site) -> None:
    site.user("alice")
    flow = Flow(site)
    url = flow.to_callback()
    forged = re.sub(r"iss=[^&]+", "iss=" + requests.utils.quote("https://evil.example", safe=""), url)
    refused = flow.callback(forged)
    assert refused.status_code == 400 and "another issuer" in refused.text, refused.text[:300]


def test_an_upstream_denial_is_a_clear_page(site: Site) -> None:
    requests.post(site.issuer + "/config", json={"deny": True}, timeout=30)
    try:
        flow = Flow(site)
        refused = flow.callback(flow.to_callback())
        assert refused.status_code == 400 and "access_denied" in refused.text, refused.text[:300]
    finally:
        requests.post(site.issuer + "/config", json={"deny": False}, timeout=30)


# -- the GitHub preset, in process, against a stand-in for GitHub on loopback -------------------------------------


@contextlib.contextmanager
def fake_github(login: str, emails: list[dict[str, Any]]) -> Iterator[str]:
    """github.com's OAuth endpoints and api.github.com's /user and /user/emails, on a loopback thread."""
    app = Flask("fake-github")
    codes: dict[str, str] = {}

    @app.get("/login/oauth/authorize")
    def authorize() -> Any:
        assert flask_request.args["code_challenge_method"] == "S256"
        assert flask_request.args["scope"] == "read:user user:email"
        code = secrets.token_hex(8)
        codes[code] = flask_request.args["redirect_uri"]
        return redirect(
            flask_request.args["redirect_uri"] + "?" + urlencode({"code": code, "state": flask_request.args["state"]})
        )

    @app.post("/login/oauth/access_token")
    def token() -> Any:
        form = flask_request.form
        ok = form.get("client_id") == "gh-id" and form.get("client_secret") == "gh-secret" and form["code"] in codes
        ok = ok and bool(form.get("code_verifier")) and codes.pop(form["code"]) == form.get("redirect_uri")
        if not ok:
            return {"error": "bad_verification_code"}, 200  # GitHub answers errors with 200
        return {"access_token": "gho_fake", "token_type": "bearer", "scope": "read:user,user:email"}

    def authorized() -> bool:
        return flask_request.headers.get("Authorization") == "Bearer gho_fake"

    @app.get("/user")
    def user() -> Any:
        return ({"id": 4242, "login": login}, 200) if authorized() else ({"message": "Bad credentials"}, 401)

    @app.get("/user/emails")
    def user_emails() -> Any:
        return (emails, 200) if authorized() else ({"message": "Bad credentials"}, 401)

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(10)


@pytest.mark.parametrize(
    ("allowed", "status"), [("octocat", 303), ("octo@example.com", 303), ("old@example.com", 403), ("github:4242", 303)]
)
def test_the_github_preset(tmp_path: Any, monkeypatch: pytest.MonkeyPatch, allowed: str, status: int) -> None:
    emails = [{"email": "Octo@example.com", "verified": True}, {"email": "old@example.com", "verified": False}]
    with fake_github("OctoCat", emails) as github:
        monkeypatch.setitem(upstream.GITHUB, "authorize_url", github + "/login/oauth/authorize")
        monkeypatch.setitem(upstream.GITHUB, "access_token_url", github + "/login/oauth/access_token")
        monkeypatch.setitem(upstream.GITHUB, "api_base_url", github + "/")
        settings = Settings.from_env(
            environ={
                "MCPGATE_AUTH_MODE": "embedded",
                "MCPGATE_PUBLIC_URL": "http://localhost",
                "MCPGATE_STATE_DIR": str(tmp_path),
                "MCPGATE_OAUTH_UPSTREAM": "github",
                "MCPGATE_OAUTH_UPSTREAM_CLIENT_ID": "gh-id",
                "MCPGATE_OAUTH_UPSTREAM_CLIENT_SECRET": "gh-secret",
                "MCPGATE_OAUTH_UPSTREAM_ALLOWED": allowed,
            }
        )
        browser = create_app(settings).test_client()
        body = {"client_name": "GH Test", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        client_id = browser.post("/register", json=body).get_json()["client_id"]
        challenge = base64.urlsafe_b64encode(hashlib.sha256(b"v" * 50).digest()).rstrip(b"=").decode()
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "scope": "mcp",
            "state": "s",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        login = browser.get("/authorize?" + urlencode(query))
        assert login.status_code == 200 and "Sign in with GitHub" in login.text, login.text[:300]
        match = _FORM.search(login.text)
        assert match
        hidden = {m["name"]: html.unescape(m["value"]) for m in _HIDDEN.finditer(match["body"])}
        started = browser.post(html.unescape(match["action"]), data=hidden)
        assert started.status_code == 302 and started.headers["Location"].startswith(github), started.text
        back = requests.get(started.headers["Location"], allow_redirects=False, timeout=30)
        callback = urlsplit(back.headers["Location"])
        assert callback.path == "/login/callback"
        done = browser.get(callback.path + "?" + callback.query)
        assert done.status_code == status, done.text[:400]
        if status == 303:
            consent = browser.get(done.headers["Location"])
            assert "OctoCat" in consent.text and client_id in consent.text
        else:
            assert "OctoCat" in done.text and "does not let that account in" in done.text
