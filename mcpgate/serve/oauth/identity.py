"""Who a verified access token speaks for, and the interface every token check implements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit


@dataclass(frozen=True)
class Identity:
    """A verified caller: the issuer that vouched for it, the subject it names, the scopes it was granted, and
    the audiences its token names (canonical_resource of each: the guard checks the request's own resource).
    `claims`: the token's claims as verified (views read their group claim there); never logged, not compared."""

    issuer: str
    subject: str
    scopes: frozenset[str]
    client_id: str | None = None
    audiences: frozenset[str] = frozenset()
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def principal(self) -> str:
        """The owner of what the caller creates (sessions, pooled children): issuer and subject together, so
        two issuers' subjects never meet."""
        return f"{self.issuer}#{self.subject}"


def canonical_resource(uri: str) -> str:
    """A resource URI (or audience) as compared: scheme and host lowercased, no trailing slash (RFC 3986 6.2.2;
    MCP 2026-07-28: servers SHOULD accept an uppercase scheme or host). Not a URL: as it is."""
    parts = urlsplit(uri)
    if not parts.scheme or not parts.netloc:
        return uri
    path = parts.path[:-1] if parts.path.endswith("/") else parts.path
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, parts.fragment))


class TokenRejected(Exception):
    """An access token that does not let its bearer in. The message is safe to show: it never holds the token."""

    def __init__(self, description: str, error: str = "invalid_token") -> None:
        super().__init__(description)
        self.error = error


class Verifier(Protocol):
    """Checks one access token (signature or introspection, issuer, audience, lifetime). `client`: the address
    the token came from, which a check that asks someone else (introspection) limits; None: not limited."""

    def verify(self, token: str, client: str | None = None) -> Identity: ...
