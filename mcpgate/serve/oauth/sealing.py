"""Secrets at rest, sealed with MCPGATE_STATE_KEY: what the embedded authorization server keeps of its own
secrets (the signing key, the sign-in cookie key) is encrypted where it is kept (SQLite under
MCPGATE_STATE_DIR, or Redis), so a child running as the gateway's user reads the state and learns nothing. The
key lives only in the setting, which the worker takes out of its environment once read (mcpgate.child.boundary), and in
the memory of a process no same-user process may read (PR_SET_DUMPABLE 0).

    Sealer(key_text)                  AES-256-GCM, the key derived from the setting with HKDF-SHA256
    sealer.seal(name, value) -> bytes     MAGIC, a random 96-bit nonce, the ciphertext and tag; `name` is the
                                          associated data, so a sealed value cannot stand in for another's
    sealer.open(name, sealed) -> bytes    WrongStateKey when the key does not open it
    kept(stored_once, replace, sealer, name, make) -> bytes
        # a storage's stored_once with sealing: the value made once, sealed; opened when read. A value kept in
        # the clear (stored before the key was set) is replaced by a new sealed one: the old one may have been
        # read already, and SQLite may keep its old pages, so it is retired rather than sealed. A sealed value
        # without a key: StateSealed.

Both errors are SettingsError: the worker's app does not load and gunicorn stops with one line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mcpgate.config.declarations import SettingsError

log = logging.getLogger("mcpgate.oauth.sealing")

MAGIC = b"\x00mcpgate-sealed-1\x00"
NONCE_BYTES = 12
KDF_INFO = b"mcpgate state at rest 1"
REPLACE_TRIES = 3  # a value replaced by another worker meanwhile is read back; this bounds the loop

StoredOnce = Callable[[str, Callable[[], bytes]], bytes]
Replace = Callable[[str, bytes, bytes], None]  # (name, the value seen, the new one): only if still the one seen


class WrongStateKey(SettingsError):
    """MCPGATE_STATE_KEY does not open what is kept."""


class StateSealed(SettingsError):
    """What is kept was sealed with a key, and none is set."""


class Sealer:
    """AES-256-GCM with a key derived from MCPGATE_STATE_KEY."""

    def __init__(self, key_text: str) -> None:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=KDF_INFO)
        self._aead = AESGCM(hkdf.derive(key_text.encode()))

    def seal(self, name: str, value: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return MAGIC + nonce + self._aead.encrypt(nonce, value, name.encode())

    def open(self, name: str, sealed: bytes) -> bytes:
        body = sealed[len(MAGIC) :]
        try:
            return self._aead.decrypt(body[:NONCE_BYTES], body[NONCE_BYTES:], name.encode())
        except InvalidTag:
            raise WrongStateKey(
                "MCPGATE_STATE_KEY does not open the authorization server's state (it was sealed with another "
                "key): set the key it was sealed with"
            ) from None


def is_sealed(value: bytes) -> bool:
    return value.startswith(MAGIC)


def sealer_of(key_text: str) -> Sealer | None:
    """The sealer of MCPGATE_STATE_KEY's value; None when it is empty."""
    return Sealer(key_text) if key_text else None


def kept(
    stored_once: StoredOnce, replace: Replace, sealer: Sealer | None, name: str, make: Callable[[], bytes]
) -> bytes:
    """The value kept under `name` (see the module docstring)."""

    def fresh() -> bytes:
        return make() if sealer is None else sealer.seal(name, make())

    for _ in range(REPLACE_TRIES):
        value = stored_once(name, fresh)
        if is_sealed(value):
            if sealer is None:
                raise StateSealed(
                    "the authorization server's state is sealed (MCPGATE_STATE_KEY was set when it was made): "
                    "set MCPGATE_STATE_KEY"
                )
            return sealer.open(name, value)
        if sealer is None:
            return value
        log.warning("%s was kept unencrypted: replaced by a new one, sealed with MCPGATE_STATE_KEY", name)
        replace(name, value, fresh())
    raise SettingsError(f"{name} is being rewritten unencrypted while this worker seals it: stop the other writer")
