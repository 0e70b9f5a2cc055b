"""An access token for the gateway (or the relay) itself at a remote upstream: the client credentials grant.

    ClientCredentialsAuth(client, upstream_url, timeout=TOKEN_TIMEOUT)   what HttpClient.auth takes
        covers(url)                  the token goes to the upstream's origin only
        authorization()              "Bearer <token>", fetched when none is held or it is about to expire
        on_unauthorized(h, sent)     a 401: fetch once more (True = send again); never for a token fetched
                                     after a 401 that the upstream refuses too (False: the 401 stands)
        on_forbidden(h, sent)        False: a machine client cannot ask for more scope than it is configured for
        accepted(sent)               the upstream took `sent`

The grant is RFC 6749 section 4.4 with the resource indicator (RFC 8707): `resource` is the upstream's
canonical URL, or the resource its protected-resource metadata names when the token endpoint was discovered
(mcpgate.relay.oauth.discovery). The client authenticates with client_secret_basic, client_secret_post or
private_key_jwt (RFC 7523: iss = sub = client_id, aud = the token endpoint, a new jti, exp ASSERTION_LIFETIME
ahead). One fetch at a time: concurrent callers wait (at most `timeout`) for the one in flight and take its
token. A token endpoint's answer is read up to MAX_TOKEN_BYTES within `timeout` seconds in all.

A failure is a TokenError (a RelayError: the upstream request was never sent, `maybe_sent` False) whose
`retryable` says whether trying later can help (a network failure, a 5xx, a timeout) or not (invalid_client,
an answer that is no token), `oauth_error` the server's error code. No message, log line or repr holds a
token, a secret or an assertion: whatever the token endpoint says is shown with those values blanked out.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus, urlsplit

import gevent.lock
import requests
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mcpgate.relay import errors
from mcpgate.relay.oauth.discovery import Challenge, SignInError, canonical_resource, discover, origin, printable

log = logging.getLogger("mcpgate.relay")

TOKEN_TIMEOUT = 30.0  # seconds: one token fetch (discovery included), and a caller's wait for one in flight
CONNECT_TIMEOUT = 10.0  # seconds to open a connection to the token endpoint (or the discovery documents)
MAX_TOKEN_BYTES = 64 * 1024  # a token endpoint's answer is a few hundred bytes to a few KiB
CHUNK_BYTES = 16 * 1024
REFRESH_MARGIN = 60.0  # fetch again this long before expiry (at most half the token's lifetime)
REFUSED_REFETCH_AFTER = 30.0  # a token the upstream refused right after its fetch: no new fetch for this long
FAILURE_HOLD = 5.0  # a failed fetch's error stands this long (no new fetch: the token endpoint is not hammered)
ASSERTION_LIFETIME = 120  # seconds a private_key_jwt assertion is valid (RFC 7523; at most 5 minutes)
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
# OAuth error codes (RFC 6749 5.2) after which trying again later can help
TRANSIENT_ERRORS = frozenset({"temporarily_unavailable", "server_error", "slow_down"})
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

PrivateKey = RSAKey | ECKey


class TokenError(errors.RelayError):
    """No access token for the upstream: the request was not sent. The message names the token endpoint
    (redacted) and the cause, never a secret or a token."""

    maybe_sent = False

    def __init__(self, message: str, *, retryable: bool, oauth_error: str | None = None, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.oauth_error = oauth_error
        self.status = status

    def again(self) -> TokenError:
        """The same error, raised anew (for a caller within FAILURE_HOLD of the failed fetch)."""
        return TokenError(self.message, retryable=self.retryable, oauth_error=self.oauth_error, status=self.status)


@dataclass(frozen=True)
class Client:
    """Who the gateway is at the authorization server. Exactly one of `secret` and `key` is set; neither is
    in the repr."""

    client_id: str
    method: str  # client_secret_basic | client_secret_post | private_key_jwt
    secret: str | None = field(default=None, repr=False)
    key: PrivateKey | None = field(default=None, repr=False, compare=False)
    key_pem: str | None = field(default=None, repr=False)  # what the key was read from: equality across reloads
    key_id: str | None = None
    alg: str | None = None  # RS256 / ES256 ... (the key's type decides)
    token_url: str | None = None  # None: discovered from the upstream's metadata
    scope: str | None = None


def usable_endpoint(url: str) -> str | None:
    """Why a token endpoint may not receive the client's credentials, or None: https, or http to loopback."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return None
    return "must be an https URL (or http on a loopback host)"


@dataclass
class _Held:
    header: str
    refresh_at: float  # monotonic; inf when the server named no lifetime
    expires_at: float


class ClientCredentialsAuth:
    """The upstream's token for one client: shared by every HttpClient that talks to that upstream."""

    def __init__(self, client: Client, upstream_url: str, timeout: float = TOKEN_TIMEOUT) -> None:
        self.client = client
        self.upstream_url = upstream_url
        self.timeout = timeout
        self._origin = origin(upstream_url)
        self._lock = gevent.lock.BoundedSemaphore(1)
        self._http = requests.Session()
        self._http.trust_env = False
        self._held: _Held | None = None
        self._unproven: str | None = None  # fetched after a 401, not accepted yet
        self._unproven_at = 0.0
        self._failed: tuple[TokenError, float] | None = None  # the last failed fetch, and until when it stands
        self._token_url = client.token_url
        self._resource = canonical_resource(upstream_url)
        self.fetches = 0  # token endpoint exchanges that issued a token

    def __repr__(self) -> str:
        return f"ClientCredentialsAuth({self.client.client_id!r}, {errors.redact(self.upstream_url)!r})"

    # ---------------------------------------------------------------- HttpClient's calls

    def covers(self, url: str) -> bool:
        return url == self.upstream_url or origin(url) == self._origin

    def authorization(self) -> str | None:
        """The held token, fetched first when there is none or it is about to expire; when that fetch fails
        and the held token has not expired yet, the held one (tried again after FAILURE_HOLD)."""
        held = self._held
        if held is not None and time.monotonic() < held.refresh_at:
            return held.header
        with self._locked():
            held = self._held
            if held is not None and time.monotonic() < held.refresh_at:
                return held.header
            try:
                return self._fetch().header
            except TokenError as exc:
                now = time.monotonic()
                if held is None or now >= held.expires_at:
                    raise
                held.refresh_at = min(held.expires_at, now + FAILURE_HOLD)
                log.warning("%s; the token held is still valid and stays in use", exc.message)
                return held.header

    def accepted(self, sent: str | None) -> None:
        if sent is not None and sent == self._unproven:
            self._unproven = None

    def on_unauthorized(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        with self._locked():
            held = self._held
            if held is not None and held.header != sent:
                return True  # another request renewed it while this one was out
            recent = time.monotonic() - self._unproven_at < REFUSED_REFETCH_AFTER
            if sent is not None and sent == self._unproven and recent:
                log.warning(
                    "%s refused the token just issued for client %s; not fetching another yet",
                    errors.redact(self.upstream_url),
                    self.client.client_id,
                )
                return False
            new = self._fetch()
            self._unproven, self._unproven_at = new.header, time.monotonic()
        return True

    def on_forbidden(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        return False

    def close(self) -> None:
        self._http.close()

    # ---------------------------------------------------------------- fetching

    def _locked(self) -> _Lock:
        return _Lock(self._lock, self.timeout, self.upstream_url)

    def _fetch(self) -> _Held:
        """A new token; a failure is remembered for FAILURE_HOLD (callers meanwhile get it without a fetch)."""
        failed = self._failed
        if failed is not None and time.monotonic() < failed[1]:
            raise failed[0].again()
        try:
            held = self._fetch_now()
        except TokenError as exc:
            self._failed = (exc, time.monotonic() + FAILURE_HOLD)
            self._token_url = self.client.token_url  # a discovered endpoint: discovered again next time
            raise
        self._failed = None
        return held

    def _fetch_now(self) -> _Held:
        started = time.monotonic()
        deadline = started + self.timeout
        url = self._endpoint(deadline)
        form, headers = self._request_parts(url)
        status, body = _post(self._http, url, form, headers, deadline)
        answer = self._answer(url, status, body)
        token = answer["access_token"]
        lifetime = _lifetime(answer.get("expires_in"))
        if lifetime is None:
            self._held = _Held(f"Bearer {token}", float("inf"), float("inf"))
        else:
            refresh_at = started + lifetime - min(REFRESH_MARGIN, lifetime / 2)
            self._held = _Held(f"Bearer {token}", refresh_at, started + lifetime)
        self.fetches += 1
        log.info(
            "client %s got a token for %s from %s (%s)",
            self.client.client_id,
            errors.redact(self.upstream_url),
            errors.redact(url),
            f"expires in {lifetime:g} s" if lifetime is not None else "no expiry given",
        )
        return self._held

    def _endpoint(self, deadline: float) -> str:
        """The token endpoint: configured, else discovered (once) from the upstream's metadata."""
        if self._token_url is not None:
            return self._token_url
        try:
            found = discover(self._http, self.upstream_url, Challenge(), max(0.1, deadline - time.monotonic()))
        except SignInError as exc:
            raise TokenError(
                f"cannot find the token endpoint of {self._named()}: {exc.message}", retryable=True
            ) from None
        url = found.endpoint("token_endpoint")
        if url is None:
            raise TokenError(f"the authorization server of {self._named()} names no token_endpoint", retryable=False)
        problem = usable_endpoint(url)
        if problem is not None:
            raise TokenError(f"the discovered token endpoint {errors.redact(url)} {problem}", retryable=False)
        self._resource, self._token_url = found.resource, url
        return url

    def _request_parts(self, url: str) -> tuple[dict[str, str], dict[str, str]]:
        client = self.client
        form = {"grant_type": "client_credentials", "resource": self._resource}
        if client.scope:
            form["scope"] = client.scope
        headers = {"Accept": "application/json", "User-Agent": "mcpgate"}
        if client.method == "client_secret_basic":
            headers["Authorization"] = "Basic " + _basic(client.client_id, client.secret or "")
        elif client.method == "client_secret_post":
            form.update(client_id=client.client_id, client_secret=client.secret or "")
        else:
            form.update(client_id=client.client_id, client_assertion_type=ASSERTION_TYPE)
            form["client_assertion"] = assertion(client, url)
        return form, headers

    def _answer(self, url: str, status: int, body: bytes) -> dict[str, Any]:
        """The token endpoint's answer as a token, or the TokenError it means."""
        where = f"the token endpoint {errors.redact(url)} (client {self.client.client_id})"
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise TokenError(
                f"{where} answered HTTP {status} without a JSON object", retryable=status >= 500, status=status
            )
        if status != 200 or "error" in answer:
            code = self._blanked(printable(answer.get("error"))[:100]) or None
            description = self._blanked(printable(answer.get("error_description"))[:300])
            text = f"{where} refused: {code or f'HTTP {status}'}" + (f" ({description})" if description else "")
            retry = status >= 500 or status == 429 or code in TRANSIENT_ERRORS
            raise TokenError(text, retryable=retry, oauth_error=code, status=status)
        token = answer.get("access_token")
        if not isinstance(token, str) or not token or not token.isprintable() or " " in token:
            raise TokenError(f"{where} answered without a usable access_token", retryable=False, status=status)
        kind = str(answer.get("token_type") or "")
        if kind.lower() != "bearer":
            shown = self._blanked(printable(kind)[:40])
            raise TokenError(f"{where} issued a {shown!r} token, not a Bearer token", retryable=False)
        return answer

    def _blanked(self, text: str) -> str:
        """A server's text with the client's secret blanked out, as sent and as encoded for Basic (a server
        may echo what it received)."""
        secret = self.client.secret
        if not secret:
            return text
        for form in (secret, quote_plus(secret, safe=""), _basic(self.client.client_id, secret)):
            text = text.replace(form, "***")
        return text

    def _named(self) -> str:
        return f"{errors.redact(self.upstream_url)} (client {self.client.client_id})"


class _Lock:
    """The one fetch at a time: a caller waits at most `timeout` for the fetch in flight."""

    def __init__(self, lock: gevent.lock.BoundedSemaphore, timeout: float, url: str) -> None:
        self.lock, self.timeout, self.url = lock, timeout, url

    def __enter__(self) -> None:
        if not self.lock.acquire(timeout=self.timeout):
            raise TokenError(
                f"gave up waiting {self.timeout:g} s for the token fetch in flight for {errors.redact(self.url)}",
                retryable=True,
            )

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def assertion(client: Client, token_url: str, now: float | None = None) -> str:
    """The private_key_jwt client assertion (RFC 7523 section 3) for the token endpoint."""
    assert client.key is not None and client.alg is not None
    issued = int(time.time() if now is None else now)
    header: dict[str, Any] = {"alg": client.alg, "typ": "JWT"}
    if client.key_id:
        header["kid"] = client.key_id
    claims = {
        "iss": client.client_id,
        "sub": client.client_id,
        "aud": token_url,
        "jti": secrets.token_urlsafe(18),
        "iat": issued,
        "exp": issued + ASSERTION_LIFETIME,
    }
    return jwt.encode(header, claims, client.key, algorithms=[client.alg])


def _post(
    http: requests.Session, url: str, form: dict[str, str], headers: dict[str, str], deadline: float
) -> tuple[int, bytes]:
    """POST the form; (status, body) read up to MAX_TOKEN_BYTES before the deadline."""
    remaining = deadline - time.monotonic()
    limits = (min(CONNECT_TIMEOUT, max(0.1, remaining)), max(0.1, remaining))
    try:
        with errors.mapped(url):
            resp = http.post(url, data=form, headers=headers, timeout=limits, stream=True, allow_redirects=False)
            try:
                return resp.status_code, _bounded(resp, url, deadline)
            finally:
                resp.close()
    except TokenError:
        raise
    except errors.RelayError as exc:
        raise TokenError(
            f"the token endpoint {errors.redact(url)} failed: {_network(exc.message, url)}", retryable=exc.retryable
        ) from None


def _bounded(resp: requests.Response, url: str, deadline: float) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = resp.raw.read1(CHUNK_BYTES, decode_content=True)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > MAX_TOKEN_BYTES:
            raise TokenError(
                f"the token endpoint {errors.redact(url)} answered more than {MAX_TOKEN_BYTES} bytes", retryable=False
            )
        if time.monotonic() > deadline:
            raise TokenError(f"the token endpoint {errors.redact(url)} answered too slowly", retryable=True)
        parts.append(chunk)


def _basic(client_id: str, secret: str) -> str:
    """The Basic credentials of RFC 6749 2.3.1: both parts form-encoded first."""
    pair = quote_plus(client_id, safe="") + ":" + quote_plus(secret, safe="")
    return base64.b64encode(pair.encode()).decode()


def _network(message: str, url: str) -> str:
    """errors.mapped speaks of "upstream": here it is the token endpoint."""
    return message.replace(f"upstream {errors.redact(url)}", "it").replace("upstream", "the endpoint")


def _lifetime(value: Any) -> float | None:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None
