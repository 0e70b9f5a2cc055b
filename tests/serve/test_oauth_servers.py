"""OAuth with several named servers (MCPGATE_CONFIG) through gunicorn: each server is its own protected resource
(its URL, its metadata at the path form, its own MCPGATE_OAUTH_SCOPES); a token for one server is refused on
another (and on its HTTP+SSE paths); GET /servers takes a token for any of them; the embedded authorization
server issues a token for the server asked for (scheme and host in any case), refuses an unknown one and asks
for one when several are published, keeps a grant's refreshes on its server, and follows a reload; the official
SDK client signs in to a named server end to end.

Two servers, both the demo: "files" (scopes mcp, files) and "notes" (scope notes). Resource-server mode against
tests/fixtures/oidc_issuer.py (its /mint signs tokens with the aud and scope a test picks), embedded mode with
a local user and the stand-in browser (tests/browser.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
import requests

from mcpgate.config.settings import Settings
from mcpgate.core.wire import SESSION_ID
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth import passwords
from mcpgate.serve.oauth.grants import InvalidTargetError, Targets, check_resource, family_resource, new_family
from mcpgate.serve.oauth.identity import Identity, canonical_resource
from mcpgate.serve.oauth.jwt_verifier import claims_problem
from mcpgate.serve.oauth.resource import ResourceGuard
from tests.browser import Browser
from tests.support import (
    DEMO_ENTRY,
    Gateway,
    Reply,
    call,
    reply_message,
    serving,
    wait_for,
    write_config,
)
from tests.support.oauth import SdkUser, jwt_claims, mint_token, post_with_token, redeem_code

USER, PASSWORD = "ada", "servers-password"
CALLBACK = "http://127.0.0.1:47112/callback"  # never fetched: the browser stops there
WELL_KNOWN = "/.well-known/oauth-protected-resource"
SERVERS = {
    "files": {**DEMO_ENTRY, "mcpgate": {"oauth_scopes": ["mcp", "files"]}},
    "notes": {**DEMO_ENTRY, "mcpgate": {"oauth_scopes": ["notes"]}},
}
SEEN: list[str] = []  # every token this module sent: none may reach a gateway's log


def resource(gw: Gateway, name: str) -> str:
    return f"{gw.base}/servers/{name}/mcp"


def prm_url(gw: Gateway, name: str) -> str:
    return f"{gw.base}{WELL_KNOWN}/servers/{name}/mcp"


def admitted(gw: Gateway, name: str, token: str) -> int:
    """The guard's answer to a sessionless ping on a server: 400 past the guard (no session), else its refusal."""
    return post_with_token(gw, token, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, path=f"/servers/{name}/mcp").status


def refused_as(reply: Reply) -> str:
    assert reply.status in (401, 403), reply
    return reply.headers["www-authenticate"]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "servers.json"
    write_config(path, SERVERS)
    return path


@pytest.fixture(scope="module")
def rs(issuer: str, config: Path) -> Iterator[Gateway]:
    env = {
        "MCPGATE_CONFIG": str(config),
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_AUTH_MODE": "resource-server",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_LOG_LEVEL": "debug",
    }
    with serving(env) as gateway:
        yield gateway
    log = gateway.log()
    assert not [token for token in SEEN if token in log], "a token reached the gateway's log"


def mint(issuer: str, aud: Any, scope: str) -> str:
    token = mint_token(issuer, {"aud": aud, "scope": scope})
    SEEN.append(token)
    return token


# -- resource-server mode ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "scopes"), [("files", ["mcp", "files"]), ("notes", ["notes"])])
def test_each_server_has_its_own_protected_resource_metadata(rs: Gateway, issuer: str, name: str, scopes: Any) -> None:
    reply = rs.request("GET", f"{WELL_KNOWN}/servers/{name}/mcp")
    assert reply.status == 200 and reply.headers["cache-control"] == "public, max-age=300", reply
    assert reply.json() == {
        "resource": resource(rs, name),
        "authorization_servers": [issuer],
        "scopes_supported": scopes,
        "bearer_methods_supported": ["header"],
        "resource_name": f"mcpgate {name}",
    }
    # no token: 401 naming this server's metadata and scopes, on every one of its paths
    challenge = f'Bearer scope="{" ".join(scopes)}", resource_metadata="{prm_url(rs, name)}"'
    assert refused_as(post_with_token(rs, None, path=f"/servers/{name}/mcp")) == challenge
    sse = rs.request("GET", f"/servers/{name}/sse", headers={"Accept": "text/event-stream"})
    assert refused_as(sse) == challenge


def test_the_root_form_describes_the_gateway_and_unknown_servers_have_none(rs: Gateway, issuer: str) -> None:
    assert rs.request("GET", WELL_KNOWN).json() == {
        "resource": rs.base,
        "authorization_servers": [issuer],
        "scopes_supported": ["mcp", "files", "notes"],
        "bearer_methods_supported": ["header"],
        "resource_name": "mcpgate",
    }
    unknown = rs.request("GET", f"{WELL_KNOWN}/servers/nope/mcp")
    assert unknown.status == 404 and "files" not in unknown.body.decode(), unknown
    assert rs.request("GET", f"{WELL_KNOWN}/servers/files/sse").status == 404  # the resource is the /mcp URL


def test_a_token_for_one_server_works_there_and_nowhere_else(rs: Gateway, issuer: str) -> None:
    token = mint(issuer, resource(rs, "files"), "mcp files")
    reply = post_with_token(rs, token, path="/servers/files/mcp")
    assert reply.status == 200, reply
    session = {SESSION_ID: reply.headers[SESSION_ID.lower()], "MCP-Protocol-Version": "2025-11-25"}
    post_with_token(
        rs, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, path="/servers/files/mcp", **session
    )
    result = reply_message(
        post_with_token(rs, token, call("add", {"a": 2, "b": 3}), path="/servers/files/mcp", **session)
    )
    assert result["result"]["structuredContent"] == {"result": 5}, result
    elsewhere = post_with_token(rs, token, path="/servers/notes/mcp")
    assert elsewhere.status == 401, elsewhere
    assert refused_as(elsewhere) == (
        'Bearer error="invalid_token", error_description="the token is meant for another audience", '
        f'scope="notes", resource_metadata="{prm_url(rs, "notes")}"'
    )
    assert "another audience" in elsewhere.json()["error"]["message"]
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {token}"}
    sse = rs.request("GET", "/servers/notes/sse", headers=headers)
    assert sse.status == 401 and 'error="invalid_token"' in sse.headers["www-authenticate"], sse
    messages = post_with_token(
        rs, token, {"jsonrpc": "2.0", "id": 1, "method": "ping"}, path="/servers/notes/messages?session_id=x"
    )
    assert messages.status == 401, messages


def test_each_server_requires_its_own_scopes(rs: Gateway, issuer: str) -> None:
    token = mint(issuer, resource(rs, "notes"), "mcp files")  # the right audience, files' scopes
    reply = post_with_token(rs, token, path="/servers/notes/mcp")
    assert reply.status == 403, reply
    assert refused_as(reply) == (
        'Bearer error="insufficient_scope", error_description="the token lacks the scope notes", '
        f'scope="notes", resource_metadata="{prm_url(rs, "notes")}"'
    )
    assert admitted(rs, "notes", mint(issuer, resource(rs, "notes"), "notes")) == 400
    assert admitted(rs, "files", mint(issuer, resource(rs, "files"), "files")) == 403  # mcp missing


def test_an_audience_in_another_case_or_with_a_slash_is_the_same_resource(rs: Gateway, issuer: str) -> None:
    shouted = resource(rs, "files").replace("http://127.0.0.1", "HTTP://127.0.0.1") + "/"
    assert admitted(rs, "files", mint(issuer, shouted, "mcp files")) == 400
    assert admitted(rs, "files", mint(issuer, ["https://other.example/mcp", resource(rs, "files")], "mcp files")) == 400
    assert admitted(rs, "files", mint(issuer, resource(rs, "files") + "x", "mcp files")) == 401
    assert admitted(rs, "files", mint(issuer, rs.base + "/mcp", "mcp files")) == 401  # the single-server URL


def test_the_listing_takes_a_token_for_any_published_server(rs: Gateway, issuer: str) -> None:
    missing = rs.request("GET", "/servers")
    assert missing.status == 401, missing
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{rs.base}{WELL_KNOWN}"'
    for token in (mint(issuer, resource(rs, "notes"), "notes"), mint(issuer, rs.base, "")):
        listing = rs.request("GET", "/servers", headers={"Authorization": f"Bearer {token}"})
        assert listing.status == 200 and [s["name"] for s in listing.json()["servers"]] == ["files", "notes"]
    foreign = mint(issuer, "https://other.example/mcp", "mcp files notes")
    assert rs.request("GET", "/servers", headers={"Authorization": f"Bearer {foreign}"}).status == 401
    # an unknown server's name: the same check, then 404 naming the servers
    assert post_with_token(rs, None, path="/servers/nope/mcp").status == 401
    unknown = post_with_token(rs, mint(issuer, resource(rs, "files"), "mcp files"), path="/servers/nope/mcp")
    assert unknown.status == 404 and unknown.json()["error"]["data"] == {"servers": ["files", "notes"]}, unknown


def test_one_configured_audience_serves_every_server(issuer: str, config: Path) -> None:
    env = {
        "MCPGATE_CONFIG": str(config),
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_OAUTH_AUDIENCE": "api://mcpgate",
    }
    with serving(env) as gw:
        token = mint(issuer, "api://mcpgate", "mcp files notes")
        assert (admitted(gw, "files", token), admitted(gw, "notes", token)) == (400, 400)
        assert admitted(gw, "notes", mint(issuer, resource(gw, "notes"), "notes")) == 401  # not the audience
        assert admitted(gw, "notes", mint(issuer, "api://mcpgate", "mcp")) == 403  # scopes still per server
        assert gw.request("GET", f"{WELL_KNOWN}/servers/notes/mcp").json()["resource"] == resource(gw, "notes")


# -- embedded mode -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("embedded") / "servers.json"
    write_config(path, SERVERS)
    return path


@pytest.fixture(scope="module")
def embedded(embedded_config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    env = {
        "MCPGATE_CONFIG": str(embedded_config),
        "MCPGATE_CONFIG_POLL": "0.2",
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_AUTH_MODE": "embedded",
        "MCPGATE_STATE_DIR": str(tmp_path_factory.mktemp("state")),
        "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
    }
    with serving(env, behind=True) as gateway:
        yield gateway


class Signer:
    """A client registered at the embedded server, its user signing in with the stand-in browser."""

    def __init__(self, gw: Gateway) -> None:
        self.gw, self.browser = gw, Browser(USER, PASSWORD)
        body = {"client_name": "servers test", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        reply = requests.post(gw.base + "/register", json=body, timeout=30)
        assert reply.status_code == 201, reply.text
        self.client_id = str(reply.json()["client_id"])

    def authorize(self, verifier: str, scope: str, target: str | None) -> dict[str, str]:
        """The query the client's callback gets (code, or error)."""
        digest = hashlib.sha256(verifier.encode()).digest()
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": CALLBACK,
            "scope": scope,
            "state": secrets.token_hex(4),
            "code_challenge": base64.urlsafe_b64encode(digest).rstrip(b"=").decode(),
            "code_challenge_method": "S256",
        }
        if target is not None:
            query["resource"] = target
        outcome = self.browser.visit(self.gw.base + "/authorize?" + urlencode(query), stop_at=CALLBACK)
        assert outcome.url.startswith(CALLBACK), outcome.describe()
        return outcome.params

    def token(self, scope: str, target: str | None, **exchange: str) -> requests.Response:
        """The token endpoint's answer for a code asked for `target` (its resource; None: none named)."""
        verifier = secrets.token_urlsafe(40)
        params = self.authorize(verifier, scope, target)
        assert "code" in params, params
        return redeem_code(self.gw.base, params["code"], verifier, self.client_id, CALLBACK, **exchange)

    def tokens(self, scope: str, target: str | None, **exchange: str) -> dict[str, Any]:
        reply = self.token(scope, target, **exchange)
        assert reply.status_code == 200, reply.text
        SEEN.append(reply.json()["access_token"])
        return dict(reply.json())

    def refresh(self, refresh_token: str, **extra: str) -> requests.Response:
        data = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": self.client_id, **extra}
        return requests.post(self.gw.base + "/token", data=data, timeout=30)


@pytest.fixture(scope="module")
def signer(embedded: Gateway) -> Signer:
    return Signer(embedded)


def test_the_embedded_server_offers_every_servers_scopes(embedded: Gateway) -> None:
    meta = embedded.request("GET", "/.well-known/oauth-authorization-server").json()
    assert meta["scopes_supported"] == ["mcp", "files", "notes"]
    prm = embedded.request("GET", f"{WELL_KNOWN}/servers/notes/mcp").json()
    assert prm["resource"] == resource(embedded, "notes") and prm["authorization_servers"] == [embedded.base]


def test_the_embedded_server_issues_a_token_for_the_server_asked_for(embedded: Gateway, signer: Signer) -> None:
    shouted = resource(embedded, "notes").replace("http://127.0.0.1", "HTTP://127.0.0.1") + "/"
    tokens = signer.tokens("notes", shouted)
    claims = jwt_claims(tokens["access_token"])
    assert claims["aud"] == resource(embedded, "notes") and claims["scope"] == "notes", claims  # as published
    assert admitted(embedded, "notes", tokens["access_token"]) == 400
    assert admitted(embedded, "files", tokens["access_token"]) == 401
    # a refresh naming no resource keeps the grant's; naming another server is refused
    again = signer.refresh(tokens["refresh_token"])
    assert again.status_code == 200, again.text
    assert jwt_claims(again.json()["access_token"])["aud"] == resource(embedded, "notes")
    other = signer.refresh(again.json()["refresh_token"], resource=resource(embedded, "files"))
    assert other.status_code == 400 and other.json()["error"] == "invalid_target", other.text
    files = signer.tokens("mcp files", resource(embedded, "files"))
    assert jwt_claims(files["access_token"])["aud"] == resource(embedded, "files")
    assert admitted(embedded, "files", files["access_token"]) == 400
    assert admitted(embedded, "notes", files["access_token"]) == 401


def test_the_embedded_server_refuses_unknown_resources_and_wants_one(embedded: Gateway, signer: Signer) -> None:
    # (base + "/mcp" is the aggregate of both servers: a resource of its own, tests/serve/test_hub_oauth.py)
    for wrong in ("https://other.example/mcp", f"{embedded.base}/servers/nope/mcp", embedded.base + "/groups/x/mcp"):
        params = signer.authorize(secrets.token_urlsafe(40), "mcp", wrong)
        assert params.get("error") == "invalid_target" and params["iss"] == embedded.base, params
        assert "files" not in params.get("error_description", ""), params  # the names are not told here
    params = signer.authorize(secrets.token_urlsafe(40), "mcp", None)  # two servers: which one?
    assert params.get("error") == "invalid_target", params
    # a code for one server cannot be exchanged for another's token
    reply = signer.token("notes", resource(embedded, "notes"), resource=resource(embedded, "files"))
    assert reply.status_code == 400 and reply.json()["error"] == "invalid_target", reply.text
    # the gateway's own resource (the listing's) is one too: its token opens GET /servers and no server
    listing = signer.tokens("mcp", embedded.base)["access_token"]
    headers = {"Authorization": f"Bearer {listing}"}
    assert embedded.request("GET", "/servers", headers=headers).status == 200
    assert admitted(embedded, "files", listing) == 401


def test_the_embedded_server_follows_a_reload(embedded: Gateway, embedded_config: Path, signer: Signer) -> None:
    config = embedded_config
    extra = {**SERVERS, "extra": {**DEMO_ENTRY, "mcpgate": {"oauth_scopes": ["extra"]}}}
    prm = f"{WELL_KNOWN}/servers/extra/mcp"
    write_config(config, extra)
    try:
        assert wait_for(lambda: embedded.request("GET", prm).status == 200), embedded.log_tail()
        assert embedded.request("GET", prm).json()["scopes_supported"] == ["extra"]
        tokens = signer.tokens("extra", resource(embedded, "extra"))
        assert admitted(embedded, "extra", tokens["access_token"]) == 400
    finally:
        write_config(config, SERVERS)
    assert wait_for(lambda: embedded.request("GET", prm).status == 404), embedded.log_tail()
    params = signer.authorize(secrets.token_urlsafe(40), "extra", resource(embedded, "extra"))
    assert params.get("error") in ("invalid_target", "invalid_scope"), params
    refreshed = signer.refresh(tokens["refresh_token"])  # its server is gone
    assert refreshed.status_code == 400 and refreshed.json()["error"] == "invalid_target", refreshed.text


def test_one_named_server_is_the_default_resource(tmp_path: Path) -> None:
    config = write_config(tmp_path / "one.json", {"solo": DEMO_ENTRY})
    env = {
        "MCPGATE_CONFIG": config,
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_STATE_DIR": str(tmp_path / "state"),
        "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
    }
    with serving(env) as gw:
        tokens = Signer(gw).tokens("mcp", None)
        assert jwt_claims(tokens["access_token"])["aud"] == resource(gw, "solo")
        assert admitted(gw, "solo", tokens["access_token"]) == 400


# -- the official SDK client -------------------------------------------------------------------------------------


def test_the_sdk_client_signs_in_to_a_named_server(embedded: Gateway) -> None:
    person = SdkUser(Browser(USER, PASSWORD), "mcpgate servers (SDK)")
    try:
        url = resource(embedded, "notes")
        assert person.call_add(url) == {"result": 5}
        assert person.storage.tokens is not None and len(person.walks) == 1
        claims = person.claims()
        SEEN.append(person.storage.tokens.access_token)
        assert claims["aud"] == url and claims["scope"] == "notes" and claims["sub"] == f"user:{USER}", claims
        assert admitted(embedded, "files", person.storage.tokens.access_token) == 401
    finally:
        person.close()


# -- the pure parts, in process ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("HTTPS://GW.Example/servers/A/mcp/", "https://gw.example/servers/A/mcp"),  # the path keeps its case
        ("https://gw.example", "https://gw.example"),
        ("https://gw.example/", "https://gw.example"),
        ("api://MCPGATE", "api://mcpgate"),
        ("mcpgate-api", "mcpgate-api"),  # not a URL: as it is
    ],
)
def test_canonical_resource(given: str, canonical: str) -> None:
    assert canonical_resource(given) == canonical


def test_check_resource_picks_the_published_spelling_and_keeps_a_grant_on_its_server() -> None:
    a, b = "https://gw.example/servers/a/mcp", "https://gw.example/servers/b/mcp"
    two = Targets((a, b, "https://gw.example"), None, ("mcp",))

    def check(targets: Targets, *named: str, bound: str | None = None) -> str:
        request = SimpleNamespace(payload=SimpleNamespace(datalist={"resource": list(named)} if named else {}))
        return check_resource(request, targets, bound)  # type: ignore[arg-type]

    assert check(two, "HTTPS://GW.EXAMPLE/servers/a/mcp/") == a
    assert check(two, bound=b) == b and check(two, b, bound=b) == b
    assert check(Targets((a,), a, ()), bound=None) == a
    for named, bound in [((), None), (("https://gw.example/servers/c/mcp",), None), ((a, b), None), ((a,), b)]:
        with pytest.raises(InvalidTargetError):
            check(two, *named, bound=bound)
    with pytest.raises(InvalidTargetError):
        check(Targets((a,), a, ()), bound=b)  # its server was removed
    assert family_resource(new_family(a)) == a and family_resource("legacy-family-id") is None


class Fleetish:
    named = True

    def __init__(self, servers: dict[str, Settings]) -> None:
        self.servers = servers

    def settings_of(self, name: str) -> Settings | None:
        return self.servers.get(name)

    def server_settings(self) -> list[Settings]:
        return list(self.servers.values())


class Stub:
    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    def verify(self, token: str, client: str | None = None) -> Identity:
        return self.identity


def test_the_guard_checks_each_request_against_its_own_server() -> None:
    base = Settings.from_env({"MCPGATE_PUBLIC_URL": "https://gw.example/"})
    servers = {
        name: dataclasses.replace(base, path=f"/servers/{name}/mcp", oauth_scopes=scopes)
        for name, scopes in (("a", ("mcp",)), ("b", ("b",)))
    }
    for_a = Identity("i", "s", frozenset({"mcp"}), audiences=frozenset({"https://gw.example/servers/a/mcp"}))
    guard = ResourceGuard(base, Stub(for_a), ["https://gw.example"], Fleetish(servers))
    environ = {"HTTP_AUTHORIZATION": "Bearer t"}
    assert guard.authenticate(environ, servers["a"]) == "i#s"
    assert guard.authenticate(environ, None) == "i#s"  # the listing: any published server's token
    with pytest.raises(Refusal) as info:
        guard.authenticate(environ, servers["b"])
    assert info.value.status == 401 and "another audience" in info.value.headers["WWW-Authenticate"]
    assert "/.well-known/oauth-protected-resource/servers/b/mcp" in info.value.headers["WWW-Authenticate"]
    assert guard.metadata()["resource"] == "https://gw.example"
    assert guard.metadata()["scopes_supported"] == ["mcp", "b"]
    claims = {"iss": "i", "sub": "s", "exp": 2e9}
    assert claims_problem(claims, "i", None, 1e9) == "the token is meant for another audience"  # it needs one
    assert claims_problem({**claims, "aud": "x"}, "i", None, 1e9) is None  # any: the guard checks it
