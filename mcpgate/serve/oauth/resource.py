"""The gateway as an OAuth 2.1 resource server: its Protected Resource Metadata (RFC 9728) and the check of
every MCP request's access token (RFC 6750 challenges; MCP's 401 / 403 step-up / 400 rules).

The token is never logged and never echoed: every description in a challenge or an error body is one of the
verifiers' fixed sentences.
"""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

from flask import Flask, Response

from ...core import jsonrpc
from ...settings import Settings
from ..http import Refusal
from .identity import Identity, TokenRejected, Verifier
from .introspection import EitherVerifier, IntrospectionVerifier
from .jwt_verifier import IssuerUnavailable, JwksCache, JwtVerifier

log = logging.getLogger("mcpgate.oauth")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
RETRY_AFTER = "5"  # seconds, when the issuer cannot be reached
# RFC 6750 3: error_description is %x20-21 / %x23-5B / %x5D-7E (no quote, no backslash)
_UNSAFE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>`; None without a bearer credential (an empty one too, so
    the client is sent to sign in); "" when malformed."""
    if not authorization:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    token = rest.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return "" if " " in token else token


def challenge(metadata_url: str, scopes: list[str], error: str | None = None, description: str | None = None) -> str:
    """A WWW-Authenticate value: Bearer [error, error_description,] scope, resource_metadata."""
    params = []
    if error:
        params.append(f'error="{error}"')
        if description:
            params.append(f'error_description="{_UNSAFE.sub("", description)}"')
    if scopes:
        params.append(f'scope="{" ".join(scopes)}"')
    params.append(f'resource_metadata="{metadata_url}"')
    return "Bearer " + ", ".join(params)


def token_in_query(query_string: str) -> bool:
    return "access_token" in parse_qs(query_string, keep_blank_values=True)


class ResourceGuard:
    """The authenticator of the two OAuth modes: a verified token's principal, or a Refusal with its
    challenge."""

    def __init__(self, settings: Settings, verifier: Verifier, authorization_servers: list[str]) -> None:
        self.settings, self.verifier = settings, verifier
        self.resource = settings.resource_url
        self.authorization_servers = [server for server in authorization_servers if server]
        self.scopes = list(settings.oauth_scopes)
        parts = urlsplit(self.resource)
        self.metadata_path = WELL_KNOWN + parts.path
        self.metadata_url = f"{parts.scheme}://{parts.netloc}{self.metadata_path}"

    def metadata(self) -> dict[str, Any]:
        """RFC 9728 Protected Resource Metadata."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpgate",
        }
        if self.scopes:
            document["scopes_supported"] = self.scopes
        return document

    def register(self, app: Flask) -> None:
        """The metadata at the path form (this resource's path, and the gateway's own path when a proxy strips
        a prefix of the public URL) and the root form; open to anyone."""
        paths = {self.metadata_path, WELL_KNOWN + self.settings.path, WELL_KNOWN}
        for index, path in enumerate(sorted(paths)):
            app.add_url_rule(path, f"oauth_protected_resource_{index}", self._serve_metadata, methods=["GET"])

    def _serve_metadata(self) -> Response:
        response = Response(jsonrpc.encode(self.metadata()), mimetype="application/json")
        response.headers["Cache-Control"] = "public, max-age=300"
        return response

    def authenticate(self, environ: dict[str, Any]) -> str:
        """The principal of the request's access token, or a Refusal (400, 401, 403 or 503)."""
        if token_in_query(environ.get("QUERY_STRING", "")):
            raise self._refusal(400, "invalid_request", "send the access token in the Authorization header")
        token = bearer_token(environ.get("HTTP_AUTHORIZATION"))
        if token is None:
            raise Refusal(
                401,
                jsonrpc.INVALID_REQUEST,
                "Unauthorized: this endpoint needs an OAuth access token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": challenge(self.metadata_url, self.scopes)},
            )
        if not token:
            raise self._refusal(400, "invalid_request", "the Authorization header is malformed")
        identity = self._verify(token)
        missing = [scope for scope in self.scopes if scope not in identity.scopes]
        if missing:
            raise self._refusal(403, "insufficient_scope", f"the token lacks the scope {' '.join(missing)}")
        return identity.principal

    def _verify(self, token: str) -> Identity:
        try:
            return self.verifier.verify(token)
        except TokenRejected as rejected:
            log.info("refused an access token: %s", rejected)
            raise self._refusal(401, rejected.error, str(rejected)) from None
        except IssuerUnavailable as exc:
            log.warning("cannot check an access token: %s", exc)
            raise Refusal(
                503,
                jsonrpc.INTERNAL_ERROR,
                "Service Unavailable: the authorization server cannot be reached to check the access token; "
                "try again shortly",
                headers={"Retry-After": RETRY_AFTER},
            ) from None

    def _refusal(self, status: int, error: str, description: str) -> Refusal:
        label = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}[status]
        return Refusal(
            status,
            jsonrpc.INVALID_REQUEST,
            f"{label}: {description}",
            headers={"WWW-Authenticate": challenge(self.metadata_url, self.scopes, error, description)},
        )


def verifier_for(settings: Settings) -> Verifier:
    """Resource-server mode's verifier: JWTs against MCPGATE_OAUTH_ISSUER's keys when an issuer is set,
    introspection (MCPGATE_OAUTH_INTROSPECTION_URL) for the other tokens, or for all of them without an
    issuer. The audience is MCPGATE_OAUTH_AUDIENCE, else the resource URL."""
    audience = settings.oauth_audience or settings.resource_url
    jwt = None
    if settings.oauth_issuer:
        keys = JwksCache(settings.oauth_jwks_url, settings.oauth_issuer)
        jwt = JwtVerifier(settings.oauth_issuer, audience, keys)
    introspection = None
    if settings.oauth_introspection_url:
        introspection = IntrospectionVerifier(
            settings.oauth_introspection_url,
            settings.oauth_client_id,
            settings.oauth_client_secret,
            audience,
            settings.oauth_issuer,
        )
    if jwt is not None and introspection is not None:
        return EitherVerifier(jwt, introspection)
    verifier = jwt or introspection
    if verifier is None:
        raise ValueError("resource-server mode needs MCPGATE_OAUTH_ISSUER or MCPGATE_OAUTH_INTROSPECTION_URL")
    return verifier
