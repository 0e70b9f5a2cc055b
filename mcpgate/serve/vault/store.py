"""Where the vault keeps sealed values: SQLite under MCPGATE_STATE_DIR (vault.sqlite3, the directory 0700, the file
0600, as the OAuth state), or Redis when REDIS_URL is set (redis_store.py). One interface:

    store.check_once(make) -> bytes          the key check record: made once (the first start), then read back
    store.get(principal, slot) -> bytes | None            the sealed value
    store.put(principal, slot, sealed, limit) -> bool     False (nothing stored) when the principal already has
                                                          `limit` slots and this is a new one
    store.delete(principal, slot) -> bool                 whether there was one
    store.listing(principal) -> dict[slot, Entry]         which slots are set, when, at which version (no value)
    store.generation() -> int                             raised by every put and delete, anywhere: a worker that
                                                          sees it move reads its holders' versions again
    store.lease(principal, name, holder, ttl) -> bool     a short lease, one holder at a time (True: `holder` took
                                                          it; False: another has it); it lapses after `ttl`
                                                          seconds, so a holder that died does not block
    store.release(principal, name, holder)                the lease ends, if `holder` still has it
    store.summary(limit) -> (dict[slot, SlotSummary], complete)   per slot: how many principals set it, first and
                                                          last set, from at most `limit` principals (the
                                                          management API's; no value, no principal)

Every put and delete takes a new generation as the row's version, in one transaction, so a child's stamp (the
versions of the slots it was given) differs from the listing as soon as any of them changed or went.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mcpgate.serve.private_sqlite import PrivateSqlite

if TYPE_CHECKING:
    import sqlite3  # imported when a store connects: a worker without the vault does not load SQLite

log = logging.getLogger("mcpgate.vault")

DB_NAME = "vault.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS slots (
    principal TEXT NOT NULL, slot TEXT NOT NULL, value BLOB NOT NULL, version INTEGER NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (principal, slot));
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    principal TEXT NOT NULL, name TEXT NOT NULL, holder TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (principal, name));
INSERT OR IGNORE INTO meta (name, value) VALUES ('generation', 0);
"""


@dataclass(frozen=True)
class Entry:
    """A slot that is set: when, and its version (what a child's stamp holds)."""

    updated_at: float
    version: int


@dataclass(frozen=True)
class SlotSummary:
    """A slot across principals: how many have it set, the oldest and the newest of their values' times."""

    principals: int
    first_set: float
    last_set: float

    def add(self, updated_at: float) -> SlotSummary:
        return SlotSummary(self.principals + 1, min(self.first_set, updated_at), max(self.last_set, updated_at))


class VaultStore(Protocol):
    def check_once(self, make: Callable[[], bytes]) -> bytes: ...
    def get(self, principal: str, slot: str) -> bytes | None: ...
    def put(self, principal: str, slot: str, sealed: bytes, limit: int) -> bool: ...
    def delete(self, principal: str, slot: str) -> bool: ...
    def listing(self, principal: str) -> dict[str, Entry]: ...
    def generation(self) -> int: ...
    def summary(self, limit: int) -> tuple[dict[str, SlotSummary], bool]: ...
    def lease(self, principal: str, name: str, holder: str, ttl: float) -> bool: ...
    def release(self, principal: str, name: str, holder: str) -> None: ...


class SqliteVaultStore(PrivateSqlite):
    """The vault in one SQLite file (serve/private_sqlite.py: 0600 in a 0700 directory, one connection per
    process, used under a lock, autocommit, WAL)."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, DB_NAME)
        with self._db() as db:
            db.executescript(SCHEMA)

    @staticmethod
    def _next_generation(db: sqlite3.Connection) -> int:
        db.execute("UPDATE meta SET value = value + 1 WHERE name = 'generation'")
        return int(db.execute("SELECT value FROM meta WHERE name = 'generation'").fetchone()[0])

    def check_once(self, make: Callable[[], bytes]) -> bytes:
        with self._db() as db:
            db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('check', ?)", (make(),))
            return bytes(db.execute("SELECT value FROM meta WHERE name = 'check'").fetchone()[0])

    def get(self, principal: str, slot: str) -> bytes | None:
        with self._db() as db:
            row = db.execute("SELECT value FROM slots WHERE principal = ? AND slot = ?", (principal, slot)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, principal: str, slot: str, sealed: bytes, limit: int) -> bool:
        with self._transaction() as db:
            known = db.execute("SELECT 1 FROM slots WHERE principal = ? AND slot = ?", (principal, slot)).fetchone()
            count = db.execute("SELECT COUNT(*) FROM slots WHERE principal = ?", (principal,)).fetchone()[0]
            if known is None and count >= limit:
                return False
            version = self._next_generation(db)
            db.execute(
                "INSERT OR REPLACE INTO slots (principal, slot, value, version, updated_at) VALUES (?, ?, ?, ?, ?)",
                (principal, slot, sealed, version, time.time()),
            )
        return True

    def delete(self, principal: str, slot: str) -> bool:
        with self._transaction() as db:
            gone = db.execute("DELETE FROM slots WHERE principal = ? AND slot = ?", (principal, slot)).rowcount
            if gone:
                self._next_generation(db)
        return bool(gone)

    def listing(self, principal: str) -> dict[str, Entry]:
        with self._db() as db:
            rows = db.execute(
                "SELECT slot, updated_at, version FROM slots WHERE principal = ?", (principal,)
            ).fetchall()
        return {slot: Entry(updated_at, version) for slot, updated_at, version in rows}

    def generation(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT value FROM meta WHERE name = 'generation'").fetchone()[0])

    def lease(self, principal: str, name: str, holder: str, ttl: float) -> bool:
        """Take the lease `name` of `principal` for `holder`, unless another holder's has not lapsed;
        one transaction (BEGIN IMMEDIATE), so of the workers sharing the file one wins."""
        now = time.time()
        with self._transaction() as db:
            row = db.execute(
                "SELECT holder, expires_at FROM leases WHERE principal = ? AND name = ?", (principal, name)
            ).fetchone()
            if row is not None and row[0] != holder and row[1] > now:
                return False
            db.execute(
                "INSERT OR REPLACE INTO leases (principal, name, holder, expires_at) VALUES (?, ?, ?, ?)",
                (principal, name, holder, now + ttl),
            )
        return True

    def release(self, principal: str, name: str, holder: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM leases WHERE principal = ? AND name = ? AND holder = ?", (principal, name, holder))

    def summary(self, limit: int) -> tuple[dict[str, SlotSummary], bool]:
        """Per slot: its principals, first and last set, from at most `limit` principals; complete or not."""
        with self._db() as db:
            rows = db.execute(
                "SELECT slot, COUNT(*), MIN(updated_at), MAX(updated_at) FROM slots WHERE principal IN "
                "(SELECT DISTINCT principal FROM slots LIMIT ?) GROUP BY slot",
                (limit,),
            ).fetchall()
            principals = db.execute("SELECT COUNT(DISTINCT principal) FROM slots").fetchone()[0]
        return {slot: SlotSummary(count, first, last) for slot, count, first, last in rows}, principals <= limit
