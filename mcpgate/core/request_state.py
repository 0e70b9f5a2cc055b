"""The gateway's own MRTR `requestState`: sealed, opened, never trusted. It is the bridge's for a legacy child, and
the envelope around a modern child's own state (carry/carried), so that state too is bound to its principal.

A 2026-07-28 client echoes `requestState` back verbatim on its retry, and the spec asks a server to treat
it as attacker-controlled: integrity-protected, bound to the authenticated principal, short-lived, and
rejected when it fails verification. A token here is

    "mg1." + base64url(payload + HMAC-SHA256(mac_key, "mg1." + payload))         (no padding)

    payload = round (uint32) | expiry (uint64, ms) | principal tag (16 bytes) | binding tag (16 bytes)
              | instance length (uint8) | instance (ASCII) | continuation (UTF-8)

The instance names the gateway instance holding the continuation (empty: one instance, or the relay). Any
instance with the key opens the token and reads it, so a retry landing elsewhere in a fleet finds its owner;
it sits inside the MAC'd payload like the rest, so it cannot be changed to point a retry somewhere else.

The principal tag and the binding tag are keyed hashes (HMAC with keys derived from the sealer's key), so
the token names neither the principal nor the binding in a form anyone without the key can read or test
guesses against; because the tags sit inside the MAC'd payload, another principal's state is told apart
("foreign") from state that was altered ("tampered"). Parsing is a fixed binary layout after a length
bound and a strict alphabet check (no pickle, no eval, no JSON), and the base64 must be canonical, so no
two token strings open to the same state.

A modern child's own requestState travels as the continuation of an envelope: `carry(holder, state)` names the
child holding it and keeps the state byte for byte, `carried` takes them apart again; such a sealer is made with
its own key and a larger `max_chars` (the child's state is as long as the child makes it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

VERSION: Final = "mg1."
# Longest token open() will look at (a sealer's default max_chars); seal() refuses a continuation that would not fit.
MAX_TOKEN_CHARS: Final = 8192
MAX_ROUND: Final = 2**32 - 1
MAX_INSTANCE_CHARS: Final = 64

_HEAD = struct.Struct(">IQ16s16s")  # round, expiry in ms, principal tag, binding tag
_MAC_SIZE = 32  # SHA-256's digest size (not asked of a hashlib.sha256() at import: OpenSSL's code, _derived says)
_TAG_SIZE = 16
_BODY = re.compile(r"[A-Za-z0-9_-]+")
_INSTANCE = re.compile(r"[A-Za-z0-9_-]*")

Reason = Literal["malformed", "tampered", "expired", "foreign"]


@dataclass(frozen=True, slots=True)
class StateError:
    """Why a presented `requestState` was refused (the retry must fail; `message` is safe to show)."""

    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Opened:
    """What a verified `requestState` carries."""

    continuation: str
    round: int
    instance: str = ""  # the instance that sealed it ("" when none was named)


class StateSealer:
    """Seals and opens `requestState` tokens with one key (per process unless one is given).

    `ttl` seconds after sealing a token expires; `clock` gives the current time in seconds. A `binding`
    (e.g. the method and a digest of the request's salient params) may be passed to both seal and open:
    state presented on a request with another binding is refused as foreign.
    """

    __slots__ = ("_clock", "_key", "_keys", "max_chars", "ttl")

    def __init__(
        self,
        key: bytes | None = None,
        ttl: float = 120.0,
        clock: Callable[[], float] = time.time,
        *,
        max_chars: int = MAX_TOKEN_CHARS,
    ) -> None:
        if key is None:
            key = secrets.token_bytes(32)
        if len(key) < 16:
            raise ValueError("the requestState key must have at least 16 bytes")
        if not ttl > 0:
            raise ValueError("ttl must be positive")
        self.ttl, self.max_chars = ttl, max_chars
        self._clock = clock
        self._key = key
        self._keys: tuple[bytes, bytes, bytes] | None = None  # derived at the first seal or open (_derived)

    def seal(self, principal: str, continuation: str, round: int, *, binding: str = "", instance: str = "") -> str:
        """A url-safe ASCII token for this principal's `continuation` at `round`, valid for `ttl` seconds;
        `instance`: the one holding the continuation (letters, digits, - and _)."""
        if not 0 <= round <= MAX_ROUND:
            raise ValueError(f"round must be within 0..{MAX_ROUND}")
        if len(instance) > MAX_INSTANCE_CHARS or not _INSTANCE.fullmatch(instance):
            raise ValueError(f"an instance is at most {MAX_INSTANCE_CHARS} letters, digits, - or _")
        expiry = int((self._clock() + self.ttl) * 1000)
        head = _HEAD.pack(round, expiry, self._principal_tag(principal), self._binding_tag(binding))
        payload = head + bytes([len(instance)]) + instance.encode("ascii") + continuation.encode("utf-8")
        token = VERSION + _b64(payload + self._mac(payload))
        if len(token) > self.max_chars:
            raise ValueError(f"the continuation is too long for a requestState of {self.max_chars} characters")
        return token

    def open(self, token: object, principal: str, *, binding: str = "") -> Opened | StateError:
        """The sealed state, or why it is refused (checked in this order: shape, integrity, principal and
        binding, expiry)."""
        payload = _payload(token, self.max_chars)
        if isinstance(payload, StateError):
            return payload
        body, mac = payload[:-_MAC_SIZE], payload[-_MAC_SIZE:]
        if not hmac.compare_digest(mac, self._mac(body)):
            return StateError("tampered", "requestState failed verification")
        round_, expiry, principal_tag, binding_tag = _HEAD.unpack_from(body)
        if not hmac.compare_digest(principal_tag, self._principal_tag(principal)):
            return StateError("foreign", "requestState was issued to another principal")
        if not hmac.compare_digest(binding_tag, self._binding_tag(binding)):
            return StateError("foreign", "requestState was issued for another request")
        if self._clock() * 1000 >= expiry:
            return StateError("expired", "requestState has expired; send the original request again")
        named = body[_HEAD.size]
        instance = body[_HEAD.size + 1 : _HEAD.size + 1 + named].decode("ascii", "replace")
        if len(instance) != named or not _INSTANCE.fullmatch(instance):
            return StateError("malformed", "requestState is not valid")  # only a token of another implementation
        try:
            continuation = body[_HEAD.size + 1 + named :].decode("utf-8")
        except UnicodeDecodeError:  # only a token sealed by another implementation with this key
            return StateError("malformed", "requestState is not valid")
        return Opened(continuation, round_, instance)

    def _derived(self) -> tuple[bytes, bytes, bytes]:
        """The MAC, principal and binding keys, derived from the sealer's key when first needed: HMAC-SHA256 runs
        OpenSSL's code, which a worker that never seals a requestState would otherwise map at its start (~1 MB of
        libcrypto's pages in its RSS; bench/imports.py)."""
        keys = self._keys
        if keys is None:
            key = self._key
            keys = self._keys = (_derive(key, b"mac"), _derive(key, b"principal"), _derive(key, b"binding"))
        return keys

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._derived()[0], VERSION.encode("ascii") + payload, hashlib.sha256).digest()

    def _principal_tag(self, principal: str) -> bytes:
        return _tag(self._derived()[1], principal)

    def _binding_tag(self, binding: str) -> bytes:
        return _tag(self._derived()[2], binding)


def _derive(key: bytes, purpose: bytes) -> bytes:
    return hmac.new(key, b"mcpgate requestState " + purpose, hashlib.sha256).digest()


def _tag(key: bytes, value: str) -> bytes:
    return hmac.new(key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()[:_TAG_SIZE]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def carry(holder: str, state: str) -> str:
    """The continuation of an envelope around another party's `state`: the `holder` (no NUL in it), then the state."""
    if "\x00" in holder:
        raise ValueError("a holder has no NUL character")
    return holder + "\x00" + state


def carried(continuation: str) -> tuple[str, str] | None:
    """(holder, state) from a continuation `carry` made; None for any other continuation."""
    holder, sep, state = continuation.partition("\x00")
    return (holder, state) if sep else None


def _payload(token: object, max_chars: int) -> bytes | StateError:
    """The decoded bytes of a well-shaped token (payload + MAC), or malformed."""
    bad = StateError("malformed", "requestState is not valid")
    if not isinstance(token, str) or len(token) > max_chars or not token.startswith(VERSION):
        return bad
    body = token[len(VERSION) :]
    if not _BODY.fullmatch(body) or len(body) % 4 == 1:
        return bad
    data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    if len(data) < _HEAD.size + 1 + _MAC_SIZE or _b64(data) != body:  # short, or a non-canonical encoding
        return bad
    return data
