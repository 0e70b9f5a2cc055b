"""The grants without a browser: device authorization (RFC 8628), client credentials, and refresh.

Each takes the authorization server's metadata (RFC 8414: token_endpoint, device_authorization_endpoint,
token_endpoint_auth_methods_supported, ...) and the client held for it (store.Record.client:
client_id, client_secret when confidential, token_endpoint_auth_method when registration said so)
and returns the token endpoint's answer (a dict for store.Record.set_tokens). Every request carries
the `resource` (RFC 8707) and the scope asked for, when given. A failure raises GrantError, whose
message is safe to show (never a token, a secret or a device code) and whose `error` is the OAuth
error code ("invalid_grant" from a refresh: the refresh token is dead, sign in again).

Authlib's requests client (OAuth2Session) sends every request and does the client authentication:
none (a public client: client_id in the body), client_secret_basic, client_secret_post, and
private_key_jwt (RFC 7523 section 2.2, the assertion signed by Authlib with joserfc; its audience the
issuer, else the token endpoint). Written here: the method's choice, the device grant's polling and
its messages.

    device_code(metadata, client, scope, resource, print_fn, *, timeout, timeouts) -> dict
    client_credentials(metadata, client, scope, resource, *, timeouts, private_key=None) -> dict
    refresh(metadata, client, refresh_token, scope, resource, *, timeouts) -> dict
    auth_method(metadata, client, private_key=None) -> str

`timeouts` is (connect, read) seconds for each HTTP exchange (RelaySettings.connect_timeout and
read_timeout); the device grant's `timeout` bounds the whole wait for the user (oauth_timeout).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import requests
from authlib.integrations.base_client.errors import OAuthError
from authlib.integrations.requests_client import OAuth2Session
from authlib.oauth2.rfc7523 import PrivateKeyJWT
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, OKPKey, RSAKey, import_key

from mcpgate.relay import errors
from mcpgate.relay.oauth.discovery import printable

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_INTERVAL = 5.0  # RFC 8628 3.2: when the server names none
SLOW_DOWN_STEP = 5.0  # RFC 8628 3.5
ASSERTION_LIFETIME = 300  # seconds a private_key_jwt assertion is valid
SECRET_METHODS = ("client_secret_basic", "client_secret_post")
MAX_KEY_BYTES = 64 * 1024
EC_ALGORITHMS = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512"}

Timeouts = tuple[float, float]
PrivateKey = RSAKey | ECKey | OKPKey


class GrantError(Exception):
    """A grant failed. str() is safe to show; `error` is the OAuth error code when the server sent one."""

    def __init__(self, message: str, error: str | None = None) -> None:
        super().__init__(message)
        self.error = error


def auth_method(metadata: Mapping[str, Any], client: Mapping[str, Any], private_key: str | None = None) -> str:
    """How the client authenticates at the token endpoint.

    A private key: private_key_jwt (when the server lists it). A secret: the method registration
    returned, else client_secret_basic when listed or nothing is listed (RFC 8414's default), else
    client_secret_post. Neither: none (a public client).
    """
    supported = metadata.get("token_endpoint_auth_methods_supported")
    listed = [str(m) for m in supported] if isinstance(supported, list) else []
    if private_key:
        if listed and "private_key_jwt" not in listed:
            raise GrantError(f"the authorization server does not accept private_key_jwt (it lists {', '.join(listed)})")
        return "private_key_jwt"
    if not client.get("client_secret"):
        return "none"
    registered = client.get("token_endpoint_auth_method")
    if registered in SECRET_METHODS:
        return str(registered)
    for method in SECRET_METHODS:
        if not listed or method in listed:
            return method
    raise GrantError(f"the authorization server accepts no client secret method (it lists {', '.join(listed)})")


def client_credentials(
    metadata: Mapping[str, Any],
    client: Mapping[str, Any],
    scope: str | None,
    resource: str | None,
    *,
    timeouts: Timeouts,
    private_key: str | None = None,
) -> dict[str, Any]:
    """The client credentials grant (RFC 6749 4.4): a token for the client itself, no user."""
    if not client.get("client_id"):
        raise GrantError("the client credentials grant needs a client id (--oauth-client-id)")
    if not client.get("client_secret") and not private_key:
        raise GrantError("the client credentials grant needs MCPGATE_OAUTH_CLIENT_SECRET or a private key")
    with _session(metadata, client, private_key) as session:
        params = _params(scope=scope, resource=resource)
        return _token(session, metadata, "client_credentials", params, timeouts)


def refresh(
    metadata: Mapping[str, Any],
    client: Mapping[str, Any],
    refresh_token: str,
    scope: str | None,
    resource: str | None,
    *,
    timeouts: Timeouts,
    private_key: str | None = None,
) -> dict[str, Any]:
    """Spend a refresh token (RFC 6749 6). Coordinate first (store.Record.newer_than): a rotating
    server accepts each refresh token once."""
    with _session(metadata, client, private_key) as session:
        params = _params(scope=scope, resource=resource, refresh_token=refresh_token)
        return _token(session, metadata, "refresh_token", params, timeouts)


def device_code(
    metadata: Mapping[str, Any],
    client: Mapping[str, Any],
    scope: str | None,
    resource: str | None,
    print_fn: Callable[[str], None],
    *,
    timeout: float,
    timeouts: Timeouts,
    private_key: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The device authorization grant (RFC 8628): print where to go and the code, poll until the user
    approves, the code expires, the user denies, or `timeout` seconds pass."""
    endpoint = metadata.get("device_authorization_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise GrantError("the authorization server offers no device authorization (no device_authorization_endpoint)")
    if not client.get("client_id"):
        raise GrantError("the device authorization grant needs a client id (pre-registered or registered)")
    with _session(metadata, client, private_key) as session:
        answer = _device_authorization(session, endpoint, _params(scope=scope, resource=resource), timeouts)
        print_fn(instructions(answer))
        expires_in = _number(answer.get("expires_in"), timeout)
        deadline = time.monotonic() + min(timeout, expires_in)
        interval = _number(answer.get("interval"), DEFAULT_INTERVAL)
        params = _params(resource=resource, device_code=str(answer["device_code"]))
        while True:
            if time.monotonic() + interval > deadline:
                raise GrantError(f"the device sign-in was not completed within {min(timeout, expires_in):g} s")
            sleep(interval)
            try:
                return _token(session, metadata, DEVICE_GRANT, params, timeouts)
            except GrantError as exc:
                if exc.error == "authorization_pending":
                    continue
                if exc.error == "slow_down":
                    interval += SLOW_DOWN_STEP
                    continue
                if exc.error == "expired_token":
                    raise GrantError("the device code expired before the sign-in was completed", exc.error) from None
                if exc.error == "access_denied":
                    raise GrantError("the device sign-in was denied", exc.error) from None
                raise


def instructions(answer: Mapping[str, Any]) -> str:
    """What the user is told (on stderr): the page to open and the code to enter."""
    code = printable(answer.get("user_code"))
    complete = printable(answer.get("verification_uri_complete"))
    uri = printable(answer.get("verification_uri"))
    if complete:
        return f"mcpgate-relay: to sign in, open {complete} (or {uri} and enter the code {code})"
    return f"mcpgate-relay: to sign in, open {uri} and enter the code {code}"


# -- the exchanges -----------------------------------------------------------------------------------


@contextmanager
def _session(metadata: Mapping[str, Any], client: Mapping[str, Any], private_key: str | None) -> Iterator[Any]:
    method = auth_method(metadata, client, private_key)
    secret: Any = client.get("client_secret") or None
    session = OAuth2Session(client_id=str(client.get("client_id") or ""), token_endpoint_auth_method=method)
    try:
        if method == "private_key_jwt":
            key = _private_key(private_key or "")
            audience = metadata.get("issuer") or metadata.get("token_endpoint")
            alg = _algorithm(key, metadata.get("token_endpoint_auth_signing_alg_values_supported"))
            claims = {"exp": int(time.time()) + ASSERTION_LIFETIME}
            session.register_client_auth_method(PrivateKeyJWT(audience, claims=claims, alg=alg))
            secret = key
        session.client_secret = secret
        yield session
    finally:
        session.close()


def _token(
    session: Any, metadata: Mapping[str, Any], grant: str, params: dict[str, str], timeouts: Timeouts
) -> dict[str, Any]:
    url = metadata.get("token_endpoint")
    if not isinstance(url, str) or not url:
        raise GrantError("the authorization server metadata names no token_endpoint")
    with _exchange("token endpoint", url):
        answer = session.fetch_token(url, grant_type=grant, timeout=timeouts, allow_redirects=False, **params)
    return _checked(dict(answer))


def _device_authorization(session: Any, url: str, params: dict[str, str], timeouts: Timeouts) -> dict[str, Any]:
    with _exchange("device authorization endpoint", url):
        auth = session.client_auth(session.token_endpoint_auth_method)
        reply = session.post(
            url,
            data=params,
            auth=auth,
            withhold_token=True,
            timeout=timeouts,
            allow_redirects=False,
            headers={"Accept": "application/json"},
        )
        try:
            body = reply.json()
        except ValueError:
            body = None
    if not isinstance(body, dict):
        raise GrantError(f"the device authorization endpoint answered {reply.status_code} without a JSON object")
    if "error" in body or reply.status_code != 200:
        raise GrantError(_described("the device authorization endpoint", body, reply.status_code), _code(body))
    missing = [name for name in ("device_code", "user_code", "verification_uri") if not body.get(name)]
    if missing:
        raise GrantError(f"the device authorization answer lacks {', '.join(missing)}")
    return body


@contextmanager
def _exchange(what: str, url: str) -> Iterator[None]:
    """OAuth and transport failures as GrantErrors naming the endpoint (its URL redacted)."""
    try:
        yield
    except OAuthError as exc:
        error = exc.error if isinstance(exc.error, str) else None
        raise GrantError(
            _described(f"the {what}", {"error": error, "error_description": exc.description}), error
        ) from None
    except requests.RequestException as exc:
        status = exc.response.status_code if exc.response is not None else None
        reason = f"answered {status}" if status else f"is unreachable ({type(exc).__name__})"
        raise GrantError(f"the {what} {errors.redact(url)} {reason}") from None
    except ValueError as exc:  # Authlib: a 4xx answer that is not a JSON object
        raise GrantError(f"the {what} {errors.redact(url)} answered without JSON ({exc})") from None


def _checked(answer: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(answer.get("access_token"), str) or not answer["access_token"]:
        raise GrantError("the token endpoint answered without an access_token")
    kind = str(answer.get("token_type") or "Bearer")
    if kind.lower() != "bearer":
        raise GrantError(f"the token endpoint issued a {printable(kind)!r} token; only Bearer tokens are supported")
    return answer


def _described(who: str, body: Mapping[str, Any], status: int | None = None) -> str:
    code = _code(body) or (f"HTTP {status}" if status else "an error")
    description = printable(body.get("error_description"))[:300]
    return f"{who} answered {code}" + (f": {description}" if description else "")


def _code(body: Mapping[str, Any]) -> str | None:
    error = body.get("error")
    return printable(error) or None if isinstance(error, str) else None


def _params(**values: str | None) -> dict[str, str]:
    return {name: value for name, value in values.items() if value}


def _number(value: Any, fallback: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return fallback


def _private_key(source: str) -> PrivateKey:
    """The key from MCPGATE_OAUTH_CLIENT_KEY: a PEM, a JWK, or the path of a file holding one."""
    text = source.strip()
    if not text.startswith(("-----BEGIN", "{")):
        try:
            with open(os.path.expanduser(text), encoding="utf-8") as f:
                text = f.read(MAX_KEY_BYTES)
        except (OSError, UnicodeDecodeError) as exc:
            raise GrantError(f"the client's private key file cannot be read ({type(exc).__name__})") from None
    key = _imported(text)
    if key is None or not key.is_private:
        raise GrantError("the client's key is not an RSA, EC or OKP private key (PEM or JWK)")
    return key


def _imported(text: str) -> PrivateKey | None:
    """The key of a JWK (its kty names the type) or a PEM (tried as each type: never an implicit guess)."""
    try:
        if text.startswith("{"):
            key = import_key(json.loads(text))
            return key if isinstance(key, (RSAKey, ECKey, OKPKey)) else None
    except (JoseError, ValueError, TypeError):
        return None
    for kind in (RSAKey, ECKey, OKPKey):
        try:
            imported: PrivateKey = kind.import_key(text)
        except (JoseError, ValueError, TypeError):
            continue
        return imported
    return None


def _algorithm(key: PrivateKey, supported: Any) -> str:
    """The signing algorithm for the key, one the server lists when it lists any."""
    if isinstance(key, ECKey):
        candidates = [EC_ALGORITHMS.get(str(key.curve_name), "ES256")]
    elif isinstance(key, OKPKey):
        candidates = ["EdDSA", "Ed25519"]
    else:
        candidates = ["RS256", "PS256", "RS384", "RS512", "PS384", "PS512"]
    listed = [str(a) for a in supported] if isinstance(supported, list) else []
    for alg in candidates:
        if not listed or alg in listed:
            return alg
    raise GrantError(f"the server accepts none of the signing algorithms for this key (it lists {', '.join(listed)})")
