"""The settings of pinned tool definitions (mcpgate.serve.pins: a server's tools fingerprinted when first seen, a
later change logged and counted, or hidden until approved) and of the management API (mcpgate.serve.admin).

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config.declarations import declare, positive

PIN_POLICIES = ("off", "warn", "block")


@dataclass(frozen=True, init=False, repr=False, eq=False)
class PinsSettings:
    """Pinned tool definitions and the management API."""

    tool_pins: str = declare(
        "off",
        "Pinned tool definitions: each tool's definition (name, title, description, schemas, annotations) is "
        "fingerprinted when first seen and kept in the state store. warn: a later change is logged and counted "
        "(mcpgate_tool_definition_changes_total); block: the changed tool is also hidden from tools/list and its "
        "calls refused until approved (the management API). Per server in MCPGATE_CONFIG.",
        choices=PIN_POLICIES,
    )
    pins_max_tools: int = declare(
        1000,
        "Tools pinned per server at most; a tool first seen past it is not pinned (hidden under block).",
        validate=positive,
    )
    pins_max_pending: int = declare(
        100,
        "Changes awaiting approval per server at most; past it a change is not recorded (still hidden under "
        "block, and logged).",
        validate=positive,
    )
    pins_definition_bytes: int = declare(
        65536,
        "Bytes of one tool definition kept with its pending change for review at most (a larger one is kept as "
        "its fingerprint only).",
        validate=positive,
    )
    admin_token: str = declare(
        "",
        "The management API's bearer token (/admin/: servers, pending tool changes to approve or reject, "
        "reload), compared in constant time. Empty, and no MCPGATE_ADMIN_SCOPE: the API is off (404). Never "
        "logged.",
        secret=True,
    )
    admin_scope: str = declare(
        "",
        "With an OAuth mode: the scope an access token must carry to use the management API. Empty: OAuth "
        "tokens do not open it.",
    )
    admin_body_bytes: int = declare(
        16384,
        "Bytes of a management API request body at most (413 past it).",
        validate=positive,
    )
    admin_vault_principals: int = declare(
        100000,
        "Principals whose vault slots GET /admin/vault counts at most (past it the counts are marked incomplete).",
        validate=positive,
    )
