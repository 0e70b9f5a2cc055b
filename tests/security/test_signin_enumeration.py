"""Issue 20, finding 12: an unknown user name was checked against a decoy of werkzeug's default cost (scrypt
32768:8:1), so when the configured users' hashes had another method or cost, the time of a wrong answer told a
configured name from an unknown one. Now every sign-in checks one hash of each cost among the configured users
(the user's own for its cost, a decoy of the same parameters for the others), whatever the name.

Unit-level: the work a check does is observed at hashlib, where werkzeug derives the key (the real derivation
still runs; the spy only records its parameters), so the test counts work instead of timing it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from mcpgate.serve.oauth import passwords, users

PASSWORD = "correct horse battery staple"
# cheap parameters, so the test is quick; what matters is that they differ
ALICE = passwords.make_hash(PASSWORD, "pbkdf2:sha256:2000")
BOB = passwords.make_hash(PASSWORD, "scrypt:1024:8:1")
CAROL = passwords.make_hash(PASSWORD, "scrypt:1024:8:1")


@pytest.fixture
def derivations(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every key derivation werkzeug runs, as its function and parameters (salt and password left out)."""
    seen: list[str] = []
    real_scrypt, real_pbkdf2 = hashlib.scrypt, hashlib.pbkdf2_hmac

    def scrypt(password: bytes, *, salt: bytes, n: int, r: int, p: int, **rest: Any) -> bytes:
        seen.append(f"scrypt:{n}:{r}:{p}")
        return real_scrypt(password, salt=salt, n=n, r=r, p=p, **rest)

    def pbkdf2_hmac(name: str, password: bytes, salt: bytes, iterations: int, *rest: Any) -> bytes:
        seen.append(f"pbkdf2:{name}:{iterations}")
        return real_pbkdf2(name, password, salt, iterations, *rest)

    monkeypatch.setattr(hashlib, "scrypt", scrypt)
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", pbkdf2_hmac)
    yield seen


def work(derivations: list[str], table: users.Users, name: str, password: str) -> list[str]:
    """The key derivations one sign-in attempt runs, sorted."""
    derivations.clear()
    table.subject(name, password)
    return sorted(derivations)


def test_an_unknown_name_costs_what_each_configured_user_costs(derivations: list[str]) -> None:
    table = users.Users(f"alice:{ALICE},bob:{BOB},carol:{CAROL}")
    unknown = work(derivations, table, "mallory", PASSWORD)
    for name in ("alice", "bob", "carol"):
        assert work(derivations, table, name, "wrong") == unknown, name
        assert work(derivations, table, name, PASSWORD) == unknown, name
    assert unknown == ["pbkdf2:sha256:2000", "scrypt:1024:8:1"]  # one check of each configured cost
    assert table.subject("alice", PASSWORD) == "user:alice" and table.subject("bob", PASSWORD) == "user:bob"
    assert table.subject("alice", "wrong") is None and table.subject("mallory", PASSWORD) is None


def test_the_decoys_have_the_configured_users_parameters() -> None:
    table = users.Users(f"alice:{ALICE},bob:{BOB},carol:{CAROL}")
    configured = {passwords.cost(stored) for stored in (ALICE, BOB, CAROL)}
    decoys = {passwords.cost(decoy) for decoy in table.decoys.values()}
    assert decoys == configured == {"pbkdf2:sha256:2000", "scrypt:1024:8:1"}
    single = users.Users(f"alice:{ALICE}")
    assert [passwords.cost(decoy) for decoy in single.decoys.values()] == ["pbkdf2:sha256:2000"]
