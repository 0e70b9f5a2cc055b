"""Opaque access tokens checked by the issuer's introspection endpoint (RFC 7662), and the verifier that picks
JWT or introspection per token.

Answers are cached by the token's SHA-256 (never the token itself) until the token's exp, at most CACHE_TTL
seconds (a revoked token stops working within that), in a bounded LRU. A refused token is remembered for
INACTIVE_TTL seconds in an LRU of its own (NEGATIVE_ENTRIES), so a repeated bad token costs the issuer one
request, and a stream of made-up tokens cannot push the admitted ones out of their cache.

What the cache does not answer costs the issuer a request, so those are limited per client address: at most
MCPGATE_OAUTH_INTROSPECTION_LIMIT a minute (ratelimit.FailureLimit, per worker); past it the caller is refused
(IntrospectionLimited: 429 with Retry-After) without asking the issuer. A token answered from the cache is never
limited.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any
from urllib.parse import urlsplit

import requests

from mcpgate.serve.oauth.identity import Identity, TokenRejected, Verifier
from mcpgate.serve.oauth.jwt_verifier import (
    FETCH_TIMEOUT,
    LEEWAY,
    MAX_DOCUMENT_BYTES,
    MAX_TOKEN_BYTES,
    IssuerUnavailable,
    audiences,
    identity_of,
    jwt_header,
    names_audience,
)
from mcpgate.serve.oauth.ratelimit import FailureLimit

CACHE_TTL = 60.0
INACTIVE_TTL = 10.0
CACHE_ENTRIES = 4096  # admitted tokens remembered
NEGATIVE_ENTRIES = 1024  # refused tokens remembered (apart: they never push an admitted one out)
LOOKUPS_PER_MINUTE = 60  # the default of MCPGATE_OAUTH_INTROSPECTION_LIMIT


class IntrospectionLimited(Exception):
    """This client address asked the issuer about too many tokens in the last minute; `retry_after` seconds
    until it may again. The message is safe to show."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many unknown tokens from this address: try again in {retry_after} seconds")
        self.retry_after = retry_after


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def introspection_problem(answer: Any, issuer: str, audience: str | None, now: float) -> str | None:
    """Why an introspection answer does not admit the token here, or None. Pure. `audience` None: any (the
    guard checks the request's own), but one is needed."""
    if not isinstance(answer, dict) or answer.get("active") is not True:
        return "the token is not active"
    if issuer and answer.get("iss", issuer) != issuer:
        return "the token was issued by another issuer"
    if not (names_audience(answer, audience) if audience is not None else audiences(answer)):
        return "the token is meant for another audience"
    exp = answer.get("exp")
    if exp is not None and (not isinstance(exp, (int, float)) or exp + LEEWAY < now):
        return "the token has expired"
    subject = answer.get("sub")
    if not isinstance(subject, str) or not subject:
        return "the token names no subject"
    return None


Outcome = Identity | TokenRejected


class Lru:
    """At most `entries` outcomes by token fingerprint, each until its deadline; the least recently used goes
    first. Not locked: its owner holds a lock."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self.items: OrderedDict[str, tuple[float, Outcome]] = OrderedDict()

    def get(self, key: str) -> Outcome | None:
        entry = self.items.get(key)
        if entry is None:
            return None
        if entry[0] < time.monotonic():
            del self.items[key]
            return None
        self.items.move_to_end(key)
        return entry[1]

    def put(self, key: str, value: Outcome, ttl: float) -> None:
        self.items[key] = (time.monotonic() + ttl, value)
        self.items.move_to_end(key)
        while len(self.items) > self.entries:
            self.items.popitem(last=False)


class IntrospectionVerifier:
    """A Verifier asking the introspection endpoint, authenticated with client_secret_basic."""

    def __init__(
        self,
        url: str,
        client_id: str,
        client_secret: str,
        audience: str | None,
        issuer: str = "",
        timeout: float = FETCH_TIMEOUT,
        entries: int = CACHE_ENTRIES,
        per_address: int = LOOKUPS_PER_MINUTE,
        negative_entries: int = NEGATIVE_ENTRIES,
    ) -> None:
        self.url, self.auth = url, (client_id, client_secret)
        self.audience, self.timeout = audience, timeout
        # the principal's issuer: the configured one, else the introspection endpoint's origin
        parts = urlsplit(url)
        self.issuer = issuer or f"{parts.scheme}://{parts.netloc}"
        self.checked_issuer = issuer
        self.lock = threading.Lock()
        self.admitted = Lru(entries)
        self.refused = Lru(negative_entries)
        self.lookups = FailureLimit(per_address)
        self.requests = 0

    def verify(self, token: str, client: str | None = None) -> Identity:
        """The token's identity; `client`: the address it came from, whose lookups are limited (None: not
        limited)."""
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected("the token is too large")
        key = fingerprint(token)
        with self.lock:
            outcome = self.admitted.get(key)
            if outcome is None:
                outcome = self.refused.get(key)
            if outcome is None and client is not None:
                wait = self.lookups.retry_after(client)
                if wait:
                    raise IntrospectionLimited(wait)
                self.lookups.failed(client)  # counts the lookup
        if outcome is None:
            outcome, ttl = self._introspect(token)
            with self.lock:
                (self.refused if isinstance(outcome, TokenRejected) else self.admitted).put(key, outcome, ttl)
        if isinstance(outcome, TokenRejected):
            raise TokenRejected(str(outcome), outcome.error)
        return outcome

    def _introspect(self, token: str) -> tuple[Identity | TokenRejected, float]:
        answer = self._post(token)
        now = time.time()
        problem = introspection_problem(answer, self.checked_issuer, self.audience, now)
        if problem is not None:
            return TokenRejected(problem), INACTIVE_TTL
        exp = answer.get("exp")
        ttl = min(CACHE_TTL, float(exp) - now) if isinstance(exp, (int, float)) else CACHE_TTL
        return identity_of(answer, self.issuer), max(ttl, 0.0)

    def _post(self, token: str) -> Any:
        self.requests += 1
        try:
            with requests.post(
                self.url,
                data={"token": token, "token_type_hint": "access_token"},
                auth=self.auth,
                headers={"Accept": "application/json"},
                timeout=self.timeout,
                allow_redirects=False,
                stream=True,
            ) as response:
                if response.status_code != 200:
                    raise IssuerUnavailable(f"the introspection endpoint answered HTTP {response.status_code}")
                body = response.raw.read(MAX_DOCUMENT_BYTES + 1, decode_content=True)
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise IssuerUnavailable("the introspection endpoint sent too much")
                return json.loads(body)
        except requests.RequestException as exc:
            raise IssuerUnavailable(f"the introspection endpoint is unreachable ({type(exc).__name__})") from None
        except ValueError:
            raise IssuerUnavailable("the introspection endpoint did not answer JSON") from None


class EitherVerifier:
    """JWT-shaped tokens to the JWT verifier when there is one; everything else (and every token when there
    is no JWT verifier) to introspection when there is one."""

    def __init__(self, jwt: Verifier | None, introspection: Verifier | None) -> None:
        if jwt is None and introspection is None:
            raise ValueError("a JWT verifier or an introspection verifier is needed")
        self.jwt, self.introspection = jwt, introspection

    def verify(self, token: str, client: str | None = None) -> Identity:
        if self.jwt is not None and (self.introspection is None or jwt_header(token) is not None):
            return self.jwt.verify(token, client)
        assert self.introspection is not None
        return self.introspection.verify(token, client)
