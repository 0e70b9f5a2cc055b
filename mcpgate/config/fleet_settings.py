"""The settings of a fleet, several instances of the gateway sharing one Redis (mcpgate.serve.cluster): this
instance's name and internal URL, the Redis, the key that authenticates forwarded requests, who may forward,
the directory where instances on one machine hand connections to each other, and the cap on one principal's
sessions across the fleet.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import declare, non_negative


def absolute_or_empty(value: str) -> str | None:
    """A directory named from wherever the instance starts: an absolute path (or empty)."""
    return None if value == "" or value.startswith("/") else "must be an absolute path (or empty: off)"


@dataclass(frozen=True, init=False, repr=False, eq=False)
class FleetSettings:
    """The instances of a fleet: Redis, the cluster key, forwarding, caps."""

    instance_id: str = declare(
        "",
        "This instance's name in the session ids it mints and in the shared directory (letters, digits, - and "
        "_; unique across the fleet). Empty: a random one, chosen in the worker after the fork.",
        validate=validators.instance_id,
    )
    redis_url: str = declare(
        "",
        "Redis shared by several instances (redis://, rediss://): the OAuth server's state, the instance "
        "directory, per-principal session caps, forwarding to a session's owner. Empty: one instance, "
        "state on local disk.",
        env="REDIS_URL",
        secret=True,
    )
    cluster_secret: str = declare(
        "",
        "The key that authenticates session ids and requests forwarded between instances (HMAC). Empty: one "
        "made once and kept in Redis (or a random one per process without Redis). Never logged.",
        secret=True,
    )
    internal_url: str = declare(
        "",
        "How the other instances reach this one for forwarded requests (for example http://10.0.0.5:8001). "
        "Empty: the bind address when it names one host (with 0.0.0.0: this host's name).",
        validate=validators.optional_url,
    )
    cluster_peers: tuple[str, ...] = declare(
        (),
        "Comma-separated addresses or networks the other instances connect from: only they may send a forwarded "
        "request (Mcpgate-Forwarded). Empty: the forwarding instance's own address in the directory (the host of "
        "its MCPGATE_INTERNAL_URL; for an instance on this machine, any address of this machine).",
        validate=validators.networks,
    )
    handoff_dir: str = declare(
        "",
        "A directory (this user's, writable by no one else; made if missing) where each instance of a fleet on one "
        "machine listens on <instance id>.sock: a connection whose first request names the session of an instance "
        "listening there is handed to it (its file descriptor), not forwarded over HTTP. Empty: off.",
        validate=absolute_or_empty,
    )
    principal_sessions: int = declare(
        0,
        "Most 2025 sessions one principal may hold across every instance (counted in Redis; on one instance, "
        "in memory); past it, 503. 0: no cap beyond MCPGATE_MAX_SESSIONS.",
        validate=non_negative,
    )
