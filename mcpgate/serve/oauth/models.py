"""What Authlib's grants and endpoints ask of a client, a code, a refresh token and a user.

A client is either registered here (RFC 7591, its secret kept as a fingerprint) or a Client ID Metadata
Document fetched by cimd.py (public, auth method none). Redirect URIs match by redirects.matches (exact, any
port on loopback).
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass, field
from typing import Any

from authlib.oauth2.rfc6749 import AuthorizationCodeMixin, ClientMixin, TokenMixin

from mcpgate.serve.oauth import redirects
from mcpgate.serve.oauth.storage import CodeRecord, RefreshRecord, fingerprint

AUTH_METHODS = ("none", "client_secret_basic", "client_secret_post")
GRANT_TYPES = ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class User:
    """A signed-in subject ("user:alice", "github:octocat", ...)."""

    subject: str

    def get_user_id(self) -> str:
        return self.subject


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    redirect_uris: tuple[str, ...]
    client_name: str = ""
    auth_method: str = "none"
    secret_hash: str | None = None
    grant_types: tuple[str, ...] = GRANT_TYPES
    scope: str | None = None  # the scopes it registered for; None: any the server offers
    offered: tuple[str, ...] = ()  # the server's scopes: what a request naming none gets
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_metadata(
        cls, client_id: str, secret_hash: str | None, metadata: dict[str, Any], offered: tuple[str, ...]
    ) -> Client:
        return cls(
            client_id=client_id,
            redirect_uris=tuple(metadata.get("redirect_uris") or ()),
            client_name=str(metadata.get("client_name") or ""),
            auth_method=str(metadata.get("token_endpoint_auth_method") or "client_secret_basic"),
            secret_hash=secret_hash,
            grant_types=tuple(metadata.get("grant_types") or GRANT_TYPES),
            scope=metadata.get("scope") or None,
            offered=offered,
            metadata=metadata,
        )

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        # OAuth 2.1: the redirect URI is always sent; a lone registered one may stand in only when there is one
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        # the server has checked the requested scopes against what it offers (scopes_supported)
        requested = scope.split() if scope else list(self.offered)
        if self.scope is not None:
            allowed = set(self.scope.split())
            requested = [s for s in requested if s in allowed]
        return " ".join(dict.fromkeys(requested))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return any(redirects.matches(registered, redirect_uri) for registered in self.redirect_uris)

    def check_client_secret(self, client_secret: str) -> bool:
        if not self.secret_hash or not isinstance(client_secret, str):
            return False
        return hmac.compare_digest(fingerprint(client_secret), self.secret_hash)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types


@dataclass
class AuthorizationCode(AuthorizationCodeMixin):  # type: ignore[misc]
    record: CodeRecord

    @property
    def code_challenge(self) -> str:
        return self.record.challenge

    @property
    def code_challenge_method(self) -> str:
        return self.record.challenge_method

    def get_redirect_uri(self) -> str:
        return self.record.redirect_uri

    def get_scope(self) -> str:
        return self.record.scope


@dataclass
class RefreshToken(TokenMixin):  # type: ignore[misc]
    record: RefreshRecord

    def check_client(self, client: Client) -> bool:
        return bool(client.get_client_id() == self.record.client_id)

    def get_scope(self) -> str:
        return self.record.scope

    def get_expires_in(self) -> int:
        return max(0, int(self.record.expires_at - time.time()))

    def is_expired(self) -> bool:
        return self.record.expires_at <= time.time()

    def is_revoked(self) -> bool:
        return False  # a spent or revoked refresh token is never found (storage.claim_refresh)


@dataclass
class AccessToken(TokenMixin):  # type: ignore[misc]
    """A JWT access token presented for revocation: its claims, verified."""

    claims: dict[str, Any]

    def check_client(self, client: Client) -> bool:
        return bool(self.claims.get("client_id") == client.get_client_id())

    def get_scope(self) -> str:
        return str(self.claims.get("scope", ""))

    def get_expires_in(self) -> int:
        return max(0, int(float(self.claims.get("exp", 0)) - time.time()))

    def is_expired(self) -> bool:
        return float(self.claims.get("exp", 0)) <= time.time()

    def is_revoked(self) -> bool:
        return False
