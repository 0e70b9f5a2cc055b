"""The two grants the embedded server speaks (OAuth 2.1): authorization code with PKCE S256, and refresh token
with rotation.

- PKCE is required of every client, S256 only: a request without code_challenge, or with the method plain or
  none named, is refused at the authorization endpoint (to the client's redirect URI).
- `resource` (RFC 8707), when sent to either endpoint, must be the gateway's resource URL (invalid_target); the
  token's aud is that URL either way.
- A code is spent by its first exchange; a second exchange is refused and revokes the tokens the first one
  produced (storage.claim_code).
- Each refresh spends its refresh token and issues a new one in the same family; a spent one presented again
  revokes the family, its refresh and access tokens (storage.claim_refresh).
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from authlib.oauth2.rfc6749 import InvalidGrantError, InvalidRequestError, OAuth2Error, OAuth2Request, grants
from authlib.oauth2.rfc7636 import CodeChallenge

from .models import AUTH_METHODS, AuthorizationCode, Client, RefreshToken, User
from .storage import CodeRecord

if TYPE_CHECKING:
    from .server import EmbeddedServer

CODE_TTL_S = 120.0
CODE_BYTES = 32


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 2: the resource asked for is not this gateway."""

    error = "invalid_target"


def check_resource(request: OAuth2Request, resource_url: str) -> str:
    """The resource the request names (RFC 8707), which must be ours; the resource URL when it names none."""
    values = request.payload.datalist.get("resource", [])
    if len(values) > 1:
        raise InvalidTargetError(description="one resource only: this server issues tokens for one resource")
    if values and values[0] != resource_url:
        raise InvalidTargetError(description=f"unknown resource: tokens here are for {resource_url}")
    return resource_url


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


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)  # noqa: RUF012 - Authlib's class attribute
    server: EmbeddedServer

    def validate_authorization_request(self) -> str:
        redirect_uri: str = super().validate_authorization_request()
        try:
            check_resource(self.request, self.server.resource_url)
        except OAuth2Error as error:
            error.redirect_uri = redirect_uri
            raise
        return redirect_uri

    def generate_authorization_code(self) -> str:
        return secrets.token_urlsafe(CODE_BYTES)

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        record = CodeRecord(
            client_id=request.client.get_client_id(),
            redirect_uri=str(request.payload.redirect_uri or ""),
            scope=str(request.scope or ""),
            subject=request.user.get_user_id(),
            resource=self.server.resource_url,
            challenge=str(data.get("code_challenge")),
            challenge_method=str(data.get("code_challenge_method")),
            expires_at=time.time() + CODE_TTL_S,
            family=secrets.token_urlsafe(16),
        )
        self.server.storage.add_code(code, record)

    def query_authorization_code(self, code: str, client: Client) -> AuthorizationCode | None:
        record = self.server.storage.claim_code(code)  # spent now, whatever follows (PKCE, redirect URI)
        if record is None or record.client_id != client.get_client_id():
            return None
        return AuthorizationCode(record)

    def validate_token_request(self) -> None:
        super().validate_token_request()  # then PKCE (the after_validate_token_request hook)
        check_resource(self.request, self.server.resource_url)

    def delete_authorization_code(self, authorization_code: AuthorizationCode) -> None:
        pass  # spent when claimed; kept (used) until it expires so a reuse is recognised

    def authenticate_user(self, authorization_code: AuthorizationCode) -> User:
        return User(authorization_code.record.subject)


class RefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = list(AUTH_METHODS)  # noqa: RUF012 - Authlib's class attribute
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: EmbeddedServer

    def authenticate_refresh_token(self, refresh_token: str) -> RefreshToken | None:
        storage = self.server.storage
        record = storage.refresh_record(refresh_token)
        if record is None:
            storage.claim_refresh(refresh_token)  # a spent one: this revokes its family
            return None
        return RefreshToken(record)

    def validate_token_request(self) -> None:
        super().validate_token_request()
        check_resource(self.request, self.server.resource_url)

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
