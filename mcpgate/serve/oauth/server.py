"""Authlib's authorization server wired to the gateway's storage, keys and settings.

The interface the sign-in pages (signin.py, serving /authorize) use:

    server.begin(request: flask.Request) -> Pending
        # the authorization request, validated (client, redirect URI, response_type code, scopes, PKCE S256,
        # resource); raises OAuthProblem (an Authlib OAuth2Error: .error, .description, .redirect)
    server.finish(request: flask.Request, subject: str | None) -> flask.Response
        # validates the same request again and answers it: a 302 to the client's redirect URI with a code
        # (subject signed in and consenting) or error=access_denied (subject None), always with state and iss
        # (RFC 9207); a request that no longer validates gets problem_response
    server.problem_response(exc: Exception, request: flask.Request) -> flask.Response   # OAuthProblem, or any
        # a 302 to the client with error, error_description, state and iss when the client and its redirect URI
        # were recognised and the redirect URI is trusted (redirect_trusted); otherwise a 400 HTML page (never a
        # redirect to an unchecked URI, nor to a web site no one has approved)
    server.storage: Storage                 # consented / record_consent / secret (storage.py)
    server.issuer: str

`request` is read for its method, query string and form (Authlib's request.values): the pages may POST the
login and consent forms back to /authorize?<the original query>.

Errors before anyone approved the client stay on this server's page (RFC 9700 4.11.2): registration is open, so
an https redirect URI may be anyone's web site, and sending a browser there with an error, no user interaction
needed, would make this server an open redirector that lends its name to a phishing page. An error goes back to
the client only when its redirect URI is one no web site can be (loopback http, a non-web scheme, an exact URI
the operator listed) or the client is trusted (a user approved it: it got a code; or a client id metadata
document on the operator's allowlist). A user's own "Deny" always goes back (access_denied).

Transport security is decided once, from MCPGATE_PUBLIC_URL (https, or http on a loopback host: checked by
embedded.install), never from the request: Authlib's OAuth2Request checks the URL it is given, so it is given
the public URL of the path instead of the URL the app saw (Heroku's router speaks http to the app).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import flask
from authlib.common.urls import add_params_to_uri
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.integrations.flask_oauth2.requests import (
    FlaskJsonPayload,
    FlaskJsonRequest,
    FlaskOAuth2Payload,
    FlaskOAuth2Request,
)
from authlib.oauth2.rfc6749 import InvalidClientError, InvalidScopeError, OAuth2Error, OAuth2Request
from authlib.oauth2.rfc6749.requests import JsonRequest
from authlib.oauth2.rfc6749.util import scope_to_list
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from authlib.oauth2.rfc9207 import IssuerParameter
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from mcpgate.config.settings import Settings
from mcpgate.serve.oauth import cimd, redirects
from mcpgate.serve.oauth.grants import AuthorizationCodeGrant, RefreshTokenGrant, S256Only, Targets
from mcpgate.serve.oauth.keys import ALGORITHM, EmbeddedKeys
from mcpgate.serve.oauth.models import Client, User
from mcpgate.serve.oauth.storage import RefreshRecord, Storage, access_binding

REFRESH_BYTES = 32


@dataclass(frozen=True)
class Pending:
    """A validated authorization request, for the sign-in and consent pages."""

    client_id: str
    client_name: str  # "" when the client gave none: show client_id
    redirect_uri: str
    scopes: tuple[str, ...]
    resource: str
    state: str | None


class OAuthProblem(OAuth2Error):  # type: ignore[misc]
    """An authorization request that cannot go on (an Authlib OAuth2Error: error, description). `redirect` is
    the client's redirect URI with the error (the client and URI were recognised), else None: the error is for
    the person at the browser only."""

    def __init__(self, error: str, description: str, redirect: str | None) -> None:
        super().__init__(description=description, error=error)
        self.redirect = redirect


class PublicRequest(FlaskOAuth2Request):  # type: ignore[misc]
    """Authlib's view of a Flask request, at its public URL (the transport check reads that URL)."""

    def __init__(self, request: flask.Request, base: str) -> None:
        OAuth2Request.__init__(self, request.method, public_url(request, base), headers=request.headers)
        self._request = request
        self.payload = FlaskOAuth2Payload(request)


class PublicJsonRequest(FlaskJsonRequest):  # type: ignore[misc]
    def __init__(self, request: flask.Request, base: str) -> None:
        JsonRequest.__init__(self, request.method, public_url(request, base), request.headers)
        self.payload = FlaskJsonPayload(request)


def public_url(request: flask.Request, base: str) -> str:
    query = request.query_string.decode("latin-1")
    return base + request.path + ("?" + query if query else "")


class GatewayIssuer(IssuerParameter):  # type: ignore[misc]
    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer


class TokenGenerator(JWTBearerTokenGenerator):  # type: ignore[misc]
    """RFC 9068 access tokens: iss, sub, aud (the resource they are for), client_id, scope, exp, iat, jti; RS256.
    One per token (EmbeddedServer.tokens_for): the audience is the grant's resource."""

    def __init__(self, issuer: str, audience: str, keys: EmbeddedKeys, access_ttl: int) -> None:
        super().__init__(issuer, alg=ALGORITHM, refresh_token_generator=refresh_token, expires_generator=access_ttl)
        self.audience, self.key_set = audience, keys

    def get_jwks(self) -> KeySet:
        return self.key_set.signing()

    def get_audiences(self, client: Client, user: User | None, scope: str) -> str:
        return self.audience


def refresh_token(**_: Any) -> str:
    return secrets.token_urlsafe(REFRESH_BYTES)


class EmbeddedServer(AuthorizationServer):  # type: ignore[misc]
    """`targets()`: the resources tokens may be for and the scopes offered, now (asked at each request: a
    reload of MCPGATE_CONFIG changes them; default: the one resource URL and MCPGATE_OAUTH_SCOPES). No token
    generator is registered: the grants ask tokens_for(the grant's resource)."""

    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        keys: EmbeddedKeys,
        targets: Callable[[], Targets] | None = None,
    ) -> None:
        super().__init__()
        self.settings, self.storage, self.keys = settings, storage, keys
        self.issuer = settings.public_url.rstrip("/")
        self.targets: Callable[[], Targets] = targets or (lambda: Targets.single(settings))
        self.documents = cimd.Resolver(settings)
        self.register_grant(AuthorizationCodeGrant, [S256Only(required=True)])
        self.register_grant(RefreshTokenGrant)
        self.register_extension(GatewayIssuer(self.issuer))

    @property
    def offered(self) -> tuple[str, ...]:
        """The scopes offered (the union of the published servers')."""
        return self.targets().scopes

    def tokens_for(self, resource: str) -> TokenGenerator:
        """The generator of tokens whose aud is `resource`."""
        return TokenGenerator(self.issuer, resource, self.keys, int(self.settings.oauth_access_ttl))

    # -- what Authlib asks of the integration ------------------------------------------------------------------

    def create_oauth2_request(self, request: flask.Request | None) -> OAuth2Request:
        return PublicRequest(request if isinstance(request, flask.Request) else flask.request, self.issuer)

    def create_json_request(self, request: flask.Request | None) -> JsonRequest:
        return PublicJsonRequest(request if isinstance(request, flask.Request) else flask.request, self.issuer)

    def query_client(self, client_id: str) -> Client | None:
        if not isinstance(client_id, str):
            return None
        if cimd.is_document_url(client_id):
            try:
                document = self.documents.client(client_id)
            except cimd.CimdError as exc:
                raise InvalidClientError(description=str(exc)) from None
            return Client.from_metadata(client_id, None, document.metadata(), self.offered)
        record = self.storage.client(client_id)
        if record is None:
            return None
        return Client.from_metadata(client_id, record.secret_hash, record.metadata, self.offered)

    def validate_requested_scope(self, scope: str | None) -> None:
        if scope and not set(scope_to_list(scope)) <= set(self.offered):
            raise InvalidScopeError(description="scopes offered here: " + " ".join(self.offered))

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        claims = jwt.decode(token["access_token"], self.keys.keys(refresh=False)).claims
        if request.authorization_code is not None:
            family = request.authorization_code.record.family
        else:
            family = request.refresh_token.record.family
        self.storage.add_access(str(claims["jti"]), family, float(claims["exp"]), access_binding(claims))
        if token.get("refresh_token"):
            record = RefreshRecord(
                family=family,
                client_id=request.client.get_client_id(),
                subject=request.user.get_user_id(),
                scope=str(token.get("scope") or ""),
                expires_at=time.time() + self.settings.oauth_refresh_ttl,
            )
            self.storage.add_refresh(token["refresh_token"], record)

    def access_claims(self, token: str) -> dict[str, Any] | None:
        """The claims of an access token this server signed (signature and issuer checked), or None."""
        try:
            claims = dict(jwt.decode(token, self.keys.keys(refresh=False), algorithms=[ALGORITHM]).claims)
        except (JoseError, ValueError):
            return None
        return claims if claims.get("iss") == self.issuer else None

    # -- the interface of the sign-in pages --------------------------------------------------------------------

    def begin(self, request: flask.Request) -> Pending:
        grant = self._grant(request, None)
        oauth_request = grant.request
        client: Client = oauth_request.client
        return Pending(
            client_id=client.client_id,
            client_name=client.client_name,
            redirect_uri=grant.redirect_uri,
            scopes=tuple(scope_to_list(oauth_request.scope) or ()),
            resource=grant.resource,
            state=oauth_request.payload.state,
        )

    def finish(self, request: flask.Request, subject: str | None) -> flask.Response:
        user = User(subject) if subject else None
        try:
            grant = self._grant(request, user)
        except OAuthProblem as exc:
            return self.problem_response(exc, request)
        response: flask.Response = self.create_authorization_response(request, grant_user=user, grant=grant)
        return response

    def problem_response(self, exc: Exception, request: flask.Request) -> flask.Response:
        if not isinstance(exc, OAuthProblem):
            exc = (
                self._problem(exc, request)
                if isinstance(exc, OAuth2Error)
                else OAuthProblem("server_error", "the request could not be handled", None)
            )
        if exc.redirect:
            return flask.Response(status=302, headers={"Location": exc.redirect, "Cache-Control": "no-store"})
        page = flask.render_template("authorize_error.html", error=exc.error, description=exc.description)
        response = flask.Response(page, status=400, mimetype="text/html")
        response.headers["Cache-Control"] = "no-store"
        return response

    def redirect_trusted(self, client_id: Any, redirect_uri: str) -> bool:
        """Whether an error may be sent to `redirect_uri`, a redirect URI of `client_id`'s, before the user did
        anything (the module's docstring says why)."""
        if redirects.is_loopback(redirect_uri) or redirect_uri in self.settings.oauth_redirect_allowlist:
            return True
        if redirect_uri.partition(":")[0].lower() not in ("http", "https"):
            return True  # a non-web scheme is registered only when the operator's allowlist names it
        if not isinstance(client_id, str):
            return False
        if cimd.is_document_url(client_id):
            return True  # query_client found it on the operator's allowlist
        record = self.storage.client(client_id)
        return record is not None and record.used

    def _grant(self, request: flask.Request, user: User | None) -> AuthorizationCodeGrant:
        try:
            grant: AuthorizationCodeGrant = self.get_consent_grant(request, end_user=user)
        except OAuth2Error as error:
            raise self._problem(error, request) from None
        return grant

    def _problem(self, error: OAuth2Error, request: flask.Request) -> OAuthProblem:
        if isinstance(error, OAuthProblem):
            return error
        description = str(error.description or error.error)
        redirect = None
        if error.redirect_uri and self.redirect_trusted(request.values.get("client_id"), error.redirect_uri):
            params = [(name, value) for name, value in error.get_body() if name != "state"]
            state = request.values.get("state")
            if state:
                params.append(("state", state))
            params.append(("iss", self.issuer))
            redirect = add_params_to_uri(error.redirect_uri, params)
        return OAuthProblem(str(error.error), description, redirect)
