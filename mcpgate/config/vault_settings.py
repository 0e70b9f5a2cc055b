"""The settings of the per-user credential vault (mcpgate.serve.vault): the key that encrypts the values, and the
bounds of what one principal may keep.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from mcpgate.config.declarations import declare, positive

VAULT_KEY_BYTES = 32


def vault_key(value: str) -> str | None:
    """Empty, or base64 of 32 bytes (the value itself is never shown)."""
    if not value:
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != VAULT_KEY_BYTES:
        return "must be base64 of 32 random bytes (openssl rand -base64 32 makes one)"
    return None


@dataclass(frozen=True, init=False, repr=False, eq=False)
class VaultSettings:
    """Per-user credential slots: the vault's key and bounds."""

    vault_key: str = declare(
        "",
        "The key (base64 of 32 bytes) that encrypts each user's credential slot values (AES-256-GCM) in the "
        "state store. Required when a server of MCPGATE_CONFIG declares user_secrets; a key that does not open "
        "the values kept stops the start. Never logged, never passed to a child.",
        validate=vault_key,
        secret=True,
    )
    vault_value_bytes: int = declare(
        8192, "Most bytes of one credential slot value; a larger one is refused by the page.", validate=positive
    )
    vault_slots: int = declare(
        64, "Most credential slots one principal may fill (across every server).", validate=positive
    )
    vault_poll: float = declare(
        0.5,
        "Seconds between a worker's checks of the vault for changed slots while it holds children started with "
        "user secrets (their holders are stopped on a change); the page's own worker acts at once.",
        validate=positive,
    )
    vault_client_id: str = declare(
        "",
        "resource-server mode: the client id the vault's page (/vault) signs users in with at MCPGATE_OAUTH_ISSUER "
        "(authorization code with PKCE; register its redirect URI MCPGATE_PUBLIC_URL/vault/callback there). Empty: "
        "the page registers a client itself (dynamic client registration) when the issuer offers it.",
    )
    vault_client_secret: str = declare(
        "",
        "resource-server mode: the secret of MCPGATE_VAULT_CLIENT_ID when it is a confidential client (empty: a "
        "public one). Never logged.",
        secret=True,
    )
