"""The two grants the embedded server speaks (OAuth 2.1): authorization code with PKCE S256, and refresh token
with rotation.

- PKCE is required of every client, S256 only: a request without code_challenge, or with the method plain or
  none named, is refused at the authorization endpoint (to the client's redirect URI).
- `resource` (RFC 8707), when sent to either endpoint, must be one of the published servers' resource URLs
  (Targets.resources, asked at each request; compared as canonical_resource: scheme and host in any case, a
  trailing slash or not) and the token's aud is that server's URL as published; a request naming none gets
  the only server's (Targets.default), else invalid_target. A grant is bound to its resource: the code's
  exchange, and every refresh of its family, stay with it (a refresh naming none keeps it).
- A code is spent by its first exchange; a second exchange is refused and revokes the tokens the first one
  produced (storage.claim_code).
- Each refresh spends its refresh token and issues a new one in the same family; a spent one presented again
  revokes the family, its refresh and access tokens (storage.claim_refresh).

What the grants ask of the authorization server they are registered with is `GrantServer` (server.EmbeddedServer
is one): its storage, the targets now, and a token maker per resource.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from authlib.oauth2.rfc6749 import InvalidGrantError, InvalidRequestError, OAuth2Error, OAuth2Request, grants
from authlib.oauth2.rfc7636 import CodeChallenge

from mcpgate.config.settings import Settings
from mcpgate.serve.oauth.identity import canonical_resource
from mcpgate.serve.oauth.models import AUTH_METHODS, AuthorizationCode, Client, RefreshToken, User
from mcpgate.serve.oauth.storage import CodeRecord, Storage

CODE_TTL_S = 120.0
CODE_BYTES = 32


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 2: the resource asked for is not this gateway."""

    error = "invalid_target"


@dataclass(frozen=True)
class Targets:
    """What tokens may be asked for now (a reload of MCPGATE_CONFIG changes it): the resources, the one a request
    naming none gets (None: it must name one), the scopes offered."""

    resources: tuple[str, ...]
    default: str | None
    scopes: tuple[str, ...]

    @classmethod
    def single(cls, settings: Settings) -> Targets:
        return cls((settings.resource_url,), settings.resource_url, tuple(settings.oauth_scopes))


class GrantServer(Protocol):
    """The authorization server as the grants see it (Authlib sets a grant's `server` when it runs one)."""

    storage: Storage
    targets: Callable[[], Targets]  # asked at each request: a reload of MCPGATE_CONFIG changes them

    def tokens_for(self, resource: str) -> Callable[..., dict[str, Any]]:
        """The token maker (Authlib's generator signature) for tokens whose aud is `resource`."""
        ...


def check_resource(request: OAuth2Request, targets: Targets, bound: str | None = None) -> str:
    """The resource the request is for (RFC 8707), as published: the one it names, which must be published
    (and the grant's own when the grant is `bound` to one); else the grant's, else the default one."""
    values = request.payload.datalist.get("resource", [])
    if len(values) > 1:
        raise InvalidTargetError(description="one resource only: a token here is for one MCP server")
    known = {canonical_resource(resource): resource for resource in targets.resources}
    if bound is not None and canonical_resource(bound) not in known:
        raise InvalidTargetError(description="the MCP server this grant is for is no longer published here")
    if not values:
        resource = bound or targets.default
        if resource is None:
            raise InvalidTargetError(description="name the MCP server the token is for: resource=<its endpoint URL>")
        return resource
    resource = known.get(canonical_resource(values[0]))
    if resource is None:
        only = f"tokens here are for {targets.default}" if len(known) == 1 else "name one of this gateway's endpoints"
        raise InvalidTargetError(description=f"unknown resource: {only}")
    if bound is not None and canonical_resource(bound) != canonical_resource(resource):
        raise InvalidTargetError(description="this grant is for another resource")
    return known[canonical_resource(bound)] if bound is not None else resource


def new_family(resource: str) -> str:
    """A token family's id (made with its code): random, then the resource its grant is for (a URL holds no
    space), so every refresh of the family, which carries only its id, keeps that audience."""
    return f"{secrets.token_urlsafe(16)} {resource}"


def family_resource(family: str) -> str | None:
    """The resource a family is bound to; None for one made before families named it."""
    return family.partition(" ")[2] or None


class ResourceBound:
    """A grant whose tokens' aud is its resource (the `resource` attribute its validation sets)."""

    resource: str
    server: GrantServer
    request: OAuth2Request
    GRANT_TYPE: str

    def generate_token(
        self,
        user: User | None = None,
        scope: str | None = None,
        grant_type: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        token: dict[str, Any] = self.server.tokens_for(self.resource)(
            grant_type=grant_type or self.GRANT_TYPE,
            client=self.request.client,
            user=user,
            scope=scope,
            expires_in=expires_in,
            include_refresh_token=include_refresh_token,
        )
        return token


class S256Only(CodeChallenge):  # type: ignore[misc]
    """PKCE required, S256 only (OAuth 2.1 4.1.1; the MCP authorization spec)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]  # noqa: RUF012 - Authlib's class attribute
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: grants.BaseGrant, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("code_challenge_method must be S256 (plain is not accepted)")
        super().validate_code_challenge(grant, redirect_uri)


class AuthorizationCodeGrant(ResourceBound, grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)  # noqa: RUF012 - Authlib's class attribute
    server: GrantServer

    def validate_authorization_request(self) -> str:
        redirect_uri: str = super().validate_authorization_request()
        try:
            self.resource = check_resource(self.request, self.server.targets())
        except OAuth2Error as error:
            error.redirect_uri = redirect_uri
            raise
        return redirect_uri

    def generate_authorization_code(self) -> str:
        return secrets.token_urlsafe(CODE_BYTES)

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        resource = check_resource(request, self.server.targets())
        record = CodeRecord(
            client_id=request.client.get_client_id(),
            redirect_uri=str(request.payload.redirect_uri or ""),
            scope=str(request.scope or ""),
            subject=request.user.get_user_id(),
            resource=resource,
            challenge=str(data.get("code_challenge")),
            challenge_method=str(data.get("code_challenge_method")),
            expires_at=time.time() + CODE_TTL_S,
            family=new_family(resource),
        )
        self.server.storage.add_code(code, record)

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        record = self.server.storage.claim_code(code)  # spent now, whatever follows (PKCE, redirect URI)
        if record is None or record.client_id != client.get_client_id():
            return None
        return AuthorizationCode(record)

    def validate_token_request(self) -> None:
        super().validate_token_request()  # then PKCE (the after_validate_token_request hook)
        code: AuthorizationCode = self.request.authorization_code
        self.resource = check_resource(self.request, self.server.targets(), code.record.resource)

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        pass  # spent when claimed; kept (used) until it expires so a reuse is recognised

    def authenticate_user(self, authorization_code: AuthorizationCode) -> User:
        return User(authorization_code.record.subject)


class RefreshTokenGrant(ResourceBound, grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)  # noqa: RUF012 - Authlib's class attribute
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: GrantServer

    def authenticate_refresh_token(self, refresh_token: str) -> RefreshToken | None:
        storage = self.server.storage
        record = storage.refresh_record(refresh_token)
        if record is None:
            storage.claim_refresh(refresh_token)  # a spent one: this revokes its family
            return None
        return RefreshToken(record)

    def validate_token_request(self) -> None:
        super().validate_token_request()
        refresh: RefreshToken = self.request.refresh_token
        self.resource = check_resource(self.request, self.server.targets(), family_resource(refresh.record.family))

    def create_token_response(self) -> tuple[int, dict[str, Any], list[tuple[str, str]]]:
        # spend it now, atomically: of two concurrent refreshes one wins, the other revokes the family
        if self.server.storage.claim_refresh(self.request.form["refresh_token"]) is None:
            raise InvalidGrantError("the refresh token was already used: its tokens are revoked")
        result: tuple[int, dict[str, Any], list[tuple[str, str]]] = super().create_token_response()
        return result

    def authenticate_user(self, refresh_token: RefreshToken) -> User:
        return User(refresh_token.record.subject)

    def revoke_old_credential(self, refresh_token: RefreshToken) -> None:
        pass  # spent in create_token_response
