"""Self-routing session ids and the signed header of a forwarded request (a fleet of instances, one key).

A cluster session id is `<instance>.<random>.<mac>`: the instance that owns the session, 256 random bits
(43 URL-safe characters) and an HMAC-SHA256 over the first two parts with the cluster key, cut to 128 bits
(22 characters). Any instance reads the owner from the id; nobody without the key can make an id that names
an instance, so a forged id is simply unknown (404 like any).

A request one instance forwards to another carries
`Mcpgate-Forwarded: <principal>.<sender>.<time>.<nonce>.<view>.<mac>`: the principal the first instance
authenticated (base64url), the sending instance, the unix time it was signed, a nonce never used before (random,
or the next of a connection's series: serve/cluster/nonces.py), the view the caller's verified identity selected
there (`<rule index>~<fingerprint of the views>`, empty without views: the owner, which sees no token, applies
that view and no other) and an HMAC over these and the request as sent
(method, path, query string, session id and the SHA-256 of its body). The owner takes the principal and the view
from it instead of authenticating again (the token never travels) within a window of a few seconds,
once: the caller remembers each nonce for the window (serve/cluster/instances.py), so a captured value cannot be
replayed, not even with the same body, and is worth nothing for any other request.

Pure: the key and the clock are passed in.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass

RANDOM_CHARS = 43  # secrets.token_urlsafe(32)
MAC_BYTES = 16  # 22 base64url characters
FORWARDED_WINDOW = 5  # seconds a signed Mcpgate-Forwarded value is accepted for, either side of now
NONCE_BYTES = 16  # a forwarded value's nonce: 22 base64url characters
_FORWARDED_DOMAIN = "mcpgate-forwarded-3"  # a JSON array: never the input of a session id's MAC
_STRING = json.encoder.encode_basestring_ascii  # a str as json.dumps writes it (ensure_ascii)
_URLSAFE = bytes.maketrans(b"+/", b"-_")
_INSTANCE = re.compile(r"[A-Za-z0-9_-]{1,32}")  # valid_instance's characters (fullmatch)
_VIEW = re.compile(r"[A-Za-z0-9_~-]{0,64}")  # valid_view's (fullmatch): MAX_VIEW_CHARS of VIEW_CHARS


def _b64(data: bytes) -> str:
    """base64url without its padding (base64.urlsafe_b64encode's, in one C call and a translate)."""
    return binascii.b2a_base64(data, newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


def _mac(key: bytes, text: str) -> str:
    return _b64(hmac.digest(key, text.encode(), "sha256")[:MAC_BYTES])  # one-shot: no HMAC object per MAC


def valid_instance(name: str) -> bool:
    """An instance id as MCPGATE_INSTANCE_ID allows: 1 to 32 ASCII letters, digits, - or _."""
    return _INSTANCE.fullmatch(name) is not None


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


@dataclass(frozen=True)
class ForwardedRequest:
    """What a Mcpgate-Forwarded value is signed for: the request as the owner receives it."""

    method: str
    path: str  # PATH_INFO
    query: str  # QUERY_STRING, as sent
    session_id: str  # the session the request names ("" for none)
    body: bytes


@dataclass(frozen=True)
class Forwarded:
    """A Mcpgate-Forwarded value that checked: who the caller authenticated, which instance sent it, its nonce
    (the caller refuses a nonce it has seen within the window)."""

    principal: str
    sender: str
    nonce: str
    view: str = ""  # the view the sender's caller got (views_file.ViewTable.key reads it); "": no views there


MAX_VIEW_CHARS = 64  # a view's token: "<rule index>~<fingerprint>"
VIEW_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_~")


def valid_view(view: str) -> bool:
    """A view's token as a forwarded value may carry it: up to MAX_VIEW_CHARS of [A-Za-z0-9-_~] (never a dot)."""
    return _VIEW.fullmatch(view) is not None


def _forwarded_mac(key: bytes, fields: tuple[str, ...], request: ForwardedRequest) -> str:
    digest = _b64(hashlib.sha256(request.body).digest())
    strings = (_FORWARDED_DOMAIN, *fields, request.method, request.path, request.query, request.session_id, digest)
    text = "[" + ",".join(map(_STRING, strings)) + "]"  # json.dumps(list(strings), separators=(",", ":"))
    return _mac(key, text)


def forwarded(
    principal: str, sender: str, now: float, request: ForwardedRequest, key: bytes, view: str = "", nonce: str = ""
) -> str:
    """The Mcpgate-Forwarded value for a request instance `sender` has authenticated as `principal`, whose
    identity selected `view` there: with `nonce` (never used before with this key), else a fresh random one."""
    if not valid_view(view):
        raise ValueError("a view's token holds only [A-Za-z0-9-_~], at most 64 of them")
    if not valid_view(nonce):
        raise ValueError("a nonce holds only [A-Za-z0-9-_~], at most 64 of them")
    fields = (_b64(principal.encode()), sender, str(int(now)), nonce or _b64(secrets.token_bytes(NONCE_BYTES)), view)
    return ".".join((*fields, _forwarded_mac(key, fields, request)))


def forwarded_sender(value: str) -> str | None:
    """The instance a well-formed Mcpgate-Forwarded value names as its sender, not yet checked (the caller may
    look at the connection before reading the body the MAC covers)."""
    parts = value.split(".")
    return parts[1] if len(parts) == 6 and valid_instance(parts[1]) else None


def forwarded_check(
    value: str, now: float, request: ForwardedRequest, key: bytes, window: int = FORWARDED_WINDOW
) -> Forwarded | None:
    """What a valid Mcpgate-Forwarded value for this request says; None when it is malformed, signed for
    another request (another body, query, path, method or session), by another key, or outside the window.
    Whether its nonce was seen before is the caller's to check."""
    parts = value.split(".")
    if len(parts) != 6:
        return None
    principal_b64, sender, stamp, nonce, view, mac = parts
    if not (
        stamp.isascii() and stamp.isdigit() and len(stamp) <= 12 and valid_instance(sender) and 0 < len(nonce) <= 64
    ):
        return None
    if abs(now - int(stamp)) > window or not valid_view(view):
        return None
    expected = _forwarded_mac(key, (principal_b64, sender, stamp, nonce, view), request)
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        return None
    try:
        principal = base64.urlsafe_b64decode(principal_b64 + "=" * (-len(principal_b64) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return Forwarded(principal, sender, nonce, view)
