"""JWT access tokens (RFC 9068) checked against an issuer's keys: the signature with an asymmetric algorithm
only, then iss, aud, exp/nbf/iat and the scopes.

The keys come from a KeySource: a remote JWKS (JwksCache, found through the issuer's metadata when no URL is
configured), or the embedded authorization server's own keys. An unknown kid refreshes the keys, at most once
per cool-down, so a stream of forged kids cannot make the gateway hammer the issuer.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import requests
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import Key, KeySet

from mcpgate.serve.oauth.identity import Identity, TokenRejected, canonical_resource

log = logging.getLogger("mcpgate.oauth")

# Asymmetric only: never "none", never an HMAC algorithm (a public key must not become a shared secret).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
LEEWAY = 60  # seconds of clock skew allowed on exp, nbf and iat
MAX_TOKEN_BYTES = 16 * 1024
FETCH_TIMEOUT = 5.0
MAX_DOCUMENT_BYTES = 256 * 1024
KEYS_MAX_AGE = 3600.0  # a key set older than this is fetched again (the old one kept if that fails)
UNKNOWN_KID_COOLDOWN = 60.0  # at most one refresh for unknown kids per this many seconds
FAILURE_BACKOFF = 5.0  # after a failed fetch, requests fail fast this long instead of waiting on the issuer
MAX_CANDIDATES = 4  # keys tried for one token (a kid shared by several keys, or no kid)
KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}

ExtraCheck = Callable[[Mapping[str, Any]], "str | None"]


class IssuerUnavailable(Exception):
    """The issuer (its metadata, keys or introspection endpoint) cannot be reached: not the caller's fault, so
    not a 401 (a client would sign in again and again). The message is safe to show."""


class KeySource(Protocol):
    """Where a verifier's keys come from; refresh=True asks for the newest (an unknown kid was seen)."""

    def keys(self, refresh: bool) -> KeySet: ...


def fetch_json(url: str, timeout: float = FETCH_TIMEOUT, max_bytes: int = MAX_DOCUMENT_BYTES) -> Any:
    """GET a JSON document: no redirects, a size cap while reading, a timeout. Raises IssuerUnavailable."""
    try:
        with requests.get(
            url, timeout=timeout, stream=True, allow_redirects=False, headers={"Accept": "application/json"}
        ) as response:
            if response.status_code != 200:
                raise IssuerUnavailable(f"{url} answered HTTP {response.status_code}")
            body = b""
            for chunk in response.iter_content(16384):
                body += chunk
                if len(body) > max_bytes:
                    raise IssuerUnavailable(f"{url} sent more than {max_bytes} bytes")
        return json.loads(body)
    except requests.RequestException as exc:
        raise IssuerUnavailable(f"{url} is unreachable ({type(exc).__name__})") from None
    except ValueError:
        raise IssuerUnavailable(f"{url} did not answer JSON") from None


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: RFC 8414 (well-known inserted before the path), then OpenID Connect
    Discovery (appended to the issuer), then the OIDC name in the RFC 8414 position."""
    parts = urlsplit(issuer.rstrip("/"))
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path
    urls = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]
    if path:
        urls.append(f"{origin}/.well-known/openid-configuration{path}")
    return urls


def discover_jwks_url(issuer: str, fetch: Callable[[str], Any] = fetch_json) -> str:
    """The jwks_uri of the issuer's metadata whose issuer is exactly this one (RFC 8414 3.3)."""
    problems = []
    for url in metadata_urls(issuer):
        try:
            document = fetch(url)
        except IssuerUnavailable as exc:
            problems.append(str(exc))
            continue
        if not isinstance(document, dict) or document.get("issuer") != issuer:
            problems.append(f"{url} describes another issuer")
            continue
        jwks_uri = document.get("jwks_uri")
        if isinstance(jwks_uri, str) and jwks_uri:
            return jwks_uri
        problems.append(f"{url} names no jwks_uri")
    raise IssuerUnavailable(f"no metadata for issuer {issuer}: " + "; ".join(problems))


class JwksCache:
    """A remote JWKS as a KeySource: fetched on first use (the URL found by discovery when not given), kept
    KEYS_MAX_AGE, refreshed for an unknown kid at most once per `cooldown`; failures back off."""

    def __init__(
        self,
        jwks_url: str = "",
        issuer: str = "",
        cooldown: float = UNKNOWN_KID_COOLDOWN,
        max_age: float = KEYS_MAX_AGE,
        fetch: Callable[[str], Any] = fetch_json,
    ) -> None:
        if not (jwks_url or issuer):
            raise ValueError("a JWKS URL or an issuer to discover it from is needed")
        self.jwks_url, self.issuer = jwks_url, issuer
        self.cooldown, self.max_age, self.fetch = cooldown, max_age, fetch
        self.lock = threading.Lock()
        self.key_set: KeySet | None = None
        self.fetched_at = 0.0
        self.refreshed_at = float("-inf")  # the last refresh asked for by an unknown kid
        self.failed_at = float("-inf")
        self.fetches = 0

    def keys(self, refresh: bool) -> KeySet:
        with self.lock:
            now = time.monotonic()
            stale = self.key_set is None or now - self.fetched_at > self.max_age
            wanted = refresh and now - self.refreshed_at >= self.cooldown
            if (stale or wanted) and now - self.failed_at >= FAILURE_BACKOFF:
                if wanted and not stale:
                    self.refreshed_at = now
                self._load(now)
            if self.key_set is None:
                raise IssuerUnavailable("the issuer's signing keys cannot be fetched yet")
            return self.key_set

    def _load(self, now: float) -> None:
        try:
            if not self.jwks_url:
                self.jwks_url = discover_jwks_url(self.issuer, self.fetch)
            document = self.fetch(self.jwks_url)
            self.fetches += 1
            key_set = KeySet.import_key_set(document)
        except IssuerUnavailable as exc:
            self.failed_at = now
            log.warning("OAuth keys not refreshed: %s", exc)
            return
        except (JoseError, ValueError, TypeError, KeyError):
            self.failed_at = now
            log.warning("OAuth keys not refreshed: %s is not a valid JWKS", self.jwks_url)
            return
        self.key_set, self.fetched_at = key_set, now


def b64_json(segment: str) -> Any:
    padded = segment + "=" * (-len(segment) % 4)
    return json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))


def jwt_header(token: str) -> dict[str, Any] | None:
    """The JOSE header of a compact JWS (three segments), or None when the token is not shaped like a JWT."""
    segments = token.split(".")
    if len(segments) != 3 or not segments[0]:
        return None
    try:
        header = b64_json(segments[0])
    except (ValueError, UnicodeError):
        return None
    return header if isinstance(header, dict) else None


def audiences(claims: Mapping[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    return [entry for entry in aud if isinstance(entry, str)] if isinstance(aud, list) else []


def names_audience(claims: Mapping[str, Any], audience: str) -> bool:
    """Whether the token's aud names `audience` (compared as canonical_resource)."""
    wanted = canonical_resource(audience)
    return any(canonical_resource(entry) == wanted for entry in audiences(claims))


def claims_problem(
    claims: Mapping[str, Any], issuer: str, audience: str | None, now: float, leeway: float = LEEWAY
) -> str | None:
    """Why these (signature-checked) claims do not admit their bearer here, or None. Pure. `audience` None:
    any audience (the caller checks Identity.audiences against the request's resource), but one is needed."""
    if claims.get("iss") != issuer:
        return "the token was issued by another issuer"
    if not (names_audience(claims, audience) if audience is not None else audiences(claims)):
        return "the token is meant for another audience"
    exp = claims.get("exp")
    if not isinstance(exp, (int, float)) or isinstance(exp, bool):
        return "the token has no expiry"
    if exp + leeway < now:
        return "the token has expired"
    for name in ("nbf", "iat"):
        value = claims.get(name)
        if value is not None and (not isinstance(value, (int, float)) or value - leeway > now):
            return f"the token is not valid yet ({name})"
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        return "the token names no subject"
    return None


def scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """scope (space-separated, RFC 9068/8693) or scp (a list, or a string, as some issuers send)."""
    scope = claims.get("scope") or claims.get("scp")
    if isinstance(scope, str):
        return frozenset(scope.split())
    if isinstance(scope, list):
        return frozenset(entry for entry in scope if isinstance(entry, str))
    return frozenset()


def identity_of(claims: Mapping[str, Any], issuer: str) -> Identity:
    client_id = claims.get("client_id", claims.get("azp"))
    return Identity(
        issuer=issuer,
        subject=str(claims["sub"]),
        scopes=scopes_of(claims),
        client_id=client_id if isinstance(client_id, str) else None,
        audiences=frozenset(canonical_resource(entry) for entry in audiences(claims)),
        claims=claims,
    )


class JwtVerifier:
    """A Verifier for JWT access tokens of one issuer and one audience (None: of any, named in the Identity for
    the guard to check against the request's resource: several servers, one verifier)."""

    def __init__(
        self,
        issuer: str,
        audience: str | None,
        keys: KeySource,
        algorithms: tuple[str, ...] = ALGORITHMS,
        extra_check: ExtraCheck | None = None,
        leeway: float = LEEWAY,
    ) -> None:
        unsafe = [alg for alg in algorithms if alg not in ALGORITHMS]
        if unsafe:
            raise ValueError(f"not an asymmetric JWS algorithm: {', '.join(unsafe)}")
        self.issuer, self.audience, self.key_source = issuer, audience, keys
        self.algorithms, self.extra_check, self.leeway = algorithms, extra_check, leeway

    def verify(self, token: str, client: str | None = None) -> Identity:
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected("the token is too large")
        header = jwt_header(token)
        if header is None:
            raise TokenRejected("the token is not a JWT")
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise TokenRejected("the token's signing algorithm is not accepted")
        claims = self._verified_claims(token, str(alg), self._candidates(header))
        problem = claims_problem(claims, self.issuer, self.audience, time.time(), self.leeway)
        if problem is None and self.extra_check is not None:
            problem = self.extra_check(claims)
        if problem is not None:
            raise TokenRejected(problem)
        return identity_of(claims, self.issuer)

    def _candidates(self, header: Mapping[str, Any]) -> list[Key]:
        """The keys that may have signed it: the one its kid names (the keys refreshed once if it is unknown),
        or, without a kid, the keys of the algorithm's type (the first few)."""
        kid = header.get("kid")
        key_set = self.key_source.keys(refresh=False)
        if kid is None:
            kty = KEY_TYPES[str(header["alg"])[:2]]
            return [key for key in key_set if key.key_type == kty][:MAX_CANDIDATES]
        if not any(key.kid == kid for key in key_set):
            key_set = self.key_source.keys(refresh=True)
        matching = [key for key in key_set if key.kid == kid]
        if not matching:
            raise TokenRejected("the token's signing key is unknown")
        return matching[:MAX_CANDIDATES]

    @staticmethod
    def _verified_claims(token: str, alg: str, candidates: list[Key]) -> dict[str, Any]:
        if not candidates:
            raise TokenRejected("the token's signing key is unknown")
        for key in candidates:
            try:
                return dict(jwt.decode(token, key, algorithms=[alg]).claims)
            except JoseError:
                continue
            except ValueError:
                raise TokenRejected("the token is malformed") from None
        raise TokenRejected("the token's signature does not verify")
