"""GET /admin/vault: which per-user credential slots (serve/vault) are set, per server, never a value.

Without a query: each server with slots, each slot's label, how many principals have it set and when the first
and the last of their values was saved (`first_set`, `last_set`, UTC). Which principals those are is not told:
the store keeps principals as digests in Redis, and a list of who holds a GitHub token is itself worth keeping
to the one asking about one user.

`?principal=<name>` (the principal as the gateway names it: the audit log's, `issuer#sub` in resource-server mode):
that principal's slots, set or not and when. Asked by name only (never listed), and logged, naming the admin and
the principal.

Without a vault store (no OAuth: the operator's environment fills each slot) each slot says whether its variable
is set in this worker's environment. A store that cannot be read answers 503. Bounded: the counts read at most
MCPGATE_ADMIN_VAULT_PRINCIPALS principals (`complete` false past it).
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from mcpgate.core import jsonrpc
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.vault.errors import VaultUnavailable
from mcpgate.serve.vault.vault import ENV_PREFIX

if TYPE_CHECKING:
    from mcpgate.serve.servers.published import PublishedServers
    from mcpgate.serve.vault.slots import Slots

log = logging.getLogger("mcpgate.admin")

MAX_PRINCIPAL_CHARS = 1024  # a principal asked for (longer: 400)


def when(stamp: float) -> str:
    """A time as the API writes it: ISO 8601, UTC, seconds."""
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def server_slots(servers: PublishedServers) -> dict[str, Slots]:
    """Each server declaring user secrets: its slots."""
    found = {}
    for name, server in servers.items():
        fill = getattr(server.child_spec, "slots", None)
        if fill is not None:
            found[name] = fill.slots
    return found


def report(servers: PublishedServers, principal: str | None, limit: int, who: str) -> dict[str, Any]:
    """The answer of GET /admin/vault (?principal=<name>: that principal's slots)."""
    declared = server_slots(servers)
    store = servers.vault.store if servers.vault is not None else None
    if principal is not None and (not principal or len(principal) > MAX_PRINCIPAL_CHARS):
        raise Refusal(400, jsonrpc.INVALID_PARAMS, f"Bad Request: principal must be 1 to {MAX_PRINCIPAL_CHARS} chars")
    if store is None:
        return {"store": "environment" if declared else "off", "servers": environment(declared)}
    try:
        if principal is not None:
            log.info("management API: the vault slots of principal %r shown to %s", principal, who)
            listing = store.listing(principal)
            body: dict[str, Any] = {"principal": principal, "servers": {}}
            for name, slots in declared.items():
                body["servers"][name] = {
                    info.name: {"label": info.label, "set": info.name in listing}
                    | ({"updated_at": when(listing[info.name].updated_at)} if info.name in listing else {})
                    for info in slots.info
                }
            return body
        counts, complete = store.summary(limit)
    except VaultUnavailable as exc:
        raise Refusal(503, jsonrpc.INTERNAL_ERROR, f"Service Unavailable: {exc}") from None
    shown: dict[str, Any] = {}
    for name, slots in declared.items():
        shown[name] = {}
        for info in slots.info:
            counted = counts.get(info.name)
            entry: dict[str, Any] = {"label": info.label, "principals": counted.principals if counted else 0}
            if counted is not None:
                entry |= {"first_set": when(counted.first_set), "last_set": when(counted.last_set)}
            shown[name][info.name] = entry
    return {"store": "vault", "complete": complete, "servers": shown}


def environment(declared: dict[str, Slots]) -> dict[str, Any]:
    """Without a store: each slot's variable in the operator's environment, set or not (never its value)."""
    return {
        name: {
            info.name: {
                "label": info.label,
                "variable": ENV_PREFIX + info.name.upper(),
                "set": bool(os.environ.get(ENV_PREFIX + info.name.upper())),
            }
            for info in slots.info
        }
        for name, slots in declared.items()
    }
