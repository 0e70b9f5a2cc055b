"""What the embedded authorization server's two storages share, whatever they keep it in (SQLite: storage.py,
Redis: redis_storage.py): the records, the `Storage` interface, what is kept of a bearer string (its fingerprint)
and of an access token (the fingerprint of its claims, bound to its jti), how long an unused registration and a
revoked token family are remembered, and the named secrets made once and kept sealed (NamedSecrets).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from mcpgate.serve.oauth.sealing import Sealer, kept

UNUSED_CLIENT_TTL_S = 3600.0  # a registration that never got a code is forgotten after this long (the default of
# MCPGATE_OAUTH_UNUSED_CLIENT_TTL, which the server passes)
REVOKED_FAMILY_TTL_S = 86400  # at least this long a revoked token family is remembered


def fingerprint(value: str) -> str:
    """What is stored of a code, refresh token or client secret: its SHA-256, hex."""
    return hashlib.sha256(value.encode()).hexdigest()


def access_binding(claims: Mapping[str, Any]) -> str:
    """What an access token's jti is stored with: the fingerprint of every claim it was issued with (sub,
    client_id, exp, aud, scope, ...), so a token signed later under the same jti with any claim changed is
    refused (access_revoked)."""
    return fingerprint(json.dumps(claims, sort_keys=True, separators=(",", ":")))


@dataclass(frozen=True)
class ClientRecord:
    """A registration; `used` once it got a code (a user approved it): never forgotten or evicted then."""

    client_id: str
    secret_hash: str | None
    metadata: dict[str, Any]
    used: bool = False


@dataclass(frozen=True)
class CodeRecord:
    """An authorization code's grant. `family` names the tokens it produces (known before they exist, so a
    reuse racing the first exchange still revokes them)."""

    client_id: str
    redirect_uri: str
    scope: str
    subject: str
    resource: str
    challenge: str
    challenge_method: str
    expires_at: float
    family: str


@dataclass(frozen=True)
class RefreshRecord:
    family: str
    client_id: str
    subject: str
    scope: str
    expires_at: float


class Storage(Protocol):
    # sign-in (signin.py)
    def consented(self, subject: str, client_id: str, scopes: Iterable[str]) -> bool: ...
    def record_consent(self, subject: str, client_id: str, scopes: Iterable[str]) -> None: ...
    def secret(self, name: str) -> bytes: ...
    def stored_once(self, name: str, make: Callable[[], bytes]) -> bytes: ...
    # clients
    def add_client(
        self, client_id: str, secret: str | None, metadata: dict[str, Any], limit: int, unused_ttl: float = ...
    ) -> bool: ...
    def client(self, client_id: str) -> ClientRecord | None: ...
    # codes: single use; a second use revokes what the first produced
    def add_code(self, code: str, record: CodeRecord) -> None: ...
    def claim_code(self, code: str) -> CodeRecord | None: ...
    # tokens
    def add_refresh(self, token: str, record: RefreshRecord) -> None: ...
    def claim_refresh(self, token: str) -> RefreshRecord | None: ...
    def refresh_record(self, token: str) -> RefreshRecord | None: ...
    def add_access(self, jti: str, family: str | None, expires_at: float, binding: str = "") -> None: ...
    def access_revoked(self, jti: str, binding: str = "") -> bool: ...
    def revoke_access(self, jti: str) -> None: ...
    def revoke_family(self, family: str) -> None: ...


class NamedSecrets:
    """A storage's named secrets (stored_once, secret) over its two primitives: `_stored_once` (the value kept
    under a name, made and stored the first time: the first worker or instance to store it wins) and
    `_replace_stored` (a value replaced only while it is still the one seen). Sealed with `sealer` when there is
    one (sealing.kept)."""

    sealer: Sealer | None

    def stored_once(self, name: str, make: Callable[[], bytes]) -> bytes:
        """The value stored under `name`, made by `make` the first time; sealed with the sealer when there is one."""
        return kept(self._stored_once, self._replace_stored, self.sealer, name, make)

    def secret(self, name: str) -> bytes:
        """32 random bytes made on first use and kept (the same for every worker and after a restart)."""
        return self.stored_once("secret:" + name, lambda: secrets.token_bytes(32))

    def _stored_once(self, name: str, make: Callable[[], bytes]) -> bytes:
        raise NotImplementedError

    def _replace_stored(self, name: str, seen: bytes, value: bytes) -> None:
        raise NotImplementedError
