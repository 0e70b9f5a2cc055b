"""The vault's errors, apart from what raises them, so that importing the vault loads neither the cipher's library
nor Redis's (a worker without slots never does: tests/test_lazy_imports.py)."""

from __future__ import annotations

from mcpgate.config.declarations import SettingsError


class CannotOpen(Exception):
    """A sealed value that this key does not open for this principal and slot (or that is not one)."""


class WrongVaultKey(SettingsError):
    """MCPGATE_VAULT_KEY does not open what the vault keeps."""


class VaultKeyMissing(SettingsError):
    """Slots are declared, OAuth is on, and no MCPGATE_VAULT_KEY is set."""


class VaultUnavailable(RuntimeError):
    """The vault's Redis cannot be reached or refused the command (the kind of error only, never the URL)."""
