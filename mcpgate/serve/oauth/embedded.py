"""The embedded authorization server (MCPGATE_AUTH_MODE=embedded): the gateway signs its users in and issues
its own access tokens.

    install(app: Flask, settings: Settings, targets=None, any_audience=False, cluster=None)
        -> tuple[Verifier, EmbeddedServer]   # (the token verifier, the server: its issuer URL, its parts)

registers on the app:

    GET  /.well-known/oauth-authorization-server   RFC 8414 metadata (issuer = MCPGATE_PUBLIC_URL, no trailing /)
    POST /token                                    authorization_code (PKCE S256) and refresh_token
    POST /register                                 RFC 7591 dynamic client registration (open)
    POST /revoke                                   RFC 7009, refresh and access tokens
    GET  /jwks                                     the public signing key
    /authorize (and the upstream sign-in pages)    signin.blueprint(server, settings)

`targets()` names, at request time, the resources tokens may be asked for and the scopes offered (grants.Targets:
every published server's URL, a reload changes them; default: MCPGATE_PUBLIC_URL plus MCPGATE_PATH and
MCPGATE_OAUTH_SCOPES). The verifier accepts the access tokens signed here that nobody revoked (their jti, looked
up in storage) for the resource URL (any_audience: for any, the guard checking each request's own).

The state (storage.py) is in SQLite under MCPGATE_STATE_DIR, or in Redis when REDIS_URL is set (redis_storage.py:
every instance of a fleet shares it, through the `cluster`'s client when this worker is one of them); while
Redis fails, the endpoints and pages answer 503.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2.rfc6749 import InvalidRequestError, OAuth2Error, OAuth2Request
from authlib.oauth2.rfc6749.requests import JsonRequest
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint, InvalidClientMetadataError, InvalidRedirectURIError
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from flask import Blueprint, Flask, Response, jsonify, request

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.observe import refusals
from mcpgate.serve.cluster.instances import Cluster
from mcpgate.serve.front import auth
from mcpgate.serve.oauth import client_metadata, redirects, signin
from mcpgate.serve.oauth.grants import Targets
from mcpgate.serve.oauth.identity import Verifier
from mcpgate.serve.oauth.jwt_verifier import JwtVerifier
from mcpgate.serve.oauth.keys import ALGORITHM, EmbeddedKeys
from mcpgate.serve.oauth.models import AUTH_METHODS, GRANT_TYPES, AccessToken, RefreshToken
from mcpgate.serve.oauth.ratelimit import FailureLimit, client_key
from mcpgate.serve.oauth.sealing import sealer_of
from mcpgate.serve.oauth.server import EmbeddedServer
from mcpgate.serve.oauth.storage import SqliteStorage, Storage, access_binding

log = logging.getLogger("mcpgate.oauth.embedded")

MAX_BODY_BYTES = 64 * 1024  # a registration or token request is a few hundred bytes
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def transport_problem(public_url: str) -> str | None:
    """Why the embedded server may not run at this public URL: it must be https, or http on a loopback host."""
    parts = urlsplit(public_url)
    if parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS):
        return None
    return "MCPGATE_PUBLIC_URL must be https (or http on a loopback host) for MCPGATE_AUTH_MODE=embedded"


def metadata(server: EmbeddedServer) -> dict[str, Any]:
    """RFC 8414 authorization server metadata."""
    issuer = server.issuer
    document: dict[str, Any] = {
        "issuer": issuer,
        "authorization_endpoint": issuer + "/authorize",
        "token_endpoint": issuer + "/token",
        "registration_endpoint": issuer + "/register",
        "revocation_endpoint": issuer + "/revoke",
        "jwks_uri": issuer + "/jwks",
        "scopes_supported": list(server.offered),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": list(GRANT_TYPES),
        "token_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "revocation_endpoint_auth_methods_supported": list(AUTH_METHODS),
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
    }
    if server.documents.enabled:
        document["client_id_metadata_document_supported"] = True
    return document


class Registration(ClientRegistrationEndpoint):  # type: ignore[misc]
    """Open dynamic registration; redirect URIs by redirects.problem; every field and the whole record bounded
    (client_metadata.py); a secret only for confidential clients (kept as its fingerprint). When the table is
    full the oldest registration never used is forgotten (storage.add_client)."""

    server: EmbeddedServer

    def authenticate_token(self, request: JsonRequest) -> str:
        return "open"  # anyone may register; what a client may do is decided at /authorize, by the user

    def get_server_metadata(self) -> dict[str, Any]:
        return metadata(self.server)

    def create_registration_response(self, request: JsonRequest) -> tuple[int, dict[str, Any], list[Any]]:
        settings = self.server.settings
        if not isinstance(request.payload.data, dict):
            raise InvalidRequestError("the registration request must be a JSON object")
        uris = request.payload.data.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            raise InvalidRedirectURIError("redirect_uris is required: a list of redirect URIs")
        problem = client_metadata.fields_problem(request.payload.data)
        if problem:
            raise InvalidClientMetadataError(safe_description(problem))
        for uri in uris:
            problem = redirects.problem(uri, settings.oauth_redirect_allowlist)
            if problem:
                raise InvalidRedirectURIError(safe_description(problem))
        registered = self.extract_client_metadata(request)
        registered.setdefault("grant_types", list(GRANT_TYPES))
        registered.setdefault("response_types", ["code"])
        problem = client_metadata.size_problem(registered, settings.oauth_client_metadata_bytes)
        if problem:
            raise InvalidClientMetadataError(safe_description(problem))
        return self.store(request, registered)

    def store(self, request: JsonRequest, registered: dict[str, Any]) -> tuple[int, dict[str, Any], list[Any]]:
        info = self.generate_client_info(request)
        if registered["token_endpoint_auth_method"] == "none":
            info.pop("client_secret")
            info.pop("client_secret_expires_at")
        settings = self.server.settings
        limit, unused_ttl = settings.oauth_client_limit, settings.oauth_unused_client_ttl
        secret = info.get("client_secret")
        if not self.server.storage.add_client(info["client_id"], secret, registered, limit, unused_ttl):
            log.warning("registration refused: %d clients registered, all used (MCPGATE_OAUTH_CLIENT_LIMIT)", limit)
            raise TemporarilyUnavailable("too many registered clients: try again later")
        log.info("registered client %s (%r)", info["client_id"], registered.get("client_name", "no name"))
        return 201, {**registered, **info}, [("Content-Type", "application/json"), ("Cache-Control", "no-store")]

    def save_client(self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any) -> None:
        raise NotImplementedError  # create_registration_response stores it


class Revocation(RevocationEndpoint):  # type: ignore[misc]
    """RFC 7009: a refresh token revokes its family (its access tokens too); an access token its jti."""

    CLIENT_AUTH_METHODS = list(AUTH_METHODS)  # noqa: RUF012 - Authlib's class attribute
    server: EmbeddedServer

    def query_token(self, token_string: str, token_type_hint: str | None) -> RefreshToken | AccessToken | None:
        record = self.server.storage.refresh_record(token_string)
        if record is not None:
            return RefreshToken(record)
        claims = self.server.access_claims(token_string)
        if claims is None or self.server.storage.access_revoked(str(claims.get("jti")), access_binding(claims)):
            return None  # only the token issued under its jti may revoke it
        return AccessToken(claims)

    def revoke_token(self, token: RefreshToken | AccessToken, request: OAuth2Request) -> None:
        if isinstance(token, RefreshToken):
            self.server.storage.revoke_family(token.record.family)
        else:
            self.server.storage.revoke_access(str(token.claims.get("jti")))


class TemporarilyUnavailable(OAuth2Error):  # type: ignore[misc]
    error = "temporarily_unavailable"
    status_code = 503


def safe_description(text: str) -> str:
    """RFC 6749's error_description alphabet: printable ASCII without " and backslash."""
    return "".join(ch if " " <= ch <= "~" and ch not in '"\\' else "?" for ch in text)


def registration_limit(settings: Settings) -> Callable[[], Response | None]:
    """The before-request check of POST /register: at most MCPGATE_OAUTH_REGISTER_LIMIT registrations per client
    address a minute (per worker), each attempt counted; past it 429 with Retry-After."""
    limit = FailureLimit(settings.oauth_register_limit)
    proxies = auth.networks(settings.forwarded_for_proxies)

    def check() -> Response | None:
        key = client_key(request.environ, proxies)
        wait = limit.retry_after(key)
        if wait:
            log.warning("registration from %s refused: more than %d a minute", key, limit.limit)
            refusals.count(refusals.RATE_LIMIT)
            description = f"too many registrations from this address: try again in {wait} seconds"
            response = jsonify({"error": "temporarily_unavailable", "error_description": description})
            response.status_code = 429
            response.headers.update({"Retry-After": str(wait), "Cache-Control": "no-store"})
            return response
        limit.failed(key)  # counts the attempt
        return None

    return check


def routes(server: EmbeddedServer) -> Blueprint:
    bp = Blueprint("oauth_server", __name__)
    registration_allowed = registration_limit(server.settings)

    @bp.before_request
    def bounded_body() -> Response | None:
        if (request.content_length or 0) > MAX_BODY_BYTES:
            return Response("request body too large\n", status=413, mimetype="text/plain")
        return None

    @bp.get("/.well-known/oauth-authorization-server")
    def server_metadata() -> Response:
        response = jsonify(metadata(server))
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response

    @bp.get("/jwks")
    def jwks() -> Response:
        response = jsonify(server.keys.jwks())
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response

    @bp.post("/token")
    def token() -> Response:
        response: Response = server.create_token_response(request)
        return response

    @bp.post("/register")
    def register() -> Response:
        refused = registration_allowed()
        if refused is not None:
            return refused
        response: Response = server.create_endpoint_response("client_registration", request)
        return response

    @bp.post("/revoke")
    def revoke() -> Response:
        response: Response = server.create_endpoint_response("revocation", request)
        return response

    return bp


def revoked_check(server: EmbeddedServer) -> Any:
    def check(claims: Any) -> str | None:
        jti = claims.get("jti")  # its row binds every claim: one signed later with any claim changed is refused
        if not isinstance(jti, str) or server.storage.access_revoked(jti, access_binding(claims)):
            return "the token was revoked"
        return None

    return check


def storage_for(settings: Settings, cluster: Cluster | None = None) -> Storage:
    """SQLite under MCPGATE_STATE_DIR; with REDIS_URL, Redis (through this worker's `cluster`'s client when there
    is one), waited for briefly: an instance that cannot reach it does not start."""
    sealer = sealer_of(settings.state_key)
    if not settings.redis_url:
        return SqliteStorage(settings.state_dir, sealer)
    from mcpgate.serve.oauth.redis_storage import RedisStorage, StorageUnavailable

    if cluster is not None:
        storage = RedisStorage(cluster.redis, sealer=sealer)
    else:
        storage = RedisStorage.from_url(settings.redis_url, sealer=sealer)
    try:
        storage.wait_ready()
    except StorageUnavailable as exc:
        raise SettingsError(str(exc)) from None
    return storage


def unavailable(exc: Exception) -> Response:
    """The answer of an OAuth endpoint or page while the state store (Redis) fails: 503, never a traceback."""
    log.warning("OAuth request refused: %s", exc)
    description = safe_description(str(exc)) + "; try again shortly"
    if request.path in ("/token", "/register", "/revoke"):
        response = jsonify({"error": "temporarily_unavailable", "error_description": description})
    else:
        response = Response(f"Service unavailable: {description}\n", mimetype="text/plain")
    response.status_code = 503
    response.headers.update({"Retry-After": "5", "Cache-Control": "no-store"})
    return response


def build(
    settings: Settings,
    targets: Callable[[], Targets] | None = None,
    storage: Storage | None = None,
) -> EmbeddedServer:
    problem = transport_problem(settings.public_url)
    if problem:
        raise SettingsError(problem)
    storage = storage or SqliteStorage(settings.state_dir, sealer_of(settings.state_key))
    server = EmbeddedServer(settings, storage, EmbeddedKeys(storage), targets)
    server.register_endpoint(Registration(server))
    server.register_endpoint(Revocation(server))
    AuthorizationServerMetadata(metadata(server)).validate()
    return server


def install(
    app: Flask,
    settings: Settings,
    targets: Callable[[], Targets] | None = None,
    any_audience: bool = False,
    cluster: Cluster | None = None,
) -> tuple[Verifier, EmbeddedServer]:
    """Register the authorization server's endpoints and pages on `app`; the verifier of its access tokens and
    the server (its issuer URL)."""
    server = build(settings, targets, storage_for(settings, cluster))
    if settings.redis_url:
        from mcpgate.serve.oauth.redis_storage import StorageUnavailable

        app.register_error_handler(StorageUnavailable, unavailable)
    app.register_blueprint(routes(server))
    app.register_blueprint(signin.blueprint(server, settings))
    verifier = JwtVerifier(
        server.issuer,
        None if any_audience else settings.resource_url,
        server.keys,
        algorithms=(ALGORITHM,),
        extra_check=revoked_check(server),
    )
    where = "Redis" if settings.redis_url else settings.state_dir or "the default directory"  # never the URL
    log.info("embedded authorization server %s (state in %s)", server.issuer, where)
    return verifier, server
