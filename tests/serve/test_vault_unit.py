"""The vault's parts without a gateway: the slots of a config entry (a table of entries and their errors), the
cipher (a table of what must not open), the two stores behind one interface (SQLite in a temporary directory, and
a real redis-server), and the vault's lookup and sweep with a stand-in child (no process: what is checked is which
holder is stopped)."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.config.settings import Settings
from mcpgate.config.vault_settings import vault_key
from mcpgate.serve.servers.config_file import ConfigError, ServerEntry, parse
from mcpgate.serve.vault.crypto import CannotOpen, Cipher
from mcpgate.serve.vault.redis_store import RedisVaultStore
from mcpgate.serve.vault.slots import SlotConfigError, split
from mcpgate.serve.vault.store import SqliteVaultStore, VaultStore
from mcpgate.serve.vault.vault import REVOKED, SlotsEmpty, Vault
from tests.support.fleet import redis_server

KEY = os.urandom(32)
DECLARED = {"tok": {"label": "Token", "help": "https://example.com/t"}}

# -- slots -------------------------------------------------------------------------------------------------------

SLOT_ERRORS = [
    ({"env": {"T": {"user_secret": "tok"}}}, "used but not declared"),
    ({"env": {"T": "x"}, "user_secrets": DECLARED}, "used in no env or args"),
    ({"env": {"T": {"user_secret": "Bad-Name"}}, "user_secrets": DECLARED}, "lowercase"),
    ({"env": {"T": {"user_secret": "tok", "x": 1}}, "user_secrets": DECLARED}, "must be a string or"),
    ({"env": {"T": {"user_secret": "tok"}}, "user_secrets": {"tok": {"label": ""}}}, "label"),
    ({"env": {"T": {"user_secret": "tok"}}, "user_secrets": {"tok": {"help": "javascript:x"}}}, "help"),
    ({"args": ["--t=${user_secret:nope}"], "user_secrets": DECLARED}, "nope"),
    ({"env": {"T": {"user_secret": "tok"}}, "user_secrets": {"tok": {"label": "a", "other": 1}}}, "label"),
]


@pytest.mark.parametrize(("raw", "named"), SLOT_ERRORS)
def test_a_malformed_slot_is_an_error_naming_the_entry(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(SlotConfigError, match=named):
        split({"command": "x", **raw}, "MCPGATE_CONFIG: server 'gh'")


def test_slots_fill_env_and_args_and_the_config_file_keeps_them_apart() -> None:
    raw = {
        "command": "srv",
        "args": ["--user=${user_secret:tok}@${user_secret:org}", "plain"],
        "env": {"A": "b", "T": {"user_secret": "tok"}},
        "user_secrets": {**DECLARED, "org": {"label": "Org"}},
    }
    (entry,) = parse(json.dumps({"mcpServers": {"gh": raw}})).servers
    assert entry.env == {"A": "b"} and entry.slots is not None
    assert entry.slots.names == ("org", "tok")
    argv, env = entry.slots.fill(entry.argv, entry.env, {"tok": "T0K", "org": "acme"})
    assert argv == ["srv", "--user=T0K@acme", "plain"] and env == {"A": "b", "T": "T0K"}
    with pytest.raises(ConfigError, match="string"):  # a plain env value must still be a string
        parse('{"mcpServers": {"gh": {"command": "x", "env": {"A": 1}}}}')


def test_the_key_setting_takes_base64_of_32_bytes_only() -> None:
    assert vault_key("") is None and vault_key(base64.b64encode(KEY).decode()) is None
    for bad in ("short", base64.b64encode(os.urandom(16)).decode(), "!" * 44):
        assert vault_key(bad) is not None and bad not in str(vault_key(bad))


# -- the cipher ----------------------------------------------------------------------------------------------------

SEALED = Cipher(KEY).seal("iss#alice", "tok", b"alice's token")
DOES_NOT_OPEN = [
    ("another key", Cipher(os.urandom(32)), "iss#alice", "tok", SEALED),
    ("another principal", Cipher(KEY), "iss#bob", "tok", SEALED),
    ("another slot", Cipher(KEY), "iss#alice", "other", SEALED),
    ("a flipped bit", Cipher(KEY), "iss#alice", "tok", SEALED[:-1] + bytes([SEALED[-1] ^ 1])),
    ("truncated", Cipher(KEY), "iss#alice", "tok", SEALED[:20]),
    ("not sealed", Cipher(KEY), "iss#alice", "tok", b"alice's token"),
    ("a name shifted across the boundary", Cipher(KEY), "iss#alicet", "ok", SEALED),
]


@pytest.mark.parametrize(
    ("what", "cipher", "principal", "slot", "sealed"), DOES_NOT_OPEN, ids=[row[0] for row in DOES_NOT_OPEN]
)
def test_a_sealed_value_opens_only_for_its_key_principal_and_slot(
    what: str, cipher: Cipher, principal: str, slot: str, sealed: bytes
) -> None:
    assert Cipher(KEY).open("iss#alice", "tok", SEALED) == b"alice's token"
    with pytest.raises(CannotOpen):
        cipher.open(principal, slot, sealed)


def test_the_key_check_record_tells_the_right_key_from_a_wrong_one() -> None:
    record = Cipher(KEY).check_record()
    assert Cipher(KEY).check(record) and not Cipher(os.urandom(32)).check(record)
    assert b"token" not in SEALED and "hidden" in repr(Cipher(KEY))


# -- the stores (one table of steps, run on both) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VaultStore]:
    if request.param == "sqlite":
        yield SqliteVaultStore(str(tmp_path / "state"))
    else:
        from mcpgate.serve.cluster.redis_client import connect

        client = connect(request.getfixturevalue("redis_url"))
        client.flushdb()
        yield RedisVaultStore(client)
        client.close()


def test_a_store_keeps_versions_bounds_slots_and_makes_the_check_record_once(store: VaultStore) -> None:
    first = store.check_once(lambda: b"first")
    assert first == b"first" and store.check_once(lambda: b"second") == b"first"
    g0 = store.generation()
    assert store.put("p1", "a", b"v1", limit=2) and store.put("p1", "b", b"v2", limit=2)
    assert not store.put("p1", "c", b"v3", limit=2), "a third slot past the limit"
    assert store.put("p1", "a", b"v1b", limit=2), "replacing one is always allowed"
    listing = store.listing("p1")
    assert set(listing) == {"a", "b"} and listing["a"].version > listing["b"].version > g0
    assert store.get("p1", "a") == b"v1b" and store.get("p2", "a") is None and store.listing("p2") == {}
    g1 = store.generation()
    assert store.delete("p1", "a") and not store.delete("p1", "a")
    assert store.generation() == g1 + 1 and set(store.listing("p1")) == {"b"}


def test_a_store_summarizes_each_slot_across_principals_bounded(store: VaultStore) -> None:
    """GET /admin/vault's counts (serve/admin/vault.py): per slot, how many principals and first/last set."""
    assert store.summary(10) == ({}, True)
    for principal in ("p1", "p2", "p3"):
        assert store.put(principal, "a", b"sealed-" + principal.encode(), limit=4)
    assert store.put("p2", "b", b"sealed-b", limit=4)
    found, complete = store.summary(10)
    assert complete and set(found) == {"a", "b"} and (found["a"].principals, found["b"].principals) == (3, 1)
    assert found["a"].first_set <= found["a"].last_set
    assert not store.summary(1)[1], "past the bound the counts say they are incomplete"


def test_the_sqlite_store_is_private(tmp_path: Path) -> None:
    store = SqliteVaultStore(str(tmp_path / "state"))
    store.put("p", "a", b"x", limit=1)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700


# -- the vault: lookup, holders, sweep ------------------------------------------------------------------------------


class Held:
    """A stand-in child: what the vault reads and calls on one."""

    def __init__(self, label: str) -> None:
        self.label, self.alive, self.closed = label, True, ""

    def close(self, reason: str, cause: str = "stopped") -> None:
        self.alive, self.closed = False, f"{cause}: {reason}"


def gh_with_one_slot(tmp_path: Path) -> tuple[Vault, ServerEntry]:
    """A vault in `tmp_path` (SQLite, KEY) and a server entry "gh" whose env T is the user secret "tok"."""
    settings = Settings(public_url="https://gw.example", vault_key=base64.b64encode(KEY).decode())
    vault = Vault(SqliteVaultStore(str(tmp_path)), Cipher(KEY), settings)
    (entry,) = parse(
        '{"mcpServers": {"gh": {"command": "x", "env": {"T": {"user_secret": "tok"}}, '
        '"user_secrets": {"tok": {"label": "Token"}}}}}'
    ).servers
    return vault, entry


def test_the_vault_fills_only_the_asking_principal_and_sweeps_only_changed_holders(tmp_path: Path) -> None:
    vault, entry = gh_with_one_slot(tmp_path)
    assert entry.slots is not None
    with pytest.raises(SlotsEmpty, match=re.escape("https://gw.example/vault")) as empty:
        vault.fill("iss#alice", entry.slots, entry.argv, entry.env)
    assert empty.value.url == "https://gw.example/vault"
    vault.put("iss#alice", "tok", "A-1")
    vault.put("iss#bob", "tok", "B-1")
    _argv, env, stamp_a = vault.fill("iss#alice", entry.slots, entry.argv, entry.env)
    _argv, env_b, stamp_b = vault.fill("iss#bob", entry.slots, entry.argv, entry.env)
    assert env == {"T": "A-1"} and env_b == {"T": "B-1"}
    alice, bob = Held("a"), Held("b")
    vault.hold("iss#alice", alice, stamp_a)
    vault.hold("iss#bob", bob, stamp_b)
    vault.put("iss#bob", "tok", "B-2")  # bob's holder goes, alice's stays
    assert bob.closed == f"{REVOKED}: the credential slot 'tok' was changed by its owner" and alice.alive
    vault.delete("iss#alice", "tok")
    assert alice.closed.endswith("deleted by its owner")


def test_without_oauth_the_values_come_from_the_operators_environment() -> None:
    vault = Vault(None, None, Settings(), environ={"USER_SECRET_TOK": "from-env"})
    (entry,) = parse(
        '{"mcpServers": {"gh": {"command": "x", "args": ["${user_secret:tok}"], "user_secrets": {"tok": {}}}}}'
    ).servers
    assert entry.slots is not None
    assert vault.fill("static", entry.slots, entry.argv, entry.env)[0] == ["x", "from-env"]
    with pytest.raises(SlotsEmpty, match="USER_SECRET_TOK") as empty:
        Vault(None, None, Settings(), environ={}).fill("static", entry.slots, entry.argv, entry.env)
    assert empty.value.url is None
