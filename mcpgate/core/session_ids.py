"""Self-routing session ids and the signed header of a forwarded request (a fleet of instances, one key).

A cluster session id is `<instance>.<random>.<mac>`: the instance that owns the session, 256 random bits
(43 URL-safe characters) and an HMAC-SHA256 over the first two parts with the cluster key, cut to 128 bits
(22 characters). Any instance reads the owner from the id; nobody without the key can make an id that names
an instance, so a forged id is simply unknown (404 like any).

A request one instance forwards to another carries `Mcpgate-Forwarded: <principal>.<time>.<mac>`: the
principal the first instance authenticated (base64url), the unix time it was signed and an HMAC over both and
the request's method, path and session id. The owner takes the principal from it instead of authenticating
again (the token never travels), within a short window.

Pure: the key and the clock are passed in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

RANDOM_CHARS = 43  # secrets.token_urlsafe(32)
MAC_BYTES = 16  # 22 base64url characters
FORWARDED_WINDOW = 30  # seconds a signed Mcpgate-Forwarded value is accepted for, either side of now
_FORWARDED_DOMAIN = "mcpgate-forwarded"  # a session id's MAC input never holds a newline: the two never meet


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _mac(key: bytes, text: str) -> str:
    return _b64(hmac.new(key, text.encode(), hashlib.sha256).digest()[:MAC_BYTES])


def valid_instance(name: str) -> bool:
    """An instance id as MCPGATE_INSTANCE_ID allows: 1 to 32 ASCII letters, digits, - or _."""
    return 0 < len(name) <= 32 and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in name)


def mint(instance: str, key: bytes) -> str:
    """A fresh session id naming its owner (visible ASCII, at most 99 characters)."""
    random = secrets.token_urlsafe(32)
    return f"{instance}.{random}.{_mac(key, instance + '.' + random)}"


def short(session_id: str) -> str:
    """What logs name a session by, never the whole id: 8 random characters, after the instance when the id
    names one (`<instance>.<8>`)."""
    instance, sep, rest = session_id.partition(".")
    return f"{instance}.{rest[:8]}" if sep and valid_instance(instance) else session_id[:8]


def owner(value: str, key: bytes) -> str | None:
    """The instance a session id names when its MAC checks; None for any other value (a plain or forged id)."""
    instance, sep, rest = value.partition(".")
    random, sep2, mac = rest.partition(".")
    if not (sep and sep2) or len(random) != RANDOM_CHARS or not valid_instance(instance):
        return None
    if not hmac.compare_digest(mac.encode(), _mac(key, instance + "." + random).encode()):
        return None
    return instance


def _forwarded_mac(key: bytes, principal_b64: str, stamp: str, method: str, path: str, session_id: str) -> str:
    return _mac(key, "\n".join((_FORWARDED_DOMAIN, principal_b64, stamp, method, path, session_id)))


def forwarded(principal: str, now: float, method: str, path: str, session_id: str, key: bytes) -> str:
    """The Mcpgate-Forwarded value for a request the caller has authenticated as `principal`."""
    principal_b64 = _b64(principal.encode())
    stamp = str(int(now))
    return f"{principal_b64}.{stamp}.{_forwarded_mac(key, principal_b64, stamp, method, path, session_id)}"


def forwarded_principal(
    value: str, now: float, method: str, path: str, session_id: str, key: bytes, window: int = FORWARDED_WINDOW
) -> str | None:
    """The principal of a valid Mcpgate-Forwarded value for this request; None when it is malformed, signed
    for another request, by another key, or outside the window."""
    parts = value.split(".")
    if len(parts) != 3 or not parts[1].isdigit() or len(parts[1]) > 12:
        return None
    principal_b64, stamp, mac = parts
    if abs(now - int(stamp)) > window:
        return None
    if not hmac.compare_digest(
        mac.encode(), _forwarded_mac(key, principal_b64, stamp, method, path, session_id).encode()
    ):
        return None
    try:
        return base64.urlsafe_b64decode(principal_b64 + "=" * (-len(principal_b64) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
