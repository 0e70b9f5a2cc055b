"""Sign-in delegated to an upstream identity provider with Authlib's Flask client: any OpenID Connect issuer
(by discovery; the ID token's signature, iss, aud, exp and nonce checked by Authlib, the state by Authlib too),
or the "github" preset (OAuth 2 plus its REST API: the user and its verified e-mail addresses).

The identity is then checked against MCPGATE_OAUTH_UPSTREAM_ALLOWED: a GitHub login, a verified e-mail address
or a subject (the provider's sub, or the gateway's form github:<id> / oidc:<sub>); * allows anyone.
Subjects: "github:<numeric user id>" (stable across renames), "oidc:<sub>". A GitHub account id counts only in the
github:<id> form: a bare entry is a login, and logins may be all digits (the entry "12345" lets in the login
12345, never the account whose id is 12345).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client import OAuthError
from authlib.integrations.flask_client import OAuth
from flask import Flask, Response, request
from joserfc.errors import JoseError

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.serve.front.auth import is_loopback_name

log = logging.getLogger("mcpgate.oauth.signin")

NAME = "upstream"  # the Authlib client's name (its state keys in the Flask session)
TIMEOUT = 10.0  # seconds for each request to the provider
GITHUB = {
    "authorize_url": "https://github.com/login/oauth/authorize",
    "access_token_url": "https://github.com/login/oauth/access_token",
    "api_base_url": "https://api.github.com/",
}
GITHUB_SCOPE = "read:user user:email"
OIDC_SCOPE = "openid email profile"


class UpstreamFailed(Exception):
    """The provider's answer did not sign anyone in; the message is safe to show (no token, no code)."""


@dataclass(frozen=True)
class UpstreamIdentity:
    subject: str  # what the gateway's tokens carry
    label: str  # shown to the user: a login or an e-mail address
    subjects: frozenset[str]  # matched exactly: the provider's id and the gateway's subject
    names: frozenset[str]  # matched without case: the login and the verified e-mail addresses


def permitted(identity: UpstreamIdentity, allowed: Collection[str]) -> bool:
    """Whether MCPGATE_OAUTH_UPSTREAM_ALLOWED lets this identity in."""
    entries = [entry.strip() for entry in allowed if entry.strip()]
    if "*" in entries:
        return True
    return any(entry in identity.subjects or entry.lower() in identity.names for entry in entries)


def github_identity(user: dict[str, Any], emails: list[Any]) -> UpstreamIdentity:
    """From GitHub's GET /user and GET /user/emails (only addresses GitHub marks verified count)."""
    user_id, login = user.get("id"), user.get("login")
    if not isinstance(user_id, int) or not isinstance(login, str) or not login:
        raise UpstreamFailed("GitHub's answer named no user")
    verified = {
        item["email"].lower()
        for item in emails
        if isinstance(item, dict) and item.get("verified") is True and isinstance(item.get("email"), str)
    }
    subject = f"github:{user_id}"  # the only form the numeric id is matched in
    return UpstreamIdentity(subject, login, frozenset({subject}), frozenset({login.lower(), *verified}))


def oidc_identity(claims: dict[str, Any]) -> UpstreamIdentity:
    """From the verified ID token's claims (merged with userinfo for the same sub): sub, and the e-mail
    address when email_verified is true."""
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise UpstreamFailed("the provider's ID token has no subject")
    email = claims.get("email")
    verified = isinstance(email, str) and claims.get("email_verified") in (True, "true")
    names = frozenset({email.lower()} if verified and isinstance(email, str) else ())
    subject = f"oidc:{sub}"
    label = email if isinstance(email, str) and verified else sub
    return UpstreamIdentity(subject, label, frozenset({subject, sub}), names)


def secure_issuer(url: str) -> bool:
    """https, or http on a loopback host (tests and local providers)."""
    parts = urlsplit(url)
    if not parts.hostname or parts.query or parts.fragment:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback_name(parts.hostname))


class Upstream:
    """The configured provider: where to send the browser, and who came back."""

    def __init__(self, settings: Settings) -> None:
        self.kind = "github" if settings.oauth_upstream.strip().lower() == "github" else "oidc"
        self.issuer = settings.oauth_upstream.strip().rstrip("/")
        self.client_id = settings.oauth_upstream_client_id
        self.client_secret = settings.oauth_upstream_client_secret
        self.allowed = settings.oauth_upstream_allowed
        self.display = "GitHub" if self.kind == "github" else self.issuer
        if self.kind == "oidc" and not secure_issuer(self.issuer):
            raise SettingsError(
                "MCPGATE_OAUTH_UPSTREAM: github, or an https OpenID Connect issuer URL (http only on loopback)"
            )
        self.oauth: OAuth | None = None
        if self.kind == "github":
            for entry in self.allowed:
                if entry.strip().isdigit():
                    log.warning(
                        "MCPGATE_OAUTH_UPSTREAM_ALLOWED: %s is matched as a GitHub login; an account id is written "
                        "github:%s",
                        entry.strip(),
                        entry.strip(),
                    )

    def register(self, app: Flask) -> None:
        """Register the Authlib client on the app (its state goes in the app's signed session)."""
        self.oauth = OAuth(app)
        common: dict[str, Any] = {
            "client_id": self.client_id,
            "client_secret": self.client_secret,
        }
        session: dict[str, Any] = {"code_challenge_method": "S256", "default_timeout": TIMEOUT}
        if self.kind == "github":  # GitHub takes the client's credentials in the form
            session.update(scope=GITHUB_SCOPE, token_endpoint_auth_method="client_secret_post")
            self.oauth.register(NAME, **common, **GITHUB, client_kwargs=session)
        else:
            self.oauth.register(
                NAME,
                **common,
                server_metadata_url=self.issuer + "/.well-known/openid-configuration",
                client_kwargs={**session, "scope": OIDC_SCOPE},
            )

    def _client(self) -> Any:
        assert self.oauth is not None, "Upstream.register was not called"
        return self.oauth.create_client(NAME)

    def redirect(self, callback_url: str) -> Response:
        """The redirect to the provider's authorization page (state, nonce and PKCE verifier kept by Authlib)."""
        client = self._client()
        try:
            if self.kind == "oidc":
                self._check_issuer(client.load_server_metadata())
            response: Response = client.authorize_redirect(callback_url)
        except (OSError, ValueError, RuntimeError) as exc:
            raise UpstreamFailed(f"the identity provider could not be reached ({type(exc).__name__})") from exc
        return response

    def identity(self) -> UpstreamIdentity:
        """Who the provider signed in, from the callback request (state and nonce checked)."""
        client = self._client()
        try:
            if self.kind == "oidc":
                self._check_response_iss(client.load_server_metadata(), request.args.get("iss"))
            token = client.authorize_access_token()
            if self.kind == "github":
                return self._github(client, token)
            return self._oidc(client, token)
        except OAuthError as exc:
            raise UpstreamFailed(f"the identity provider refused the sign-in ({exc.error})") from exc
        except (AuthlibBaseError, JoseError) as exc:  # the ID token: signature, iss, aud, exp, nonce
            raise UpstreamFailed(f"the provider's ID token was refused ({type(exc).__name__})") from exc
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise UpstreamFailed(f"the sign-in could not be completed ({type(exc).__name__})") from exc

    def _check_issuer(self, metadata: dict[str, Any]) -> None:
        if str(metadata.get("issuer", "")).rstrip("/") != self.issuer:
            raise UpstreamFailed("the provider's metadata names another issuer than MCPGATE_OAUTH_UPSTREAM")

    def _check_response_iss(self, metadata: dict[str, Any], iss: str | None) -> None:
        """RFC 9207 (mix-up defence): the callback's iss names our issuer; required when the issuer says it
        sends one."""
        if iss is None and not metadata.get("authorization_response_iss_parameter_supported"):
            return
        if (iss or "").rstrip("/") != self.issuer:
            raise UpstreamFailed("the sign-in answer came from another issuer (iss)")

    def _github(self, client: Any, token: dict[str, Any]) -> UpstreamIdentity:
        user = client.get("user", token=token)
        user.raise_for_status()
        emails = client.get("user/emails", token=token)
        listed = emails.json() if emails.ok else []
        return github_identity(user.json(), listed if isinstance(listed, list) else [])

    def _oidc(self, client: Any, token: dict[str, Any]) -> UpstreamIdentity:
        claims = token.get("userinfo")  # set by Authlib only from a verified ID token (nonce included)
        if not claims:
            raise UpstreamFailed("the provider returned no ID token")
        merged = dict(claims)
        metadata = client.load_server_metadata()
        self._check_issuer(metadata)
        if "email" not in merged and metadata.get("userinfo_endpoint"):
            info = client.userinfo(token=token)
            if info.get("sub") == merged.get("sub"):
                merged.update({key: info[key] for key in ("email", "email_verified") if key in info})
        return oidc_identity(merged)
