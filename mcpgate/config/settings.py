"""Every setting of mcpgate, declared once: name, type, default, environment variable or flag, doc, validator
(how a declaration works, and what is generated from it: mcpgate/config/declarations.py).

`Settings` holds the gateway's settings (`gunicorn mcpgate.wsgi`, environment variables), gunicorn's own
knobs included; `RelaySettings` holds `mcpgate-relay`'s (command-line flags, its token from the
environment). Both are frozen dataclasses, so every value reaches mypy as a typed field. The relay's
argument parser and both README tables are generated from these declarations
(`python -m mcpgate.config.settings`), and a test fails when the README and the declarations disagree.

The gateway's settings are declared by area, one module each, and assembled here: the children
(child_settings), the HTTP front and gunicorn (front_settings), authentication (auth_settings), the 2025
sessions (session_settings), MCP 2026-07-28 and its pool (modern_settings), a fleet's instances
(fleet_settings); the relay's in relay_settings. `Settings` adds what spans areas (`resource_url`, `problem`).
Every name is read from here, never from an area module: this module's names are the public ones.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpgate.config.auth_settings import AuthSettings
from mcpgate.config.child_settings import ChildSettings
from mcpgate.config.declarations import SettingsError as SettingsError  # the error every caller of the settings catches
from mcpgate.config.declarations import add_arguments as add_arguments
from mcpgate.config.declarations import declared as declared
from mcpgate.config.declarations import load as load
from mcpgate.config.declarations import markdown_table as table
from mcpgate.config.declarations import unknown_variables
from mcpgate.config.fleet_settings import FleetSettings
from mcpgate.config.front_settings import BIND_DEFAULT as BIND_DEFAULT
from mcpgate.config.front_settings import FrontSettings
from mcpgate.config.hub_settings import HubSettings
from mcpgate.config.modern_settings import ModernSettings
from mcpgate.config.modes import AuthMode
from mcpgate.config.observe_settings import ObserveSettings
from mcpgate.config.pins_settings import PinsSettings
from mcpgate.config.relay_settings import TOKEN_ENV as TOKEN_ENV
from mcpgate.config.relay_settings import RelaySettings as RelaySettings
from mcpgate.config.search_settings import SearchSettings
from mcpgate.config.session_settings import SessionSettings
from mcpgate.config.vault_settings import VaultSettings


# The fields come base by base from the last base to the first (dataclasses walk the MRO backwards): children,
# front, auth, sessions, 2026-07-28, fleet, observe, vault, pins, the order of the README table.
@dataclass(frozen=True)
class Settings(
    SearchSettings,
    HubSettings,
    PinsSettings,
    VaultSettings,
    ObserveSettings,
    FleetSettings,
    ModernSettings,
    SessionSettings,
    AuthSettings,
    FrontSettings,
    ChildSettings,
):
    """The gateway's settings, from MCPGATE_* environment variables (and PORT)."""

    @property
    def resource_url(self) -> str:
        """The OAuth resource this gateway is (RFC 8707/9728): the public URL plus the endpoint path."""
        return self.public_url.rstrip("/") + self.path if self.public_url else ""

    def problem(self) -> str | None:
        """A conflict between settings, or None."""
        auth_problem = self.auth_problem()
        if auth_problem:
            return auth_problem
        if "*" in self.cors_origins and self.auth is not AuthMode.NONE:
            return (
                "MCPGATE_CORS_ORIGINS may be * only when authentication is off: list the origins whose pages "
                "may call the gateway"
            )
        if self.port and self.bind:
            return (
                "PORT and MCPGATE_BIND are both set: PORT binds 0.0.0.0:$PORT; unset one of them. Platforms such "
                "as Heroku set PORT, and so do Procfile runners (honcho, foreman) for every process: a Procfile "
                "line that sets MCPGATE_BIND starts with `unset PORT;`"
            )
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        return load(cls, environ, **overrides)


# MCPGATE_* variables that are no setting but known all the same: deploy/Procfile.fleet's own (Redis's port and
# directory, HAProxy's routing; MCPGATE_I<n>: where instance i<n> listens), which its runner gives every process.
RECIPE_VARIABLES = ("MCPGATE_REDIS_PORT", "MCPGATE_REDIS_DIR", "MCPGATE_ROUTING")
_INSTANCE_ADDRESS = re.compile(r"MCPGATE_I[0-9]+")


def unknown(environ: Mapping[str, str] | None = None) -> list[str]:
    """The MCPGATE_* variables neither the gateway, the relay nor the fleet recipe reads, each with the nearest
    known name (reported at start: a mistyped setting would be silently ignored)."""
    environ = os.environ if environ is None else environ
    known = {s.env for cls in (Settings, RelaySettings) for s in declared(cls) if s.env}
    known.update(RECIPE_VARIABLES, (name for name in environ if _INSTANCE_ADDRESS.fullmatch(name)))
    return unknown_variables(environ, known, "MCPGATE_")


def markdown_table() -> str:
    """The README's table of the gateway's settings."""
    return table(Settings, "Variable")


def relay_markdown_table() -> str:
    """The README's table of the relay's options."""
    return table(RelaySettings, "Option")


if __name__ == "__main__":
    print(markdown_table())
    print()
    print(relay_markdown_table())
