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
from typing import NamedTuple

from mcpgate.core import session_ids
from mcpgate.core.session_ids import Forwarded

_STRING = session_ids._STRING  # a str as json.dumps writes it (ensure_ascii)
_DOMAIN = _STRING(session_ids._FORWARDED_DOMAIN)
_b64 = session_ids._b64
KEPT = 256  # spelled parts remembered per table (past it, the table starts again)
BLOCK = 64  # SHA-256's block: the HMAC key's pads


def body_digest(body: bytes) -> str:
    """The body's SHA-256 in base64url, as the signed text holds it."""
    return _b64(hashlib.sha256(body).digest())


class CheckedBody(io.BytesIO):
    """A forwarded request's body after its value checked, put back for the handler (wsgi.input), with its digest:
    whoever reads it whole again (resent.py) takes `body` and `digest` from here instead."""

    def __init__(self, body: bytes, digest: str) -> None:
        super().__init__(body)
        self.body, self.digest = body, digest


class Signed(NamedTuple):
    """A value that checked (as forwarded_check's answer) and the digest of the body it was signed for."""

    claim: Forwarded
    digest: str


class Signer:
    """`value(...)`: session_ids.forwarded's value; `check(...)`: forwarded_check's answer, with the body digest."""

    def __init__(self, key: bytes) -> None:
        if len(key) > BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(BLOCK, b"\0")
        self._inner = hashlib.sha256(key.translate(bytes(x ^ 0x36 for x in range(256))))
        self._outer = hashlib.sha256(key.translate(bytes(x ^ 0x5C for x in range(256))))
        self._senders: dict[tuple[str, str], str] = {}  # (principal, sender) -> their signed JSON, domain first
        self._requests: dict[tuple[str, str, str, str], str] = {}  # (method, path, query, session) -> theirs

    def mac(self, text: str) -> str:
        """hmac.digest(key, text, "sha256") cut as session ids and values cut it, in base64url."""
        inner = self._inner.copy()
        inner.update(text.encode())
        outer = self._outer.copy()
        outer.update(inner.digest())
        return _b64(outer.digest()[: session_ids.MAC_BYTES])

    def _sender_part(self, principal_b64: str, sender: str) -> str:
        key = (principal_b64, sender)
        known = self._senders.get(key)
        if known is None:
            known = f"[{_DOMAIN},{_STRING(principal_b64)},{_STRING(sender)},"
            if len(self._senders) >= KEPT:
                self._senders.clear()
            self._senders[key] = known
        return known

    def _request_part(self, method: str, path: str, query: str, session: str) -> str:
        key = (method, path, query, session)
        known = self._requests.get(key)
        if known is None:
            known = ",".join(map(_STRING, key))
            if len(self._requests) >= KEPT:
                self._requests.clear()
            self._requests[key] = known
        return known

    def _signed(self, fields: tuple[str, str, str, str, str], request: tuple[str, str, str, str], digest: str) -> str:
        """The MAC over session_ids._forwarded_mac's JSON text (the digest, base64url, is its own JSON string)."""
        principal_b64, sender, stamp, nonce, view = fields
        middle = ",".join(map(_STRING, (stamp, nonce, view)))
        text = f'{self._sender_part(principal_b64, sender)}{middle},{self._request_part(*request)},"{digest}"]'
        return self.mac(text)

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
        if not session_ids.valid_view(view):
            raise ValueError("a view's token holds only [A-Za-z0-9-_~], at most 64 of them")
        if not nonce or not session_ids.valid_view(nonce):
            raise ValueError("a nonce holds only [A-Za-z0-9-_~], at most 64 of them (and at least one)")
        fields = (_b64(principal.encode()), sender, str(int(now)), nonce, view)
        return ".".join((*fields, self._signed(fields, request, digest)))

    def check(
        self,
        value: str,
        now: float,
        request: tuple[str, str, str, str],
        body: bytes,
        window: int = session_ids.FORWARDED_WINDOW,
    ) -> Signed | None:
        """session_ids.forwarded_check(value, now, ForwardedRequest(*request, body), key, window), with the body's
        digest when it checks."""
        parts = value.split(".")
        if len(parts) != 6:
            return None
        principal_b64, sender, stamp, nonce, view, mac = parts
        if not (stamp.isdigit() and len(stamp) <= 12 and session_ids.valid_instance(sender) and 0 < len(nonce) <= 64):
            return None
        if abs(now - int(stamp)) > window or not session_ids.valid_view(view):
            return None
        digest = body_digest(body)
        expected = self._signed((principal_b64, sender, stamp, nonce, view), request, digest)
        if not hmac.compare_digest(mac.encode(), expected.encode()):
            return None
        try:
            principal = base64.urlsafe_b64decode(principal_b64 + "=" * (-len(principal_b64) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return Signed(Forwarded(principal, sender, nonce, view), digest)
