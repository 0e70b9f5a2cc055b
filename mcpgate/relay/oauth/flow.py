"""The authorization code grant with PKCE, a loopback redirect and the user's browser.

The redirect lands on a one-shot HTTP server on 127.0.0.1 whose port the OS assigns (a saved
registration's port is tried first, so an authorization server that compares ports exactly still
matches), so any number of relays can sign in at once. The authorization URL is always printed on
stderr and, where a browser can be shown, opened with the standard library's webbrowser (never a
shell, only http and https URLs). The answer must carry our `state`, and the issuer (RFC 9207) when
the server advertises it or sends one. Authlib's OAuth2Session builds the URL with the S256
challenge and exchanges the code.
"""

from __future__ import annotations

import html
import logging
import os
import secrets
import sys
import time
import webbrowser
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import gevent
from gevent.event import AsyncResult
from gevent.pywsgi import WSGIServer

from mcpgate.config.relay_settings import RelaySettings
from mcpgate.relay import errors
from mcpgate.relay.oauth import registration
from mcpgate.relay.oauth.discovery import Discovery, SignInError, printable

log = logging.getLogger("mcpgate.relay")

CALLBACK_PATH = "/callback"
LOOPBACK = "127.0.0.1"
HTTP_TIMEOUT = 30.0
PAGE = "<!doctype html><meta charset=utf-8><title>mcpgate-relay</title><p>{}</p>"


class Callback:
    """A loopback HTTP server that waits for the one redirect carrying `state`."""

    def __init__(self, preferred_port: int | None = None) -> None:
        self.state = secrets.token_urlsafe(24)
        self.result: AsyncResult = AsyncResult()
        self.server = _bind(self._app, preferred_port)

    @property
    def redirect_uri(self) -> str:
        return f"http://{LOOPBACK}:{self.server.server_port}{CALLBACK_PATH}"

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        params = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
        if environ.get("PATH_INFO") != CALLBACK_PATH or not secrets.compare_digest(params.get("state", ""), self.state):
            return _page(start_response, "404 Not Found", "This is not the sign-in mcpgate-relay is waiting for.")
        if not self.result.ready():
            self.result.set(params)
        if "error" in params:
            return _page(start_response, "200 OK", "Sign-in was refused; you can close this tab.")
        return _page(start_response, "200 OK", "Signed in: you can close this tab and return to your application.")

    def wait(self, timeout: float) -> dict[str, str]:
        try:
            params: dict[str, str] = self.result.get(timeout=timeout)
        except gevent.Timeout:
            raise SignInError(
                f"no browser sign-in within {timeout:g} s (see the URL printed above; --oauth-timeout sets the wait)"
            ) from None
        return params

    def close(self) -> None:
        self.server.stop(timeout=1)


def _bind(app: Callable[..., Iterable[bytes]], preferred: int | None) -> WSGIServer:
    for port in ([preferred] if preferred else []) + [0]:
        server = WSGIServer((LOOPBACK, port), app, log=None, error_log=None)
        try:
            server.start()
        except OSError:
            continue
        return server
    raise SignInError(f"cannot listen on {LOOPBACK} for the sign-in redirect")


def _page(start_response: Callable[..., Any], status: str, text: str) -> list[bytes]:
    body = PAGE.format(html.escape(text)).encode()
    start_response(status, [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")])
    return [body]


def saved_port(client: dict[str, Any] | None) -> int | None:
    """The loopback port of a saved registration's redirect URI, to be tried first."""
    for uri in (client or {}).get("redirect_uris") or ():
        parts = urlsplit(str(uri))
        if parts.hostname == LOOPBACK and parts.port:
            return parts.port
    return None


def open_browser(url: str) -> None:
    """Print the URL (always) and hand it to a browser where one can be shown (in a native thread:
    a BROWSER command is waited for, which must not stop the relay). The URL is built from the
    authorization server's metadata: its control characters (terminal escapes) are dropped first, and
    the browser gets the URL the user was shown."""
    url = printable(url)
    print(f"mcpgate-relay: to sign in, open this URL in a browser:\n  {url}", file=sys.stderr, flush=True)
    if urlsplit(url).scheme not in ("http", "https") or not _can_show_browser():
        return
    gevent.get_hub().threadpool.spawn(_launch, url)


def _can_show_browser() -> bool:
    """A BROWSER command, a desktop session, or a system that has one (macOS, Windows). Never a
    console browser: it would take over the host's pipes."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _launch(url: str) -> None:
    try:
        if not webbrowser.open(url):
            log.info("no browser could be opened; use the URL printed above")
    except Exception as exc:  # noqa: BLE001 - a browser failing must not end the sign-in wait
        log.info("opening a browser failed (%s); use the URL printed above", type(exc).__name__)


def check_response(params: dict[str, str], discovery: Discovery) -> str:
    """The code from the redirect, once its error and issuer are checked; raises SignInError."""
    if "error" in params:
        detail = printable(params.get("error_description") or params["error"])
        raise SignInError(f"the authorization server refused the sign-in: {detail[:200]}")
    advertised = discovery.metadata.get("authorization_response_iss_parameter_supported") is True
    iss = params.get("iss")
    if iss is None and advertised:
        raise SignInError("the sign-in response carries no iss although the authorization server advertises it")
    if iss is not None and iss != discovery.issuer:
        raise SignInError(f"the sign-in response came from issuer {iss[:200]!r}, not {discovery.issuer!r}: refused")
    code = params.get("code")
    if not code:
        raise SignInError("the sign-in response carries no authorization code")
    return code


def require_pkce(discovery: Discovery) -> None:
    methods = discovery.metadata.get("code_challenge_methods_supported") or ()
    if "S256" not in methods:
        raise SignInError(
            f"the authorization server {errors.redact(discovery.issuer)} does not advertise PKCE with S256 "
            "(code_challenge_methods_supported): refusing to sign in"
        )


def oauth_client(client: dict[str, Any], **options: Any) -> Any:
    """Authlib's requests client for a registration (imported when a sign-in happens)."""
    from authlib.integrations.requests_client import OAuth2Session

    return OAuth2Session(
        client_id=client["client_id"],
        client_secret=client.get("client_secret") or None,
        token_endpoint_auth_method=client.get("token_endpoint_auth_method") or None,
        default_timeout=HTTP_TIMEOUT,
        **options,
    )


def token_record(token: dict[str, Any], scopes: tuple[str, ...]) -> dict[str, Any]:
    """What is kept of a token response: never anything but these fields."""
    expires_at = token.get("expires_at")
    if expires_at is None and isinstance(token.get("expires_in"), (int, float)):
        expires_at = time.time() + float(token["expires_in"])
    scope = token.get("scope")
    return {
        "access_token": token["access_token"],
        "token_type": token.get("token_type") or "Bearer",
        "refresh_token": token.get("refresh_token"),
        "expires_at": float(expires_at) if isinstance(expires_at, (int, float)) else None,
        "scope": scope if isinstance(scope, str) else " ".join(scopes),
    }


def authorization_code(
    settings: RelaySettings,
    discovery: Discovery,
    scopes: tuple[str, ...],
    saved_client: dict[str, Any] | None,
    http: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sign in through the browser: (the client used, the token record)."""
    require_pkce(discovery)
    endpoint, token_endpoint = discovery.endpoint("authorization_endpoint"), discovery.endpoint("token_endpoint")
    if endpoint is None or token_endpoint is None:
        raise SignInError(f"the authorization server {errors.redact(discovery.issuer)} names no endpoints to sign in")
    callback = Callback(saved_port(saved_client))
    try:
        client = registration.choose(
            settings, discovery.metadata, discovery.issuer, saved_client, callback.redirect_uri, http, HTTP_TIMEOUT
        )
        session = oauth_client(client, redirect_uri=callback.redirect_uri, code_challenge_method="S256")
        verifier = secrets.token_urlsafe(48)
        extra: dict[str, Any] = {"resource": discovery.resource}
        if scopes:
            extra["scope"] = " ".join(scopes)
        url, _ = session.create_authorization_url(endpoint, state=callback.state, code_verifier=verifier, **extra)
        open_browser(url)
        code = check_response(callback.wait(settings.oauth_timeout), discovery)
    finally:
        callback.close()
    token = exchange(session, token_endpoint, code, verifier, callback.redirect_uri, discovery.resource)
    return client, token_record(token, scopes)


def _token_call(
    session: Any, url: str, kind: str, refused: type[SignInError], subject: str, call: Callable[[], Any]
) -> dict[str, Any]:
    """The token `call` (a `kind` request to the token endpoint `url`) answers, `session` closed after it:
    `refused` when the authorization server refuses `subject` or answers without an access token,
    SignInError when it cannot be reached."""
    from authlib.common.errors import AuthlibBaseError
    from requests import RequestException

    try:
        token: dict[str, Any] = call()
    except AuthlibBaseError as exc:
        raise refused(f"the {subject} was refused: {exc.description or exc.error}") from None
    except (RequestException, ValueError) as exc:
        raise SignInError(f"the {kind} request to {errors.redact(url)} failed: {type(exc).__name__}") from None
    finally:
        session.close()
    if not token.get("access_token"):
        raise refused(f"the {kind} response carries no access_token")
    return token


def exchange(session: Any, url: str, code: str, verifier: str, redirect_uri: str, resource: str) -> dict[str, Any]:
    return _token_call(
        session,
        url,
        "token",
        SignInError,
        "token request",
        lambda: session.fetch_token(
            url,
            grant_type="authorization_code",
            code=code,
            code_verifier=verifier,
            redirect_uri=redirect_uri,
            resource=resource,
        ),
    )


class RefreshRejected(SignInError):
    """The authorization server refused the refresh token (expired, revoked, rotated away)."""


def refresh(client: dict[str, Any], url: str, refresh_token: str, resource: str, scope: str | None) -> dict[str, Any]:
    """A new token for the refresh token; raises RefreshRejected when it is dead, SignInError when
    the authorization server cannot be reached."""
    session = oauth_client(client)
    token = _token_call(
        session,
        url,
        "refresh",
        RefreshRejected,
        "refresh token",
        lambda: session.refresh_token(url, refresh_token=refresh_token, resource=resource),
    )
    record = token_record(token, tuple((scope or "").split()))
    record["refresh_token"] = record["refresh_token"] or refresh_token
    return record
