"""The gateway's pure safety decisions: Host and Origin against DNS rebinding, which peers may use a loopback
Host name, the bearer token, and whether a bind may go beyond loopback without authentication."""

from __future__ import annotations

import enum
import hmac
import ipaddress
import re
from collections.abc import Collection
from typing import Any
from urllib.parse import urlsplit

from mcpgate.serve.front.context import CONTEXT, RequestContext, context

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})
# RFC 9110 7.2 / RFC 3986 3.2.2: a host name (letters, digits, "-", ".", "_", "~") or a bracketed IPv6 literal,
# then an optional port. Narrower than RFC 3986's reg-name on purpose: no sub-delims (",", ";", "=", ...) and no
# percent-encoding, so a list or a second host can never pass as one Host.
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9._~-]+)|\[(?P<literal>[0-9A-Fa-f:.]+)\])(?::(?P<port>[0-9]{0,5}))?")


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


def valid_host(host: str) -> bool:
    """Whether a Host value (or an absolute-form target's authority) is one host[:port]; empty is valid
    (RFC 9112 3.2: a target without an authority is sent with an empty Host)."""
    if host == "":
        return True
    match = _HOST.fullmatch(host)
    if match is None or (match["port"] and int(match["port"]) > 65535):
        return False
    if match["literal"] is not None:
        try:
            ipaddress.IPv6Address(match["literal"])
        except ValueError:
            return False
    return True


class HostKind(enum.Enum):
    """What a Host header names, for the rebinding defence."""

    LISTED = "listed"  # configured (or * configured): accepted from any peer
    LOOPBACK = "loopback"  # a loopback name: accepted only from a trusted peer
    REFUSED = "refused"
    INVALID = "invalid"  # not one host[:port] (a list, a second host, stray characters): 400, whatever is allowed


def host_kind(host: str | None, allowed: Collection[str]) -> HostKind:
    """Invalid syntax is INVALID; configured names (with or without a port; * for all) are LISTED; loopback
    names on any port LOOPBACK."""
    if host is not None and not valid_host(host):
        return HostKind.INVALID
    if "*" in allowed:
        return HostKind.LISTED
    if not host:
        return HostKind.REFUSED
    wanted = {entry.lower() for entry in allowed}
    if host.strip().lower() in wanted or split_host(host) in wanted:
        return HostKind.LISTED
    return HostKind.LOOPBACK if is_loopback_name(split_host(host)) else HostKind.REFUSED


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def networks(entries: Collection[str]) -> Networks:
    """Parsed peer networks (the settings validated them)."""
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def peer_trusted(peer: str | None, trusted: Networks) -> bool:
    """Whether the connection's peer address lies in one of the trusted networks (IPv4-mapped IPv6 unwrapped)."""
    if not peer:
        return False
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in trusted)


def passed_on(environ: dict[str, Any]) -> bool:
    """Whether a proxy says it passed this request on from a client (X-Forwarded-For or Forwarded). Behind a
    public front (MCPGATE_PUBLIC_FRONT) such a request is not local whatever its peer: a client cannot remove
    what the proxy adds, and one that adds it itself only loses the loopback Host name."""
    return "HTTP_X_FORWARDED_FOR" in environ or "HTTP_FORWARDED" in environ


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


def bind_is_local(address: str) -> bool:
    """Whether a gunicorn bind address ("host:port", "[::1]:port", "unix:/path") is reachable only locally."""
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0] if ":" in address else address
    host = host.strip("[]")
    return bool(host) and is_loopback_name(host)


PUBLIC_FRONT = "through a public front (MCPGATE_PUBLIC_FRONT=true: a balancer passes requests on from the network)"


def exposure_problem(
    addresses: Collection[str], authenticated: bool, allow_unauthenticated: bool, public_front: bool = False
) -> str | None:
    """Why the gateway must not start on these addresses, or None: beyond loopback needs authentication, and so
    does serving behind a public front (a balancer on loopback exposes what it reaches)."""
    exposed = [address for address in addresses if not bind_is_local(address)]
    if public_front:
        exposed.append(PUBLIC_FRONT)
    if not exposed or authenticated or allow_unauthenticated:
        return None
    return (
        f"refusing to serve {', '.join(exposed)} without authentication: anyone who reaches this address "
        "could run the MCP server. Sign clients in with OAuth (MCPGATE_PUBLIC_URL plus MCPGATE_OAUTH_USERS, "
        "MCPGATE_OAUTH_UPSTREAM or MCPGATE_OAUTH_ISSUER), or set MCPGATE_AUTH_TOKEN (clients then send "
        "Authorization: Bearer <token>), or set MCPGATE_ALLOW_UNAUTHENTICATED=true to serve it open on purpose"
    )


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>`; None without a bearer credential (an empty one too, so
    the client is sent to sign in); "" when malformed."""
    if not authorization:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    token = rest.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return "" if " " in token else token


def bearer_ok(authorization: str | None, token: str) -> bool:
    """No token configured: everyone. Else `Authorization: Bearer <token>`, compared in constant time."""
    if not token:
        return True
    presented = bearer_token(authorization)
    return presented is not None and hmac.compare_digest(presented.encode(), token.encode())


STATIC_PRINCIPAL = "static"  # every caller of a no-auth or static-token gateway is this one principal


def principal(environ: dict[str, Any]) -> str:
    """Whose pool serves a request: named in its context by the guard once the caller is authenticated (an OAuth
    subject is its own principal); the static-token or no-auth case is one principal."""
    noted = environ.get(CONTEXT)  # context(environ)'s, its call only to make one
    value = (noted if type(noted) is RequestContext else context(environ)).principal
    return value if value is not None else STATIC_PRINCIPAL
