"""The embedded authorization server's signing key: an RSA key (RS256: the cheapest signature to verify, and
every MCP request verifies one) made once, kept in storage, so a restart or another worker signs and verifies
with the same key and everyone stays signed in. With MCPGATE_STATE_KEY the storage keeps it sealed (sealing.py).

    EmbeddedKeys(storage).keys(refresh: bool) -> joserfc KeySet   # the public keys (jwt_verifier.KeySource)
    EmbeddedKeys(storage).signing() -> joserfc KeySet              # the private key(s), for signing
    EmbeddedKeys(storage).jwks() -> dict                           # the public JWKS document
"""

from __future__ import annotations

import json
from typing import Any

from joserfc.jwk import KeySet, RSAKey

from mcpgate.serve.oauth.storage import Storage

ALGORITHM = "RS256"
KEY_BITS = 2048
KEY_NAME = "signing-key:1"


def new_key() -> bytes:
    key = RSAKey.generate_key(KEY_BITS, parameters={"use": "sig", "alg": ALGORITHM}, private=True, auto_kid=True)
    return json.dumps(key.as_dict(private=True)).encode()


class EmbeddedKeys:
    """The stored key, loaded once per process."""

    def __init__(self, storage: Storage) -> None:
        key = RSAKey.import_key(json.loads(storage.stored_once(KEY_NAME, new_key)))
        self._private = KeySet([key])
        self._public = KeySet([RSAKey.import_key(key.as_dict(private=False))])

    def keys(self, refresh: bool) -> KeySet:
        return self._public  # nothing newer to fetch: the key never changes under a running process

    def signing(self) -> KeySet:
        return self._private

    def jwks(self) -> dict[str, Any]:
        return dict(self._public.as_dict(private=False))
