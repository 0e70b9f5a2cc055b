"""The Mcpgate-Forwarded value of a forwarded request, made and checked with less work per call: the same value
core/session_ids.py's `forwarded` makes and the same answer its `forwarded_check` gives (tests/serve/
test_cluster_signing.py compares them over a table), for the two instances' hot paths.

What is saved, per call: the HMAC's key schedule (the key's inner and outer pads are hashed once, each MAC
copies those two states: hmac.digest set the key up again every call); the parts of the signed JSON text that do
not change call after call (the principal's base64url and its sender, the request's method, path, query and
session, each spelled once and remembered, bounded); and the body's SHA-256 is made once and given back, so that
the owner's check of a POST sent again (serve/cluster/resent.py) keys on it instead of hashing the body again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
from typing import Any, NamedTuple

from mcpgate.core import session_ids

_STRING = session_ids._STRING  # a str as json.dumps writes it (ensure_ascii)
_DOMAIN = _STRING(session_ids._FORWARDED_DOMAIN)
_b64 = session_ids._b64
_URLSAFE = session_ids._URLSAFE  # _b64's translation, used in place below (a Python call less per digest)
_to_base64 = binascii.b2a_base64
_sha256 = hashlib.sha256
_MAC_BYTES = session_ids.MAC_BYTES
_VIEW_MATCH = session_ids._VIEW.fullmatch  # valid_view's
_new_tuple = tuple.__new__
KEPT = 256  # spelled parts remembered per table (past it, the table starts again)
BLOCK = 64  # SHA-256's block: the HMAC key's pads


def body_digest(body: bytes) -> str:
    """The body's SHA-256 in base64url, as the signed text holds it (_b64's, in place)."""
    return _to_base64(_sha256(body).digest(), newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


class CheckedBody(io.BytesIO):
    """A forwarded request's body after its value checked, put back for the handler (wsgi.input), with its digest:
    whoever reads it whole again (resent.py) takes `body` and `digest` from here instead."""

    def __init__(self, body: bytes, digest: str) -> None:
        super().__init__(body)
        self.body, self.digest = body, digest


class Signed(NamedTuple):
    """A value that checked (forwarded_check's Forwarded, as fields) and the digest of the body it was signed for."""

    principal: str
    sender: str
    nonce: str
    view: str
    digest: str


def _keep(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Remember `value` under `key`, the table bounded by KEPT (full, it starts again)."""
    if len(table) >= KEPT:
        table.clear()
    table[key] = value


# (sender valid, view valid, the text's part up to the sender, the view's JSON)
Identity = tuple[bool, bool, str, str]


class Signer:
    """`value(...)`: session_ids.forwarded's value; `check(...)`: forwarded_check's answer, with the body digest."""

    def __init__(self, key: bytes) -> None:
        if len(key) > BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(bytes(x ^ 0x36 for x in range(256))))
        self._outer = hashlib.sha256(key.translate(bytes(x ^ 0x5C for x in range(256))))
        self._signing: dict[tuple[str, str, str], tuple[str, str, str]] = {}  # (principal, sender, view) -> parts
        self._checking: dict[tuple[str, str, str], Identity] = {}  # (principal's base64url, sender, view) -> its
        self._principals: dict[str, str] = {}  # a principal's base64url -> the principal
        self._requests: dict[tuple[str, str, str, str], str] = {}  # (method, path, query, session) -> their JSON

    def mac(self, text: str) -> str:
        """hmac.digest(key, text, "sha256") cut as session ids and values cut it, in base64url."""
        inner = self._inner.copy()
        inner.update(text.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return _to_base64(outer.digest()[:_MAC_BYTES], newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")

    def _request_part(self, request: tuple[str, str, str, str]) -> str:
        known = self._requests.get(request)
        if known is None:
            known = ",".join(map(_STRING, request))
            _keep(self._requests, request, known)
        return known

    def _signing_parts(self, principal: str, sender: str, view: str) -> tuple[str, str, str]:
        """(the principal's base64url, the text up to the sender, the view's JSON); ValueError for a bad view."""
        key = (principal, sender, view)
        known = self._signing.get(key)
        if known is None:
            if not session_ids.valid_view(view):
                raise ValueError("a view's token holds only [A-Za-z0-9-_~], at most 64 of them")
            principal_b64 = _b64(principal.encode())
            known = (principal_b64, f"[{_DOMAIN},{_STRING(principal_b64)},{_STRING(sender)},", _STRING(view))
            _keep(self._signing, key, known)
        return known

    def value(
        self,
        principal: str,
        sender: str,
        now: float,
        request: tuple[str, str, str, str],
        digest: str,
        view: str,
        nonce: str,
    ) -> str:
        """session_ids.forwarded(principal, sender, now, ForwardedRequest(*request, body), key, view, nonce), the
        body given by its `digest` (body_digest) and `nonce` never empty."""
        known = self._signing.get((principal, sender, view))
        principal_b64, head, view_json = known if known is not None else self._signing_parts(principal, sender, view)
        if not nonce or _VIEW_MATCH(nonce) is None:  # session_ids.valid_view(nonce), its call spared
            raise ValueError("a nonce holds only [A-Za-z0-9-_~], at most 64 of them (and at least one)")
        stamp = str(int(now))  # digits, and the nonce [A-Za-z0-9_~-]: each its own JSON string between quotes
        part = self._requests.get(request)
        if part is None:
            part = self._request_part(request)
        mac = self.mac(f'{head}"{stamp}","{nonce}",{view_json},{part},"{digest}"]')
        return f"{principal_b64}.{sender}.{stamp}.{nonce}.{view}.{mac}"

    def _identity(self, principal_b64: str, sender: str, view: str) -> Identity:
        """What a value's principal, sender and view give its check (remembered, bounded)."""
        key = (principal_b64, sender, view)
        known = self._checking.get(key)
        if known is None:
            head = f"[{_DOMAIN},{_STRING(principal_b64)},{_STRING(sender)},"
            known = (session_ids.valid_instance(sender), session_ids.valid_view(view), head, _STRING(view))
            _keep(self._checking, key, known)
        return known

    def _principal(self, principal_b64: str) -> str | None:
        """The principal a value that checked names (None: not base64url of UTF-8; decoded as forwarded_check
        decodes it, errors included), remembered when it is one (bounded)."""
        known = self._principals.get(principal_b64)
        if known is None:
            try:
                known = base64.urlsafe_b64decode(principal_b64 + "=" * (-len(principal_b64) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
            _keep(self._principals, principal_b64, known)
        return known

    def check(
        self,
        value: str,
        now: float,
        request: tuple[str, str, str, str],
        body: bytes,
        window: int = session_ids.FORWARDED_WINDOW,
    ) -> Signed | None:
        """session_ids.forwarded_check(value, now, ForwardedRequest(*request, body), key, window), as fields and
        with the body's digest when it checks; its checks in the same order (the same answer, or error)."""
        parts = value.split(".")
        if len(parts) != 6:
            return None
        principal_b64, sender, stamp, nonce, view, mac = parts
        known = self._checking.get((principal_b64, sender, view))  # _identity's, its call only to spell one
        sender_valid, view_valid, head, view_json = (
            known if known is not None else self._identity(principal_b64, sender, view)
        )
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12 and sender_valid and 0 < len(nonce) <= 64):
            return None
        if abs(now - int(stamp)) > window or not view_valid:
            return None
        digest = body_digest(body)
        part = self._requests.get(request)
        if part is None:
            part = self._request_part(request)
        text = f'{head}{_STRING(stamp)},{_STRING(nonce)},{view_json},{part},"{digest}"]'
        if not hmac.compare_digest(mac.encode(), self.mac(text).encode()):
            return None
        principal = self._principals.get(principal_b64)  # _principal's, its call only to decode one
        if principal is None:
            principal = self._principal(principal_b64)
            if principal is None:
                return None
        return _new_tuple(Signed, (principal, sender, nonce, view, digest))  # Signed(...) without its Python __new__
