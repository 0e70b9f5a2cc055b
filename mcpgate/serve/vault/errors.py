"""The vault's errors, apart from what raises them, so that importing the vault loads neither the cipher's library
nor Redis's (a worker without slots never does: tests/test_lazy_imports.py). SlotsEmpty is here too: the endpoint's
table (serve/errors.py) and the pool catch it in every worker, and this module is all they load of the vault."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mcpgate.config.declarations import SettingsError

if TYPE_CHECKING:
    from mcpgate.serve.vault.slots import SlotInfo

ENV_PREFIX = "USER_SECRET_"  # without OAuth: slot x is the operator's USER_SECRET_X
URL_ELICITATION_REQUIRED = -32042  # the 2025 eras' answer to SlotsEmpty (elicit.py)


class CannotOpen(Exception):
    """A sealed value that this key does not open for this principal and slot (or that is not one)."""


class WrongVaultKey(SettingsError):
    """MCPGATE_VAULT_KEY does not open what the vault keeps."""


class VaultKeyMissing(SettingsError):
    """Slots are declared, OAuth is on, and no MCPGATE_VAULT_KEY is set."""


class VaultUnavailable(RuntimeError):
    """The vault's Redis cannot be reached or refused the command (the kind of error only, never the URL)."""


class SlotsEmpty(Exception):
    """A child of `principal` needs slots that are empty: the user fills them at `url` (None: the operator sets
    them in the gateway's environment). The message names the slots' labels, never a value."""

    def __init__(self, missing: Sequence[SlotInfo], url: str | None) -> None:
        self.missing, self.url = tuple(missing), url
        labels = ", ".join(info.label for info in self.missing)
        if url is None:
            names = ", ".join(ENV_PREFIX + info.name.upper() for info in self.missing)
            super().__init__(f"The MCP server needs {labels}: the gateway's operator must set {names}")
        else:
            super().__init__(f"The MCP server needs your {labels}: set it at {url}, then retry")
