"""The vault's pages in resource-server mode: the browser signs in through MCPGATE_OAUTH_ISSUER, the gateway an
OAuth client of that authorization server (in embedded mode the gateway signs its users in itself: page.py).

    POST /vault/signin     CSRF-checked: 303 to the issuer's authorization endpoint (authorization code, PKCE
                           S256, `resource` the audience the MCP endpoint accepts: MCPGATE_OAUTH_AUDIENCE, else the
                           gateway's own resource URL; the scopes it requires). The sign-in under way (state, PKCE
                           verifier, client id, the page to come back to, expiry) is kept in the browser's signed
                           session cookie: bound to that browser, one at a time, nothing kept per browser here.
    GET  /vault/callback   the state must be the browser's own (taken from its cookie: single use; a state already
                           redeemed here is refused again), the `iss` parameter the issuer's; the code is redeemed
                           and the access token checked by the MCP endpoint's own guard (resource.ResourceGuard:
                           signature, issuer, lifetime, audience, scopes), whose principal (issuer#subject) is the
                           one that user's MCP calls carry. The token is then dropped; the cookie keeps the
                           principal for PAGE_SESSION_FOR at most (less when the token expires sooner).

The client: MCPGATE_VAULT_CLIENT_ID (+ MCPGATE_VAULT_CLIENT_SECRET), else one registered dynamically (DCR) once per
worker when the issuer offers registration. The session cookie is the sign-in pages' (signin.cookie_config:
HttpOnly, SameSite=Lax, Secure on https), signed with a key derived from MCPGATE_VAULT_KEY, which every instance of
a fleet shares. No token, code or verifier is ever logged or shown.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import gevent.lock
import requests
from flask import Flask, session
from markupsafe import escape

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.relay.oauth import discovery as found
from mcpgate.relay.oauth import flow, registration
from mcpgate.relay.oauth.client_token import usable_endpoint
from mcpgate.relay.oauth.discovery import Discovery, SignInError
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth import signin
from mcpgate.serve.oauth.resource import ResourceGuard
from mcpgate.serve.vault.crypto import key_bytes
from mcpgate.serve.vault.vault import PAGE_PATH

log = logging.getLogger("mcpgate.vault")

SIGNIN_PATH, CALLBACK_PATH = PAGE_PATH + "/signin", PAGE_PATH + "/callback"
PAGE_SESSION_FOR = 3600.0  # seconds a page sign-in lasts at most (the token's own expiry when sooner)
STATE_TTL = 600.0  # a sign-in must come back within this long
SPENT_STATES = 4096  # states redeemed recently in this worker (a second use is refused)
DISCOVERY_FOR = 3600.0  # seconds the issuer's metadata is reused
HTTP_TIMEOUT = 30.0
COOKIE_LABEL = b"mcpgate vault page session"
PENDING, PRINCIPAL, LABEL, UNTIL = "vault_pending", "vault_principal", "vault_label", "vault_until"
_BACK = re.compile(r"/vault(/oauth/[A-Za-z0-9._~%-]{1,200})?")


def cookie_key(vault_key: str) -> bytes:
    """The session cookie's signing key: derived from the vault key (its own purpose, never the key itself)."""
    return hmac.new(key_bytes(vault_key), COOKIE_LABEL, hashlib.sha256).digest()


def back_path(value: str) -> str:
    """Where a sign-in comes back to: the vault's page or an upstream's page of it, else the vault's page."""
    return value if _BACK.fullmatch(value) else PAGE_PATH


class PageSignIn:
    """The page's sign-in through the external authorization server (see the module docstring); the vault pages'
    `who` in resource-server mode."""

    def __init__(self, settings: Settings, guard: ResourceGuard) -> None:
        if settings.vault_client_secret and not settings.vault_client_id:
            raise SettingsError("MCPGATE_VAULT_CLIENT_SECRET goes with MCPGATE_VAULT_CLIENT_ID")
        self.settings, self.guard, self.issuer = settings, guard, settings.oauth_issuer
        self.redirect_uri = settings.public_url.rstrip("/") + CALLBACK_PATH
        # the audience the MCP endpoint accepts for the gateway as a whole (ResourceGuard.gateway)
        self.resource = settings.oauth_audience or guard.resource
        self.scopes = tuple(settings.oauth_scopes)
        self._discovery: Discovery | None = None
        self._registered: dict[str, Any] | None = None  # this worker's DCR client
        self._registering = gevent.lock.BoundedSemaphore()
        self._spent: OrderedDict[str, float] = OrderedDict()

    # -- who is signed in ------------------------------------------------------------------------------------
    def current(self) -> tuple[str, str] | None:
        """(principal, label) of the browser's page sign-in while it lasts."""
        principal, label, until = session.get(PRINCIPAL), session.get(LABEL), session.get(UNTIL)
        if not isinstance(principal, str) or not isinstance(until, (int, float)) or time.time() >= until:
            return None
        return principal, str(label or principal)

    def form(self, csrf: str, back: str) -> str:
        return (
            f"<p>Sign in with your account at {escape(self.issuer)} to see and change your credentials.</p><form "
            f"method='post' action='{SIGNIN_PATH}'><input type='hidden' name='csrf_token' value='{escape(csrf)}'>"
            f"<input type='hidden' name='next' value='{escape(back_path(back))}'><button>Sign in</button></form>"
        )

    # -- the authorization server -------------------------------------------------------------------------------
    def discovery(self) -> Discovery:
        if self._discovery is not None and time.time() - self._discovery.fetched_at < DISCOVERY_FOR:
            return self._discovery
        with requests.Session() as http:
            metadata = found._as_metadata(http, self.issuer, HTTP_TIMEOUT)  # the relay's own lookup (RFC 8414)
        if metadata is None:
            raise SignInError(f"no authorization server metadata found for {self.issuer}")
        disc = Discovery(self.resource, self.issuer, metadata)
        flow.require_pkce(disc)
        for name in ("authorization_endpoint", "token_endpoint"):
            url = disc.endpoint(name)
            if url is None or usable_endpoint(url) is not None:
                raise SignInError(f"the authorization server {self.issuer} names no usable {name} (https)")
        self._discovery = disc
        return disc

    def client(self, disc: Discovery) -> dict[str, Any]:
        """The configured client, else this worker's registration (made now, once, when there is none)."""
        if not self._registering.acquire(timeout=2 * HTTP_TIMEOUT):
            raise SignInError("the page's client registration is taking too long: try again")
        try:
            return self._client(disc)
        finally:
            self._registering.release()

    def _client(self, disc: Discovery) -> dict[str, Any]:
        if self._registered is not None and not self.settings.vault_client_id:
            return self._registered
        options = SimpleNamespace(
            oauth_client_id=self.settings.vault_client_id,
            oauth_client_secret=self.settings.vault_client_secret,
            oauth_client_metadata_url="",
        )
        client = registration.gateway_client(options, disc.metadata, disc.issuer, self.redirect_uri, HTTP_TIMEOUT)
        if not self.settings.vault_client_id:
            self._registered = client
            log.info("the vault's page registered its client at %s", self.issuer)
        return client

    def _secret_of(self, client_id: str) -> str | None:
        """The secret of the client a sign-in began with, from this worker's configuration or registration (the
        cookie never holds one)."""
        if self.settings.vault_client_id and client_id == self.settings.vault_client_id:
            return self.settings.vault_client_secret or None
        held = self._registered
        return held.get("client_secret") if held is not None and held["client_id"] == client_id else None

    # -- the sign-in --------------------------------------------------------------------------------------------
    def begin(self, back: str) -> str:
        """Where the browser goes to sign in; the sign-in under way is kept in its session cookie."""
        disc = self.discovery()
        client = self.client(disc)
        state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        oauth = flow.oauth_client(client, redirect_uri=self.redirect_uri, code_challenge_method="S256")
        extra: dict[str, Any] = {"resource": self.resource}
        if self.scopes:
            extra["scope"] = " ".join(self.scopes)
        try:
            url, _ = oauth.create_authorization_url(
                disc.endpoint("authorization_endpoint"), state=state, code_verifier=verifier, **extra
            )
        finally:
            oauth.close()
        session[PENDING] = {
            "state": state,
            "verifier": verifier,
            "client_id": client["client_id"],
            "method": client.get("token_endpoint_auth_method") or "none",
            "back": back_path(back),
            "until": time.time() + STATE_TTL,
        }
        return str(url)

    def _spend(self, state: str) -> bool:
        """Record a state as redeemed; False when it was already (bounded: the oldest forgotten first)."""
        now = time.time()
        while self._spent and (len(self._spent) >= SPENT_STATES or next(iter(self._spent.values())) < now):
            self._spent.popitem(last=False)
        key = hashlib.sha256(state.encode()).hexdigest()
        if key in self._spent:
            return False
        self._spent[key] = now + STATE_TTL
        return True

    def finish(self, params: dict[str, str], environ: dict[str, Any]) -> str:
        """The callback: the browser's own sign-in, the code redeemed, the token checked as the MCP endpoint
        checks it; the browser is then signed in (a new session). The page to go back to; SignInError (a message
        naming no secret) otherwise."""
        pending = session.pop(PENDING, None)  # single use in this browser
        presented = params.get("state", "")
        if not isinstance(pending, dict) or not hmac.compare_digest(
            str(pending.get("state", "")).encode(), presented.encode()
        ):
            raise SignInError("this sign-in was not started in this browser (or was finished already): start again")
        if not self._spend(presented):
            raise SignInError("this sign-in was finished already: start again")
        if float(pending.get("until") or 0) < time.time():
            raise SignInError("this sign-in took too long: start again")
        disc = self.discovery()
        code = flow.check_response(params, disc)
        client_id = str(pending.get("client_id") or "")
        client = {
            "client_id": client_id,
            "client_secret": self._secret_of(client_id),
            "token_endpoint_auth_method": str(pending.get("method") or "none"),
        }
        oauth = flow.oauth_client(client, redirect_uri=self.redirect_uri)
        token_endpoint = disc.endpoint("token_endpoint") or ""
        token = flow.exchange(oauth, token_endpoint, code, str(pending["verifier"]), self.redirect_uri, self.resource)
        principal, label, expires = self.verify(str(token["access_token"]), environ)
        until = time.time() + PAGE_SESSION_FOR
        session.clear()  # a new session: nothing from before the sign-in carries over
        session.update({PRINCIPAL: principal, LABEL: label, UNTIL: min(until, expires or until)})
        signin.csrf_token()
        log.info("%s signed in to the vault's page", principal)
        return str(pending.get("back") or PAGE_PATH)

    def verify(self, token: str, environ: dict[str, Any]) -> tuple[str, str, float | None]:
        """(principal, label, expiry) of an access token, by the MCP endpoint's own check of a bearer token (the
        gateway as a whole: ResourceGuard.gateway's audiences and scopes). SignInError when it is refused."""
        checked: dict[str, Any] = {
            "HTTP_AUTHORIZATION": f"Bearer {token}",
            "QUERY_STRING": "",
            "REMOTE_ADDR": environ.get("REMOTE_ADDR", ""),
        }
        if "HTTP_X_FORWARDED_FOR" in environ:
            checked["HTTP_X_FORWARDED_FOR"] = environ["HTTP_X_FORWARDED_FOR"]
        try:
            principal = self.guard.authenticate(checked, None)
        except Refusal as refused:
            raise SignInError(f"the authorization server's token is not accepted here ({refused.message})") from None
        identity = context(checked).identity
        claims = identity.claims if identity is not None else {}
        names = [claims.get(name) for name in ("preferred_username", "email", "name")]
        label = next((str(name) for name in names if isinstance(name, str) and name), None)
        label = label or (identity.subject if identity is not None else principal)
        exp = claims.get("exp")
        return principal, label[:200], float(exp) if isinstance(exp, (int, float)) else None


def install(app: Flask, settings: Settings, guard: ResourceGuard) -> PageSignIn:
    """The session cookie's key and settings on `app`; the sign-in's routes are page.py's (page.sign_in_routes)."""
    app.secret_key = cookie_key(settings.vault_key)
    app.config.update(signin.cookie_config(settings.public_url))
    return PageSignIn(settings, guard)
