"""core/digest.py: SHA-256 without OpenSSL, the same digest as hashlib's; and what a serving worker hashes on its own
(a session's key in the keeper's store, a server's era key) goes through it, never through OpenSSL (issue 24: a
worker's first OpenSSL digest maps ~1 MB of libcrypto)."""

from __future__ import annotations

import hashlib
import importlib.util

import pytest

from mcpgate.core import digest
from mcpgate.serve.modern.pooled_child import verdict_key
from mcpgate.serve.sessions import kept
from mcpgate.serve.sessions.spec import ChildSpec

DATA = [
    pytest.param(b"", id="empty"),
    pytest.param(b"abc", id="abc"),
    pytest.param(b"x" * 55, id="55-bytes: one block with its padding"),
    pytest.param(b"x" * 56, id="56-bytes: the length spills into a second block"),
    pytest.param(b"x" * 64, id="64-bytes: one whole block"),
    pytest.param(bytes(range(256)) * 4, id="every-byte-value"),
    pytest.param(b"\x00" * 1_000_001, id="a-megabyte-of-nul"),
    pytest.param("ünïcødé ☃".encode(), id="utf-8"),
]


@pytest.mark.parametrize("data", DATA)
def test_the_digest_is_hashlibs(data: bytes) -> None:
    assert digest.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_cpythons_own_sha256_is_taken_when_the_interpreter_has_one() -> None:
    own = importlib.util.find_spec("_sha2") or importlib.util.find_spec("_sha256")  # 3.12+, or 3.10 and 3.11
    assert (digest._SHA256 is not hashlib.sha256) == (own is not None)


SPEC = ChildSpec(
    argv=("python", "-m", "server"),
    env={"TOKEN": "secret", "A": "1"},
    cwd="/srv",
    stderr="inherit",
    max_line_bytes=1024,
    max_write_queue_bytes=1024,
    close_timeout=1.0,
    term_timeout=1.0,
)


def _no_openssl(*args: object, **kwargs: object) -> object:
    raise AssertionError("an OpenSSL digest")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(
            lambda: kept.digest_of("a-session-id"),
            lambda: hashlib.sha256(b"a-session-id").hexdigest(),
            id="a-kept-session's-store-key",
        ),
        pytest.param(
            lambda: verdict_key(SPEC),
            lambda: (
                hashlib.sha256(
                    repr((SPEC.argv, SPEC.cwd, sorted((SPEC.env or {}).items()), SPEC.user)).encode()
                ).hexdigest(),
            ),
            id="a-server's-era-key",
        ),
    ],
)
def test_a_serving_hash_is_the_same_and_runs_no_openssl_digest(
    monkeypatch: pytest.MonkeyPatch, value: object, expected: object
) -> None:
    want = expected()  # type: ignore[operator]  # as hashlib.sha256 made it (stores and fleets keep these)
    monkeypatch.setattr(hashlib, "sha256", _no_openssl)
    monkeypatch.setattr(hashlib, "new", _no_openssl)
    assert value() == want  # type: ignore[operator]
