"""The vault's encryption: AES-256-GCM under MCPGATE_VAULT_KEY, each value bound to its principal and slot.

    Cipher(key)                                   key: the 32 bytes of MCPGATE_VAULT_KEY (base64 in the setting)
    cipher.seal(principal, slot, value) -> bytes  VERSION, a random 96-bit nonce, the ciphertext and its tag; the
                                                  principal and slot are the associated data, so a value copied
                                                  into another principal's (or slot's) row does not open
    cipher.open(principal, slot, sealed) -> bytes CannotOpen when the key, the principal or the slot differ
    cipher.check_record() / cipher.check(record) -> bool
        # a record sealed once and kept with the values: a key that cannot open it did not seal them (the start
        # stops with WrongVaultKey instead of failing on every user's first call)

The key never appears in a message; a value never does either.
"""

from __future__ import annotations

import base64
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mcpgate.serve.vault.errors import CannotOpen as CannotOpen  # raised here, declared apart (errors.py)

VERSION = b"v1"
NONCE_BYTES = 12
CHECK_PRINCIPAL = ""  # no principal is empty: the check record's row is no one's
CHECK_SLOT = "\x00key-check"
CHECK_VALUE = b"mcpgate vault key check"


def key_bytes(setting: str) -> bytes:
    """The 32 bytes of MCPGATE_VAULT_KEY (its validator checked the form)."""
    return base64.b64decode(setting.strip(), validate=True)


def associated(principal: str, slot: str) -> bytes:
    """The associated data: both names, unambiguously (no separator a name could contain)."""
    return json.dumps([principal, slot], ensure_ascii=True).encode()


class Cipher:
    """AES-256-GCM under the vault key."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, principal: str, slot: str, value: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, value, associated(principal, slot))

    def open(self, principal: str, slot: str, sealed: bytes) -> bytes:
        if not sealed.startswith(VERSION) or len(sealed) < len(VERSION) + NONCE_BYTES + 16:
            raise CannotOpen("not a sealed vault value")
        body = sealed[len(VERSION) :]
        try:
            return self._aead.decrypt(body[:NONCE_BYTES], body[NONCE_BYTES:], associated(principal, slot))
        except InvalidTag:
            raise CannotOpen("the vault key does not open this value for this principal and slot") from None

    def check_record(self) -> bytes:
        return self.seal(CHECK_PRINCIPAL, CHECK_SLOT, CHECK_VALUE)

    def check(self, record: bytes) -> bool:
        try:
            return self.open(CHECK_PRINCIPAL, CHECK_SLOT, record) == CHECK_VALUE
        except CannotOpen:
            return False

    def __repr__(self) -> str:
        return "Cipher(<key hidden>)"
