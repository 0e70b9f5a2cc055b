"""The gateway as an OAuth 2.1 resource server: its Protected Resource Metadata (RFC 9728) and the check of
every MCP request's access token (RFC 6750 challenges; MCP's 401 / 403 step-up / 400 rules).

The token is never logged and never echoed: every description in a challenge or an error body is one of the
verifiers' fixed sentences.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from flask import Flask, Response

from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc
from mcpgate.serve.front import auth
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth.identity import Identity, TokenRejected, Verifier, canonical_resource
from mcpgate.serve.oauth.introspection import EitherVerifier, IntrospectionLimited, IntrospectionVerifier
from mcpgate.serve.oauth.jwt_verifier import IssuerUnavailable, JwksCache, JwtVerifier
from mcpgate.serve.oauth.ratelimit import client_key
from mcpgate.serve.servers.config_file import PREFIX

log = logging.getLogger("mcpgate.oauth")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
GROUPS = "/groups"  # the hub's groups' paths (serve/hub/groups.py PREFIX)
AGGREGATE = "*"  # the aggregate's key among the groups (serve/hub/groups.py AGGREGATE)
RETRY_AFTER = "5"  # seconds, when the issuer cannot be reached
# RFC 6750 3: error_description is %x20-21 / %x23-5B / %x5D-7E (no quote, no backslash)
_UNSAFE = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")


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


class Published(Protocol):
    """The servers the gateway publishes, read at request time (the fleet: a reload changes them)."""

    named: bool  # MCPGATE_CONFIG's servers (False: MCPGATE_COMMAND's one)

    def settings_of(self, name: str) -> Settings | None: ...
    def server_settings(self) -> list[Settings]: ...


class Single:
    """MCPGATE_COMMAND's one server as a Published (whatever the name asked for)."""

    named = False

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def settings_of(self, name: str) -> Settings | None:
        return self.settings

    def server_settings(self) -> list[Settings]:
        return [self.settings]


def group_settings(published: Published) -> list[Settings]:
    """The settings of the hub's groups and aggregate (serve/hub/groups.py), each its own protected resource at its
    own path ([] for a Published without groups)."""
    found = getattr(published, "group_settings", None)
    return list(found()) if found is not None else []


def group_of(published: Published, key: str) -> Settings | None:
    """A group's settings by its name (AGGREGATE: the aggregate at MCPGATE_PATH), or None."""
    found = getattr(published, "group_of", None)
    return found(key) if found is not None else None


def published_resources(settings: Settings, published: Published) -> list[str]:
    """Every resource a token may be for: each server's resource URL, each group's (its own path's: a member
    server's token does not open it, nor its token a member) and, with named servers, the gateway's own
    (public_url: the listing's)."""
    resources = [server.resource_url for server in (*published.server_settings(), *group_settings(published))]
    return [*resources, settings.public_url.rstrip("/")] if published.named else resources


def offered_scopes(published: Published) -> tuple[str, ...]:
    """The union of the servers' MCPGATE_OAUTH_SCOPES, in order."""
    return tuple(dict.fromkeys(scope for server in published.server_settings() for scope in server.oauth_scopes))


@dataclass(frozen=True)
class Protected:
    """One protected resource as the guard checks and describes it."""

    resource: str  # RFC 9728's resource: the server's URL (the gateway's own for the listing)
    audiences: frozenset[str]  # a token must name one of these (canonical_resource)
    scopes: tuple[str, ...]  # required (the challenges' scope)
    supported: tuple[str, ...]  # scopes_supported
    metadata_url: str  # the path form of its metadata, named in every challenge


def metadata_path(resource: str) -> str:
    """RFC 9728 3.1: the well-known name inserted before the resource's path."""
    return WELL_KNOWN + urlsplit(resource).path


@functools.lru_cache(maxsize=256)
def protected(resource: str, audience: str, scopes: tuple[str, ...]) -> Protected:
    """A server's Protected: its resource URL, the one audience its tokens name, its required scopes."""
    parts = urlsplit(resource)
    url = f"{parts.scheme}://{parts.netloc}{metadata_path(resource)}"
    return Protected(resource, frozenset({canonical_resource(audience)}), scopes, scopes, url)


class ResourceGuard:
    """The authenticator of the two OAuth modes: a verified token's principal, or a Refusal with its
    challenge. Each published server is its own protected resource (its URL, its MCPGATE_OAUTH_SCOPES); one
    verifier checks signature, issuer and lifetime, and the guard the request's own audience and scopes."""

    def __init__(
        self,
        settings: Settings,
        verifier: Verifier,
        authorization_servers: list[str],
        published: Published | None = None,
    ) -> None:
        self.settings, self.verifier = settings, verifier
        self.proxies = auth.networks(settings.forwarded_for_proxies)  # whose X-Forwarded-For names the client
        self.published = published or Single(settings)
        self.named = self.published.named
        # with named servers the root form describes the gateway as a whole (the listing's resource)
        self.resource = settings.public_url.rstrip("/") if self.named else settings.resource_url
        self.authorization_servers = [server for server in authorization_servers if server]
        self.scopes = [] if self.named else list(settings.oauth_scopes)
        self.metadata_path = metadata_path(self.resource)
        parts = urlsplit(self.resource)
        self.metadata_url = f"{parts.scheme}://{parts.netloc}{self.metadata_path}"

    # -- the resources --

    def server(self, settings: Settings) -> Protected:
        """A server's resource (MCPGATE_OAUTH_AUDIENCE, when set, is every server's audience)."""
        return protected(
            settings.resource_url, self.settings.oauth_audience or settings.resource_url, settings.oauth_scopes
        )

    def gateway(self) -> Protected:
        """The listing's (and an unknown server's) resource: any published resource's token opens it."""
        if not self.named:
            return self.server(self.settings)
        audiences = (
            [self.settings.oauth_audience]
            if self.settings.oauth_audience
            else published_resources(self.settings, self.published)
        )
        return Protected(
            self.resource,
            frozenset(canonical_resource(audience) for audience in audiences),
            (),
            offered_scopes(self.published),
            self.metadata_url,
        )

    def metadata(self, target: Protected | None = None, name: str = "") -> dict[str, Any]:
        """RFC 9728 Protected Resource Metadata (of the gateway-wide resource without a target)."""
        target = target or self.gateway()
        document: dict[str, Any] = {
            "resource": target.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": f"mcpgate {name}" if name else "mcpgate",
        }
        if target.supported:
            document["scopes_supported"] = list(target.supported)
        return document

    def register(self, app: Flask) -> None:
        """The metadata, open to anyone: one server's at the path form (its resource's path, and the gateway's
        own path when a proxy strips a prefix of the public URL) and the root form; with named servers, each
        one's path form (looked up at request time) and the gateway's at the root form."""
        paths = {self.metadata_path, WELL_KNOWN}
        if not self.named:
            paths.add(WELL_KNOWN + self.settings.path)
        for index, path in enumerate(sorted(paths)):
            app.add_url_rule(path, f"oauth_protected_resource_{index}", self._serve_metadata, methods=["GET"])
        if self.named:
            prefixes = {urlsplit(self.resource).path, ""}
            for index, prefix in enumerate(sorted(prefixes)):
                app.add_url_rule(
                    f"{WELL_KNOWN}{prefix}{PREFIX}/<name>/mcp",
                    f"oauth_protected_resource_server_{index}",
                    self._serve_server_metadata,
                    methods=["GET"],
                )
                app.add_url_rule(  # a group's (serve/hub/groups.py)
                    f"{WELL_KNOWN}{prefix}{GROUPS}/<name>/mcp",
                    f"oauth_protected_resource_group_{index}",
                    self._serve_group_metadata,
                    methods=["GET"],
                )
                if prefix + self.settings.path not in ("", urlsplit(self.resource).path):
                    app.add_url_rule(  # the aggregate's, at MCPGATE_PATH
                        f"{WELL_KNOWN}{prefix}{self.settings.path}",
                        f"oauth_protected_resource_aggregate_{index}",
                        functools.partial(self._serve_group_metadata, AGGREGATE),
                        methods=["GET"],
                    )

    def _serve_metadata(self) -> Response:
        return metadata_response(self.metadata())

    def _serve_server_metadata(self, name: str) -> Response:
        """A published server's metadata, without credentials: an OAuth client discovers sign-in here (as
        from its endpoint's challenge, which names this URL). So whether one name is published can be asked
        one guess at a time; the list of names is told only to who may know it (GET /servers, /healthz,
        /metrics). An unknown name gets 404, not a made-up document: a client would sign in for a resource
        that does not exist, and a server's own scopes would tell it apart anyway."""
        settings = self.published.settings_of(name)
        if settings is None:
            body = {"error": "not_found", "error_description": "no such protected resource"}
            return Response(jsonrpc.encode(body), status=404, mimetype="application/json")
        return metadata_response(self.metadata(self.server(settings), name))

    def _serve_group_metadata(self, name: str) -> Response:
        """A group's (or the aggregate's) metadata: its own resource, as a named server's (404 when none)."""
        settings = group_of(self.published, name)
        if settings is None:
            body = {"error": "not_found", "error_description": "no such protected resource"}
            return Response(jsonrpc.encode(body), status=404, mimetype="application/json")
        return metadata_response(self.metadata(self.server(settings), "" if name == AGGREGATE else name))

    # -- the check --

    def authenticate(self, environ: dict[str, Any], target: Settings | None = None) -> str:
        """The principal of the request's access token for the server of `target` (None: the listing, or a
        server name not published), or a Refusal (400, 401, 403 or 503)."""
        resource = self.server(target) if target is not None else self.gateway()
        if token_in_query(environ.get("QUERY_STRING", "")):
            raise refusal(resource, 400, "invalid_request", "send the access token in the Authorization header")
        token = auth.bearer_token(environ.get("HTTP_AUTHORIZATION"))
        if token is None:
            raise Refusal(
                401,
                jsonrpc.INVALID_REQUEST,
                "Unauthorized: this endpoint needs an OAuth access token (Authorization: Bearer <token>)",
                headers={"WWW-Authenticate": challenge(resource.metadata_url, list(resource.scopes))},
            )
        if not token:
            raise refusal(resource, 400, "invalid_request", "the Authorization header is malformed")
        identity = self._verify(token, resource, client_key(environ, self.proxies))
        if not identity.audiences & resource.audiences:
            log.info("refused an access token: %s", ANOTHER_AUDIENCE)
            raise refusal(resource, 401, "invalid_token", ANOTHER_AUDIENCE)
        missing = [scope for scope in resource.scopes if scope not in identity.scopes]
        if missing:
            raise refusal(resource, 403, "insufficient_scope", f"the token lacks the scope {' '.join(missing)}")
        context(environ).identity = identity  # views choose by its subject, groups and scopes
        return identity.principal

    def _verify(self, token: str, resource: Protected, client: str) -> Identity:
        try:
            return self.verifier.verify(token, client)
        except IntrospectionLimited as limited:
            log.warning("refused an access token from %s: %s", client, limited)
            raise Refusal(
                429,
                jsonrpc.INVALID_REQUEST,
                f"Too Many Requests: {limited}",
                headers={"Retry-After": str(limited.retry_after)},
                kind="rate_limit",
            ) from None
        except TokenRejected as rejected:
            log.info("refused an access token: %s", rejected)
            raise refusal(resource, 401, rejected.error, str(rejected)) from None
        except IssuerUnavailable as exc:
            log.warning("cannot check an access token: %s", exc)
            raise Refusal(
                503,
                jsonrpc.INTERNAL_ERROR,
                "Service Unavailable: the authorization server cannot be reached to check the access token; "
                "try again shortly",
                headers={"Retry-After": RETRY_AFTER},
            ) from None


ANOTHER_AUDIENCE = "the token is meant for another audience"


def metadata_response(document: dict[str, Any]) -> Response:
    response = Response(jsonrpc.encode(document), mimetype="application/json")
    response.headers["Cache-Control"] = "public, max-age=300"
    return response


def refusal(resource: Protected, status: int, error: str, description: str) -> Refusal:
    label = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden"}[status]
    return Refusal(
        status,
        jsonrpc.INVALID_REQUEST,
        f"{label}: {description}",
        headers={"WWW-Authenticate": challenge(resource.metadata_url, list(resource.scopes), error, description)},
    )


def verifier_for(settings: Settings, named: bool = False) -> Verifier:
    """Resource-server mode's verifier: JWTs against MCPGATE_OAUTH_ISSUER's keys when an issuer is set,
    introspection (MCPGATE_OAUTH_INTROSPECTION_URL) for the other tokens, or for all of them without an
    issuer. The audience is MCPGATE_OAUTH_AUDIENCE, else the resource URL; with named servers (several
    resources) any, the guard checking each request's own."""
    audience = settings.oauth_audience or (None if named else settings.resource_url)
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
            per_address=settings.oauth_introspection_limit,
        )
    if jwt is not None and introspection is not None:
        return EitherVerifier(jwt, introspection)
    verifier = jwt or introspection
    if verifier is None:
        raise ValueError("resource-server mode needs MCPGATE_OAUTH_ISSUER or MCPGATE_OAUTH_INTROSPECTION_URL")
    return verifier
