"""SHA-256 of the short values a serving worker hashes on its own (a session id's key in the keeper's store, a
server's command as the key of its remembered era), computed by CPython's own SHA-256 module when the interpreter
has one, else by hashlib's.

The digest is the same either way; the difference is memory. hashlib.sha256 is OpenSSL's, and a process's first
digest through OpenSSL runs code spread over libcrypto, whose pages the kernel then maps 64 KB at a time: about
1 MB of every gunicorn worker's RSS (which the master's pages of libcrypto do not spare: a forked process maps
a shared library's code again as it runs it). With sessions hashed here, an idle worker runs no OpenSSL digest at
all (bench/imports.py; issue 24). CPython's module is `_sha256` up to 3.11 and `_sha2` from 3.12.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from typing import Any


def _own_sha256() -> Callable[[bytes], Any]:
    """CPython's SHA-256 constructor, or hashlib's where this interpreter has none of its own."""
    for name in ("_sha2", "_sha256"):
        try:
            return importlib.import_module(name).sha256  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return hashlib.sha256


_SHA256 = _own_sha256()


def sha256_hex(data: bytes) -> str:
    """hashlib.sha256(data).hexdigest(), without OpenSSL where the interpreter allows."""
    return str(_SHA256(data).hexdigest())
