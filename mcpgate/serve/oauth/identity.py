"""Who a verified access token speaks for, and the interface every token check implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Identity:
    """A verified caller: the issuer that vouched for it, the subject it names, the scopes it was granted."""

    issuer: str
    subject: str
    scopes: frozenset[str]
    client_id: str | None = None

    @property
    def principal(self) -> str:
        """The owner of what the caller creates (sessions, pooled children): issuer and subject together, so
        two issuers' subjects never meet."""
        return f"{self.issuer}#{self.subject}"


class TokenRejected(Exception):
    """An access token that does not let its bearer in. The message is safe to show: it never holds the token."""

    def __init__(self, description: str, error: str = "invalid_token") -> None:
        super().__init__(description)
        self.error = error


class Verifier(Protocol):
    """Checks one access token (signature or introspection, issuer, audience, lifetime)."""

    def verify(self, token: str) -> Identity: ...
