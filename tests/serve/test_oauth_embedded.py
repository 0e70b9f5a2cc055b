"""The embedded authorization server (MCPGATE_AUTH_MODE=embedded): metadata, registration, the code grant with
PKCE S256 through the real sign-in pages, refresh rotation, reuse detection, revocation, the resource check,
transport security from the public URL, and state that survives a restart. Raw HTTP against gunicorn, and two
app instances on one state directory in-process."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import secrets
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import KeySet

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.serve.front.app import create_app
from mcpgate.serve.oauth import passwords
from mcpgate.serve.oauth.cimd import CimdError, ClientDocument
from mcpgate.serve.runtime import of as runtime_of
from tests.support import HEADERS, Gateway, init_body, serving
from tests.support.oauth import authorize_query, embedded_env, jwt_claims

PASSWORD = "correct horse battery staple"
CALLBACK = "http://127.0.0.1:47111/callback"
FORM = re.compile(r'<form method="post" action="(?P<action>[^"]*)">(?P<body>.*?)</form>', re.S)
HIDDEN = re.compile(r'<input type="hidden" name="(?P<name>[^"]+)" value="(?P<value>[^"]*)">')


class Site:
    """A gateway in embedded mode, driven like a client and a browser."""

    def __init__(self, base: str, http: Any = None, gw: Gateway | None = None) -> None:
        self.base, self.gw = base, gw
        self.resource = base + "/mcp"
        self.http = http or requests.Session()

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.http.post(self.base + path, allow_redirects=False, timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.http.get(self.base + path, allow_redirects=False, timeout=30, **kwargs)

    def register(self, **metadata: Any) -> dict[str, Any]:
        body = {"client_name": "Embedded test", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        reply = self.post("/register", json={**body, **metadata})
        assert reply.status_code == 201, reply.text
        return dict(reply.json())

    def query(self, client_id: str, verifier: str, **extra: str) -> dict[str, str]:
        return authorize_query(client_id, CALLBACK, self.resource, verifier, "st-" + secrets.token_hex(4), **extra)

    def authorize(self, query: dict[str, str]) -> Any:
        """The final answer of /authorize for `query` once alice signs in and allows (a 302 to the client)."""
        path = "/authorize?" + urlencode(query)
        reply = self.get(path)
        for _ in range(4):
            if reply.status_code != 200:
                return reply
            action, fields = self.form(reply.text)
            if 'name="username"' in reply.text:
                reply = self.post(action, data={**fields, "username": "alice", "password": PASSWORD})
                if reply.status_code == 303:
                    reply = self.get(path)
            else:
                reply = self.post(action, data={**fields, "action": "allow"})
        return reply

    @staticmethod
    def form(page: str) -> tuple[str, dict[str, str]]:
        match = FORM.search(page)
        assert match, page[:500]
        fields = {m["name"]: html.unescape(m["value"]) for m in HIDDEN.finditer(match["body"])}
        return html.unescape(match["action"]), fields

    def code(self, client: dict[str, Any], verifier: str, **extra: str) -> str:
        query = self.query(client["client_id"], verifier, **extra)
        reply = self.authorize(query)
        params = redirected(reply)
        assert params["state"] == [query["state"]] and params["iss"] == [self.base], params
        return params["code"][0]

    def exchange(self, client: dict[str, Any], code: str, verifier: str, **extra: str) -> Any:
        data = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": CALLBACK,
            "client_id": client["client_id"],
            "code_verifier": verifier,
            **extra,
        }
        return self.post("/token", data=data)

    def tokens(self, client: dict[str, Any]) -> dict[str, Any]:
        verifier = secrets.token_urlsafe(40)
        reply = self.exchange(client, self.code(client, verifier), verifier)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    def refresh(self, client: dict[str, Any], refresh_token: str, **extra: str) -> Any:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client["client_id"]}
        return self.post("/token", data={**data, **extra})

    def admitted(self, access_token: str) -> bool:
        """Whether the MCP endpoint lets this token in (a ping without a session: 400 past the guard, 401 not)."""
        headers = {**HEADERS, "Authorization": "Bearer " + access_token}
        status = self.post("/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=headers).status_code
        assert status in (400, 401), status
        return bool(status == 400)


def redirected(reply: Any) -> dict[str, list[str]]:
    assert reply.status_code == 302, (reply.status_code, reply.text[:500])
    location = reply.headers["Location"]
    assert location.startswith(CALLBACK + "?"), location
    return parse_qs(urlsplit(location).query)


def alice_env(state_dir: Path) -> dict[str, str]:
    return embedded_env(state_dir, f"alice:{passwords.make_hash(PASSWORD)}")


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oauth") / "state"


@pytest.fixture(scope="module")
def site(state_dir: Path) -> Iterator[Site]:
    assert "AUTHLIB_INSECURE_TRANSPORT" not in os.environ
    with serving(alice_env(state_dir), behind=True) as gw:
        yield Site(f"http://127.0.0.1:{gw.port}", gw=gw)


@pytest.fixture(scope="module")
def client(site: Site) -> dict[str, Any]:
    return site.register()


# -- metadata and registration ---------------------------------------------------------------------------------


def test_metadata_names_the_endpoints_and_s256_only(site: Site) -> None:
    reply = site.get("/.well-known/oauth-authorization-server")
    assert reply.status_code == 200
    meta = reply.json()
    base = site.base
    assert meta["issuer"] == base
    assert meta["authorization_endpoint"] == base + "/authorize"
    assert meta["token_endpoint"] == base + "/token"
    assert meta["registration_endpoint"] == base + "/register"
    assert meta["revocation_endpoint"] == base + "/revoke"
    assert meta["jwks_uri"] == base + "/jwks"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["scopes_supported"] == ["mcp"]
    assert meta["response_types_supported"] == ["code"]
    assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token"}
    assert set(meta["token_endpoint_auth_methods_supported"]) == {"none", "client_secret_basic", "client_secret_post"}
    assert "client_id_metadata_document_supported" not in meta  # no MCPGATE_OAUTH_CIMD_ALLOWLIST
    keys = site.get("/jwks").json()["keys"]
    assert len(keys) == 1 and keys[0]["kty"] == "RSA" and "d" not in keys[0] and keys[0]["kid"]


def test_metadata_says_when_client_id_documents_are_accepted(tmp_path: Path) -> None:
    app = in_process(tmp_path, MCPGATE_OAUTH_CIMD_ALLOWLIST="https://apps.example/")
    meta = app.test_client().get("/.well-known/oauth-authorization-server", headers=HOST).get_json()
    assert meta["client_id_metadata_document_supported"] is True


def test_a_public_client_gets_no_secret(site: Site, client: dict[str, Any]) -> None:
    assert "client_secret" not in client and client["token_endpoint_auth_method"] == "none"
    assert client["redirect_uris"] == [CALLBACK]
    assert set(client["grant_types"]) == {"authorization_code", "refresh_token"}


@pytest.mark.parametrize(
    "uri",
    ["javascript:alert(1)", "http://evil.example/cb", "https://app.example/cb#frag", "cursor://callback"],
)
def test_registration_refuses_redirect_uris_outside_the_rules(site: Site, uri: str) -> None:
    reply = site.post("/register", json={"redirect_uris": [uri], "token_endpoint_auth_method": "none"})
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_redirect_uri", reply.text


def test_registration_needs_a_redirect_uri_and_a_known_auth_method(site: Site) -> None:
    reply = site.post("/register", json={"client_name": "x", "token_endpoint_auth_method": "none"})
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_redirect_uri", reply.text
    reply = site.post("/register", json={"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "private_key_jwt"})
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_client_metadata", reply.text


# -- the code grant ----------------------------------------------------------------------------------------------


def test_code_flow_issues_an_rfc9068_token_the_mcp_endpoint_accepts(site: Site, client: dict[str, Any]) -> None:
    tokens = site.tokens(client)
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 3600 and tokens["scope"] == "mcp"
    access = tokens["access_token"]
    verified = jwt.decode(access, KeySet.import_key_set(site.get("/jwks").json()), algorithms=["RS256"])
    assert verified.header["typ"] == "at+jwt" and verified.header["kid"]
    claims = verified.claims
    assert claims["iss"] == site.base and claims["aud"] == site.resource and claims["sub"] == "user:alice"
    assert claims["client_id"] == client["client_id"] and claims["scope"] == "mcp" and claims["jti"]
    assert claims["exp"] - claims["iat"] == 3600
    headers = {**HEADERS, "Authorization": "Bearer " + access}
    assert site.post("/mcp", json=init_body(), headers=headers).status_code == 200
    assert site.post("/mcp", json=init_body(), headers=HEADERS).status_code == 401


def test_a_reused_code_is_refused_and_revokes_what_it_produced(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    code = site.code(client, verifier)
    first = site.exchange(client, code, verifier)
    assert first.status_code == 200, first.text
    tokens = first.json()
    assert site.admitted(tokens["access_token"])
    second = site.exchange(client, code, verifier)
    assert second.status_code == 400 and second.json()["error"] == "invalid_grant"
    assert not site.admitted(tokens["access_token"])
    assert site.refresh(client, tokens["refresh_token"]).json()["error"] == "invalid_grant"


def test_a_reused_refresh_token_revokes_its_family(site: Site, client: dict[str, Any]) -> None:
    tokens = site.tokens(client)
    rotated = site.refresh(client, tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    newer = rotated.json()
    assert newer["refresh_token"] != tokens["refresh_token"]
    assert jwt_claims(newer["access_token"])["aud"] == site.resource
    assert site.admitted(newer["access_token"])
    reused = site.refresh(client, tokens["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert site.refresh(client, newer["refresh_token"]).json()["error"] == "invalid_grant"
    assert not site.admitted(newer["access_token"])
    assert not site.admitted(tokens["access_token"])


def test_a_refresh_token_belongs_to_its_client(site: Site, client: dict[str, Any]) -> None:
    tokens = site.tokens(client)
    other = site.register(client_name="Other")
    assert site.refresh(other, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert site.refresh(client, tokens["refresh_token"]).status_code == 200


def test_a_wrong_pkce_verifier_is_refused(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    code = site.code(client, verifier)
    reply = site.exchange(client, code, secrets.token_urlsafe(40))
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_grant", reply.text
    reply = site.exchange(client, site.code(client, verifier), "")
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_request", reply.text


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"code_challenge_method": "plain"}, "plain"),
        ({"code_challenge_method": ""}, "no method (plain by default)"),
        ({"code_challenge": "", "code_challenge_method": ""}, "no PKCE"),
    ],
)
def test_pkce_s256_is_required_at_the_authorization_endpoint(
    site: Site, client: dict[str, Any], extra: dict[str, str], why: str
) -> None:
    query = site.query(client["client_id"], secrets.token_urlsafe(40), **extra)
    params = redirected(site.authorize(query))
    assert params["error"] == ["invalid_request"], (why, params)
    assert params["state"] == [query["state"]] and params["iss"] == [site.base]
    assert "code" not in params


def test_an_unregistered_redirect_uri_is_never_redirected_to(site: Site, client: dict[str, Any]) -> None:
    for uri in ("http://127.0.0.1:47111/other", "https://evil.example/callback"):
        query = site.query(client["client_id"], secrets.token_urlsafe(40), redirect_uri=uri)
        reply = site.get("/authorize?" + urlencode(query))
        assert reply.status_code == 400 and "Location" not in reply.headers, (uri, reply.status_code)
        assert "invalid_request" in reply.text


def test_a_loopback_redirect_may_come_back_on_another_port(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    query = site.query(client["client_id"], verifier, redirect_uri="http://127.0.0.1:50999/callback")
    reply = site.authorize(query)
    assert reply.status_code == 302 and reply.headers["Location"].startswith("http://127.0.0.1:50999/callback?")
    code = parse_qs(urlsplit(reply.headers["Location"]).query)["code"][0]
    wrong = site.exchange(client, code, verifier)  # redirect_uri must be the one the code was issued for
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"


def test_an_unknown_client_gets_an_error_page(site: Site) -> None:
    query = site.query("no-such-client", secrets.token_urlsafe(40))
    reply = site.get("/authorize?" + urlencode(query))
    assert reply.status_code == 400 and "Location" not in reply.headers and "invalid_client" in reply.text


def test_a_scope_not_offered_is_refused(site: Site, client: dict[str, Any]) -> None:
    query = site.query(client["client_id"], secrets.token_urlsafe(40), scope="mcp admin")
    params = redirected(site.authorize(query))
    assert params["error"] == ["invalid_scope"] and params["iss"] == [site.base]


def test_no_scope_asked_grants_the_offered_ones(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    reply = site.exchange(client, site.code(client, verifier, scope=""), verifier)
    assert reply.json()["scope"] == "mcp"


def test_another_resource_is_refused_at_both_endpoints(site: Site, client: dict[str, Any]) -> None:
    query = site.query(client["client_id"], secrets.token_urlsafe(40), resource="https://other.example/mcp")
    params = redirected(site.authorize(query))
    assert params["error"] == ["invalid_target"] and params["iss"] == [site.base]
    verifier = secrets.token_urlsafe(40)
    code = site.code(client, verifier, resource="")  # no resource named: the token is for ours anyway
    reply = site.exchange(client, code, verifier, resource="https://other.example/mcp")
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_target"
    tokens = site.tokens(client)
    reply = site.refresh(client, tokens["refresh_token"], resource="https://other.example/mcp")
    assert reply.json()["error"] == "invalid_target"


def test_without_a_resource_the_audience_is_still_the_gateway(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    reply = site.exchange(client, site.code(client, verifier, resource=""), verifier)
    assert jwt_claims(reply.json()["access_token"])["aud"] == site.resource


def test_no_code_or_token_reaches_the_log(site: Site, client: dict[str, Any]) -> None:
    verifier = secrets.token_urlsafe(40)
    code = site.code(client, verifier)
    tokens = site.exchange(client, code, verifier).json()
    rotated = site.refresh(client, tokens["refresh_token"]).json()
    site.refresh(client, tokens["refresh_token"])  # a reuse, refused
    assert site.gw is not None
    log = site.gw.log()
    assert "registered client" in log  # the log is the gateway's
    for value in (code, verifier, tokens["access_token"], tokens["refresh_token"], rotated["refresh_token"]):
        assert value not in log


# -- revocation --------------------------------------------------------------------------------------------------


def test_revoking_a_refresh_token_revokes_its_access_tokens(site: Site, client: dict[str, Any]) -> None:
    tokens = site.tokens(client)
    data = {"token": tokens["refresh_token"], "token_type_hint": "refresh_token", "client_id": client["client_id"]}
    assert site.post("/revoke", data=data).status_code == 200
    assert site.refresh(client, tokens["refresh_token"]).json()["error"] == "invalid_grant"
    assert not site.admitted(tokens["access_token"])


def test_revoking_an_access_token(site: Site, client: dict[str, Any]) -> None:
    tokens = site.tokens(client)
    other = site.register(client_name="Other")
    data = {"token": tokens["access_token"], "client_id": other["client_id"]}
    assert site.post("/revoke", data=data).status_code == 400  # not that client's token
    assert site.admitted(tokens["access_token"])
    data["client_id"] = client["client_id"]
    assert site.post("/revoke", data=data).status_code == 200
    assert not site.admitted(tokens["access_token"])
    assert site.refresh(client, tokens["refresh_token"]).status_code == 200  # the grant itself lives on
    unknown = {"token": "not-a-token", "client_id": client["client_id"]}
    assert site.post("/revoke", data=unknown).status_code == 200  # RFC 7009 2.2


# -- confidential clients and what is stored ---------------------------------------------------------------------


def test_a_confidential_client_authenticates_and_its_secret_is_stored_hashed(site: Site, state_dir: Path) -> None:
    client = site.register(token_endpoint_auth_method="client_secret_basic")
    secret = client["client_secret"]
    verifier = secrets.token_urlsafe(40)
    code = site.code(client, verifier)
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "code_verifier": verifier}
    wrong = site.post("/token", data=data, auth=(client["client_id"], secret + "x"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    public = site.post("/token", data={**data, "client_id": client["client_id"]})  # no secret: refused
    assert public.status_code in (400, 401) and public.json()["error"] == "invalid_client"
    reply = site.post("/token", data=data, auth=(client["client_id"], secret))
    assert reply.status_code == 200, reply.text  # the unauthenticated attempts did not spend the code
    refresh = reply.json()["refresh_token"]
    stored = b"".join(path.read_bytes() for path in state_dir.iterdir() if path.is_file())
    for value in (secret, code, refresh):
        assert value.encode() not in stored
    db = sqlite3.connect(state_dir / "oauth.sqlite3")
    try:
        row = db.execute("SELECT secret_hash FROM clients WHERE client_id = ?", (client["client_id"],)).fetchone()
    finally:
        db.close()
    assert row[0] == hashlib.sha256(secret.encode()).hexdigest()


def test_the_state_directory_is_private(site: Site, state_dir: Path) -> None:
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((state_dir / "oauth.sqlite3").stat().st_mode) == 0o600


# -- in-process: restart, transport ------------------------------------------------------------------------------

HOST = {"Host": "127.0.0.1:8123"}


def in_process(state_dir: Path, **extra: str) -> Any:
    env = {**alice_env(state_dir), "MCPGATE_PUBLIC_URL": "http://127.0.0.1:8123", **extra}
    return create_app(Settings.from_env(env))


class AppHttp:
    """requests-like calls on a Flask test client (for two app instances in one process)."""

    def __init__(self, app: Any, headers: dict[str, str]) -> None:
        self.client, self.headers = app.test_client(), headers

    def post(self, url: str, **kwargs: Any) -> Any:
        return self._call("post", url, **kwargs)

    def get(self, url: str, **kwargs: Any) -> Any:
        return self._call("get", url, **kwargs)

    def _call(self, method: str, url: str, allow_redirects: bool = False, timeout: float = 0, **kwargs: Any) -> Any:
        parts = urlsplit(url)
        path = parts.path + ("?" + parts.query if parts.query else "")
        headers = {**self.headers, **kwargs.pop("headers", {})}
        if "auth" in kwargs:
            user, password = kwargs.pop("auth")
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        reply = getattr(self.client, method)(path, headers=headers, **kwargs)
        return AppReply(reply.status_code, reply.headers, reply.get_data(as_text=True))


class AppReply:
    def __init__(self, status_code: int, headers: Any, text: str) -> None:
        self.status_code, self.headers, self.text = status_code, headers, text

    def json(self) -> Any:
        return json.loads(self.text)


def test_a_wider_state_file_is_narrowed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "oauth.sqlite3").touch(mode=0o644)
    os.chmod(state / "oauth.sqlite3", 0o644)
    in_process(state)
    assert stat.S_IMODE((state / "oauth.sqlite3").stat().st_mode) == 0o600


def test_a_restart_keeps_the_key_clients_and_refresh_tokens(tmp_path: Path) -> None:
    first = Site("http://127.0.0.1:8123", AppHttp(in_process(tmp_path), HOST))
    client = first.register()
    tokens = first.tokens(client)
    second = Site("http://127.0.0.1:8123", AppHttp(in_process(tmp_path), HOST))
    assert second.get("/jwks").json() == first.get("/jwks").json()
    assert second.admitted(tokens["access_token"])
    rotated = second.refresh(client, tokens["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    assert first.admitted(rotated.json()["access_token"])
    assert first.refresh(client, tokens["refresh_token"]).json()["error"] == "invalid_grant"  # seen by both
    assert not second.admitted(rotated.json()["access_token"])


def test_https_public_url_behind_a_plain_http_router(tmp_path: Path) -> None:
    """Heroku's router speaks http to the app: the public URL decides, not the request's scheme."""
    app = in_process(tmp_path, MCPGATE_PUBLIC_URL="https://gw.example")
    site = Site("https://gw.example", AppHttp(app, {"Host": "gw.example"}))
    site.http.client.environ_base["wsgi.url_scheme"] = "http"
    meta = site.get("/.well-known/oauth-authorization-server").json()
    assert meta["issuer"] == "https://gw.example" and meta["token_endpoint"] == "https://gw.example/token"
    client = site.register()
    tokens = site.tokens(client)
    assert jwt_claims(tokens["access_token"])["aud"] == "https://gw.example/mcp"


def test_registrations_are_bounded(tmp_path: Path) -> None:
    site = Site("http://127.0.0.1:8123", AppHttp(in_process(tmp_path, MCPGATE_OAUTH_CLIENT_LIMIT="2"), HOST))
    used = site.register()
    site.tokens(used)
    idle = site.register()
    newer = site.register()  # the table is full: the oldest registration never used makes room
    unknown = site.get("/authorize?" + urlencode(site.query(idle["client_id"], secrets.token_urlsafe(40))))
    assert unknown.status_code == 400 and "invalid_client" in unknown.text
    site.tokens(newer)
    full = site.post("/register", json={"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"})
    assert full.status_code == 503 and full.json()["error"] == "temporarily_unavailable", full.text
    db = sqlite3.connect(tmp_path / "oauth.sqlite3")
    try:
        with db:  # used clients are kept however old
            db.execute("UPDATE clients SET issued_at = issued_at - 90000")
    finally:
        db.close()
    assert site.tokens(used)["access_token"] and site.tokens(newer)["access_token"]


class Documents:
    """A stand-in for cimd.Resolver (its fetching is tested in test_oauth_cimd.py): one known document URL."""

    enabled = True

    def __init__(self, url: str) -> None:
        self.url = url

    def client(self, client_id: str) -> ClientDocument:
        if client_id != self.url:
            raise CimdError("the client id metadata document could not be fetched")
        return ClientDocument(client_id=client_id, client_name="Doc client", redirect_uris=(CALLBACK,))


def test_a_client_id_metadata_document_client_signs_in_without_registering(tmp_path: Path) -> None:
    url = "https://apps.example/client.json"
    app = in_process(tmp_path, MCPGATE_OAUTH_CIMD_ALLOWLIST="https://apps.example/")
    runtime_of(app).oauth.documents = Documents(url)
    site = Site("http://127.0.0.1:8123", AppHttp(app, HOST))
    tokens = site.tokens({"client_id": url})
    claims = jwt_claims(tokens["access_token"])
    assert claims["client_id"] == url and claims["aud"] == site.resource
    assert "refresh_token" not in tokens  # its document names only authorization_code (RFC 7591's default)
    query = site.query("https://apps.example/other.json", secrets.token_urlsafe(40))
    reply = site.get("/authorize?" + urlencode(query))
    assert reply.status_code == 400 and "Location" not in reply.headers and "invalid_client" in reply.text


def test_plain_http_off_loopback_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="MCPGATE_PUBLIC_URL must be https"):
        in_process(tmp_path, MCPGATE_PUBLIC_URL="http://gw.example")
