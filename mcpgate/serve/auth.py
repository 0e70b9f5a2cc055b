"""Origin and Host checks against DNS rebinding, and the bearer token check (pure functions)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback_name(hostname: str) -> bool:
    name = hostname.strip("[]").lower()
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_host(host: str) -> str:
    """The name part of a Host header value ("[::1]:8000" -> "::1", "a.b:80" -> "a.b")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def host_allowed(host: str | None, allowed: Collection[str]) -> bool:
    """Loopback names on any port, plus configured names (with or without a port); * allows all."""
    if "*" in allowed:
        return True
    if not host:
        return False
    if is_loopback_name(split_host(host)):
        return True
    wanted = {entry.lower() for entry in allowed}
    return host.strip().lower() in wanted or split_host(host) in wanted


def origin_allowed(origin: str | None, allowed: Collection[str]) -> bool:
    """No Origin (not a browser) passes; else a loopback origin or a configured one; * allows all."""
    if origin is None:
        return True
    if "*" in allowed:
        return True
    normalized = origin.strip().rstrip("/").lower()
    if normalized in {entry.strip().rstrip("/").lower() for entry in allowed}:
        return True
    try:
        parts = urlsplit(normalized)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname) and is_loopback_name(parts.hostname or "")


def bearer_ok(authorization: str | None, token: str) -> bool:
    """No token configured: everyone. Else `Authorization: Bearer <token>`, compared in constant time."""
    if not token:
        return True
    if not authorization:
        return False
    scheme, _, presented = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())
