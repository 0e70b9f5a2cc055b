"""Where a server's authorization lives: the challenge, its resource metadata, its authorization server.

Protected resource metadata (RFC 9728) comes from the challenge's `resource_metadata`, then the
path-form well-known URL, then the root one. Authorization server metadata (RFC 8414, and OpenID
Connect discovery) is tried at the URLs the MCP specification lists for the issuer, and the issuer a
document names must be the one its URL was built from. A server with no resource metadata at all
is a 2025-03-26 server: its origin is the authorization server, with the default endpoints when it
publishes no metadata either. The URL functions are pure; `discover` does the fetching.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from mcpgate.relay import errors

if TYPE_CHECKING:  # requests is loaded to sign in (session.py), not by a relay that never does
    import requests

PRM_WELL_KNOWN = "/.well-known/oauth-protected-resource"
OAUTH_WELL_KNOWN = "/.well-known/oauth-authorization-server"
OIDC_WELL_KNOWN = "/.well-known/openid-configuration"
METADATA_BYTES = 256 * 1024
# The 2025-03-26 specification's endpoints for an authorization server that publishes no metadata.
LEGACY_ENDPOINTS = {
    "authorization_endpoint": "/authorize",
    "token_endpoint": "/token",
    "registration_endpoint": "/register",
}

_PARAM = re.compile(r'([A-Za-z0-9_\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


class SignInError(errors.ConfigError):
    """OAuth sign-in could not complete; the message says why and what to configure (never a secret)."""


def printable(value: Any) -> str:
    """A server's string fit for a terminal: control characters (escape sequences) and other unprintable
    characters (bidirectional overrides among them) dropped. Whatever a sign-in prints from a server (the
    authorization URL, a user code, an error description) goes through this."""
    text = value if isinstance(value, str) else ""
    return "".join(ch for ch in text if ch.isprintable())


@dataclass(frozen=True)
class Challenge:
    """The parameters of a Bearer challenge (WWW-Authenticate), as far as sign-in needs them."""

    resource_metadata: str | None = None
    scope: tuple[str, ...] = ()
    error: str | None = None

    @property
    def insufficient_scope(self) -> bool:
        return self.error == "insufficient_scope"


@dataclass
class Discovery:
    """What sign-in needs to know about a server: the resource, the issuer and its metadata."""

    resource: str
    issuer: str
    metadata: dict[str, Any]
    scopes_supported: tuple[str, ...] = ()  # the resource's (PRM), not the authorization server's
    prm_url: str | None = None
    fetched_at: float = field(default_factory=time.time)

    def endpoint(self, name: str) -> str | None:
        value = self.metadata.get(name)
        return value if isinstance(value, str) and value else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "issuer": self.issuer,
            "authorization_server": self.metadata,
            "scopes_supported": list(self.scopes_supported),
            "prm_url": self.prm_url,
            "fetched_at": self.fetched_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Discovery | None:
        try:
            return cls(
                resource=str(data["resource"]),
                issuer=str(data["issuer"]),
                metadata=dict(data["authorization_server"]),
                scopes_supported=tuple(str(s) for s in data.get("scopes_supported") or ()),
                prm_url=data.get("prm_url"),
                fetched_at=float(data.get("fetched_at") or 0.0),
            )
        except (KeyError, TypeError, ValueError):
            return None


def parse_challenge(header: str | None) -> Challenge:
    """The Bearer challenge's parameters (other schemes in the same header are ignored)."""
    if not header:
        return Challenge()
    start = re.search(r"(?i)(?:^|,)\s*bearer(?:\s+|$)", header)
    text = header[start.end() :] if start else header
    params: dict[str, str] = {}
    for match in _PARAM.finditer(text):
        name = match.group(1).lower()
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params.setdefault(name, re.sub(r"\\(.)", r"\1", value))
    return Challenge(
        resource_metadata=params.get("resource_metadata") or None,
        scope=tuple(params.get("scope", "").split()),
        error=params.get("error") or None,
    )


def origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "", "", ""))


def canonical_resource(server_url: str) -> str:
    """The server's canonical URI (RFC 8707): lower-case scheme and host, no fragment, no trailing slash."""
    parts = urlsplit(server_url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def prm_urls(server_url: str, from_header: str | None) -> list[str]:
    """Where to look for the protected resource metadata, in order (RFC 9728 section 3.1)."""
    base = origin(server_url)
    path = urlsplit(server_url).path.rstrip("/")
    found = [from_header] if from_header else []
    if path:
        found.append(f"{base}{PRM_WELL_KNOWN}{path}")
    found.append(f"{base}{PRM_WELL_KNOWN}")
    return list(dict.fromkeys(found))


def as_metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be, in the order the MCP specification gives."""
    base = origin(issuer)
    path = urlsplit(issuer).path.rstrip("/")
    if not path:
        return [f"{base}{OAUTH_WELL_KNOWN}", f"{base}{OIDC_WELL_KNOWN}"]
    return [f"{base}{OAUTH_WELL_KNOWN}{path}", f"{base}{OIDC_WELL_KNOWN}{path}", f"{base}{path}{OIDC_WELL_KNOWN}"]


def resource_matches(resource: str, server_url: str) -> bool:
    """Whether a resource identifier covers the server URL: same origin, and the server's path at or
    under the resource's (a root resource covers every path of its origin)."""
    if origin(resource) != origin(server_url):
        return False
    held = urlsplit(resource).path.rstrip("/")
    wanted = urlsplit(server_url).path.rstrip("/")
    return wanted == held or wanted.startswith(held + "/")


def same_issuer(named: str, expected: str) -> bool:
    """The issuer a metadata document names against the one its URL was built from: identical, except
    a trailing slash on an empty path (the one difference URL parsers introduce themselves)."""
    if named == expected:
        return True
    return urlsplit(expected).path in ("", "/") and named.rstrip("/") == expected.rstrip("/")


def choose_scope(
    requested: str, challenge: Challenge, discovery: Discovery, held: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The scopes to ask for: the user's (--oauth-scope), else the challenge's, else the resource's
    scopes_supported, else none; with what is already held (step-up asks for the union), and
    offline_access when the authorization server lists it (so a refresh token is issued)."""
    if requested.split():
        wanted: tuple[str, ...] = tuple(requested.split())
    elif challenge.scope:
        wanted = challenge.scope
    else:
        wanted = discovery.scopes_supported
    merged = list(dict.fromkeys([*held, *wanted]))
    if merged and "offline_access" in (discovery.metadata.get("scopes_supported") or ()):
        merged.append("offline_access")
    return tuple(dict.fromkeys(merged))


def fetch_json(http: requests.Session, url: str, timeout: float) -> dict[str, Any] | None:
    """A JSON object from a metadata URL, or None when there is none (4xx, not JSON, not an object)."""
    import requests

    try:
        with http.get(url, headers={"Accept": "application/json"}, timeout=timeout, stream=True) as resp:
            if resp.status_code != 200:
                return None
            body = resp.raw.read(METADATA_BYTES + 1, decode_content=True)
    except requests.RequestException as exc:
        raise SignInError(f"cannot fetch {errors.redact(url)}: {type(exc).__name__}") from None
    if len(body) > METADATA_BYTES:
        raise SignInError(f"metadata at {errors.redact(url)} exceeds {METADATA_BYTES} bytes")
    try:
        document = json.loads(body)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def discover(http: requests.Session, server_url: str, challenge: Challenge, timeout: float) -> Discovery:
    """Resource metadata, then the authorization server's metadata; raises SignInError."""
    prm, prm_url = None, None
    for url in prm_urls(server_url, challenge.resource_metadata):
        prm = fetch_json(http, url, timeout)
        if prm is not None:
            prm_url = url
            break
    if prm is None:
        return _legacy(http, server_url, timeout)
    resource = prm.get("resource")
    if not isinstance(resource, str) or not resource_matches(resource, server_url):
        raise SignInError(
            f"the resource metadata at {errors.redact(prm_url or '')} names resource {str(resource)[:200]!r}, "
            f"which is not {errors.redact(server_url)}: refusing to sign in"
        )
    servers = [s for s in prm.get("authorization_servers") or () if isinstance(s, str)]
    if not servers:
        raise SignInError(f"the resource metadata at {errors.redact(prm_url or '')} names no authorization server")
    issuer = servers[0]
    metadata = _as_metadata(http, issuer, timeout)
    if metadata is None:
        raise SignInError(f"no authorization server metadata found for {errors.redact(issuer)}")
    supported = tuple(str(s) for s in prm.get("scopes_supported") or ())
    return Discovery(resource, issuer, metadata, supported, prm_url)


def _as_metadata(
    http: requests.Session, issuer: str, timeout: float, same_origin: bool = False
) -> dict[str, Any] | None:
    """The first metadata document found for the issuer. Its `issuer` must be the one the URL was built
    from; with `same_origin` (a 2025-03-26 server, whose issuer nobody named: the relay guessed its
    origin) any issuer on that origin is taken, and is the issuer from then on."""
    for url in as_metadata_urls(issuer):
        document = fetch_json(http, url, timeout)
        if document is None:
            continue
        named = document.get("issuer")
        if isinstance(named, str) and (same_issuer(named, issuer) or (same_origin and origin(named) == issuer)):
            return document
        raise SignInError(
            f"the authorization server metadata at {errors.redact(url)} names issuer {str(named)[:200]!r}, "
            f"not {errors.redact(issuer)}: refusing to use it"
        )
    return None


def _legacy(http: requests.Session, server_url: str, timeout: float) -> Discovery:
    """A 2025-03-26 server: its origin is the authorization server."""
    issuer = origin(server_url)
    metadata = _as_metadata(http, issuer, timeout, same_origin=True)
    if metadata is None:
        metadata = {"issuer": issuer, **{name: issuer + path for name, path in LEGACY_ENDPOINTS.items()}}
        metadata["code_challenge_methods_supported"] = ["S256"]  # PKCE is assumed where nothing is published
    return Discovery(canonical_resource(server_url), str(metadata["issuer"]), metadata)
