"""The embedded authorization server's state, in SQLite under MCPGATE_STATE_DIR: it survives a restart and is
shared by every gunicorn worker on the host.

Nothing a bearer could replay is stored in the clear: client secrets, authorization codes and refresh tokens are
kept as SHA-256 fingerprints (they are long random strings, so a fingerprint is as good as a slow hash).

The interface the sign-in pages (signin.py) use:

    storage.consented(subject: str, client_id: str, scopes: Iterable[str]) -> bool
        # True when `subject` already approved `client_id` for every one of `scopes`
    storage.record_consent(subject: str, client_id: str, scopes: Iterable[str]) -> None
        # remember the approval (the union with what was approved before)
    storage.secret(name: str) -> bytes
        # 32 random bytes made on first use and kept (for example the Flask session key): the same for every
        # worker and after a restart; kept sealed with MCPGATE_STATE_KEY when it is set (sealing.py), as the
        # signing key is (stored_once)

One connection per process, used under a lock (a call never yields to another greenlet inside SQLite), in
autocommit mode; WAL journal and a busy timeout let several workers write. Single-use rules (codes, refresh
tokens) are one conditional UPDATE each, so two workers racing for the same code cannot both win. The records,
the interface and the named secrets (sealed or not) are shared with redis_storage.py: records.py.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from mcpgate.serve.oauth.records import REVOKED_FAMILY_TTL_S, NamedSecrets
from mcpgate.serve.oauth.records import (
    UNUSED_CLIENT_TTL_S as UNUSED_CLIENT_TTL_S,  # re-exported: what both storages share
)
from mcpgate.serve.oauth.records import ClientRecord as ClientRecord
from mcpgate.serve.oauth.records import CodeRecord as CodeRecord
from mcpgate.serve.oauth.records import RefreshRecord as RefreshRecord
from mcpgate.serve.oauth.records import Storage as Storage
from mcpgate.serve.oauth.records import access_binding as access_binding
from mcpgate.serve.oauth.records import fingerprint as fingerprint
from mcpgate.serve.oauth.sealing import Sealer
from mcpgate.serve.private_sqlite import PrivateSqlite

log = logging.getLogger("mcpgate.oauth.storage")

PURGE_EVERY_S = 600.0
DB_NAME = "oauth.sqlite3"

SCHEMA = """
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY, secret_hash TEXT, metadata TEXT NOT NULL, issued_at REAL NOT NULL, used_at REAL);
CREATE TABLE IF NOT EXISTS codes (
    code_hash TEXT PRIMARY KEY, client_id TEXT NOT NULL, redirect_uri TEXT NOT NULL, scope TEXT NOT NULL,
    subject TEXT NOT NULL, resource TEXT NOT NULL, challenge TEXT NOT NULL, challenge_method TEXT NOT NULL,
    expires_at REAL NOT NULL, family TEXT NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS families (
    family TEXT PRIMARY KEY, revoked INTEGER NOT NULL DEFAULT 0, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS refresh_tokens (
    token_hash TEXT PRIMARY KEY, family TEXT NOT NULL, client_id TEXT NOT NULL, subject TEXT NOT NULL,
    scope TEXT NOT NULL, expires_at REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS access_tokens (
    jti TEXT PRIMARY KEY, family TEXT, expires_at REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0, binding TEXT);
CREATE INDEX IF NOT EXISTS access_family ON access_tokens (family);
CREATE TABLE IF NOT EXISTS consents (
    subject TEXT NOT NULL, client_id TEXT NOT NULL, scopes TEXT NOT NULL, PRIMARY KEY (subject, client_id));
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL);
"""


class SqliteStorage(PrivateSqlite, NamedSecrets):
    """Storage in one SQLite file: the directory is made 0700, the file 0600 (serve/private_sqlite.py)."""

    def __init__(self, directory: str, sealer: Sealer | None = None) -> None:
        super().__init__(directory, DB_NAME)
        self.sealer = sealer  # MCPGATE_STATE_KEY's: the secrets table is sealed with it (sealing.py)
        self._purged = 0.0
        with self._db() as db:
            db.executescript(SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(access_tokens)")}
            if "binding" not in columns:  # a state made before jti rows were bound: their tokens are refused
                db.execute("ALTER TABLE access_tokens ADD COLUMN binding TEXT")

    # -- named secrets and keys -------------------------------------------------------------------------------

    def _stored_once(self, name: str, make: Callable[[], bytes]) -> bytes:
        with self._db() as db:
            row = db.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
            if row is None:
                db.execute("INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)", (name, make()))
                row = db.execute("SELECT value FROM secrets WHERE name = ?", (name,)).fetchone()
        return bytes(row[0])

    def _replace_stored(self, name: str, seen: bytes, value: bytes) -> None:
        with self._db() as db:
            db.execute("UPDATE secrets SET value = ? WHERE name = ? AND value = ?", (value, name, seen))

    # -- consents ---------------------------------------------------------------------------------------------

    def consented(self, subject: str, client_id: str, scopes: Iterable[str]) -> bool:
        with self._db() as db:
            row = db.execute(
                "SELECT scopes FROM consents WHERE subject = ? AND client_id = ?", (subject, client_id)
            ).fetchone()
        return row is not None and set(scopes) <= set(json.loads(row[0]))

    def record_consent(self, subject: str, client_id: str, scopes: Iterable[str]) -> None:
        with self._transaction() as db:
            row = db.execute(
                "SELECT scopes FROM consents WHERE subject = ? AND client_id = ?", (subject, client_id)
            ).fetchone()
            union = sorted(set(scopes) | set(json.loads(row[0]) if row else ()))
            db.execute(
                "INSERT OR REPLACE INTO consents (subject, client_id, scopes) VALUES (?, ?, ?)",
                (subject, client_id, json.dumps(union)),
            )

    # -- clients ----------------------------------------------------------------------------------------------

    def add_client(
        self,
        client_id: str,
        secret: str | None,
        metadata: dict[str, Any],
        limit: int,
        unused_ttl: float = UNUSED_CLIENT_TTL_S,
    ) -> bool:
        """Store a registration. Anyone may register, so the table stays bounded without locking anyone out:
        registrations that never got a code are forgotten after `unused_ttl` seconds, and with `limit` clients
        kept the oldest never used makes room. False (nothing stored) only when every client kept was used."""
        now = time.time()
        with self._transaction() as db:
            db.execute("DELETE FROM clients WHERE used_at IS NULL AND issued_at < ?", (now - unused_ttl,))
            excess = db.execute("SELECT COUNT(*) FROM clients").fetchone()[0] + 1 - limit
            if excess > 0:
                db.execute(
                    "DELETE FROM clients WHERE client_id IN "
                    "(SELECT client_id FROM clients WHERE used_at IS NULL ORDER BY issued_at LIMIT ?)",
                    (excess,),
                )
                if db.execute("SELECT COUNT(*) FROM clients").fetchone()[0] >= limit:
                    return False
            db.execute(
                "INSERT INTO clients (client_id, secret_hash, metadata, issued_at) VALUES (?, ?, ?, ?)",
                (client_id, fingerprint(secret) if secret else None, json.dumps(metadata), now),
            )
        return True

    def client(self, client_id: str) -> ClientRecord | None:
        with self._db() as db:
            row = db.execute(
                "SELECT secret_hash, metadata, used_at FROM clients WHERE client_id = ?", (client_id,)
            ).fetchone()
        return None if row is None else ClientRecord(client_id, row[0], json.loads(row[1]), row[2] is not None)

    # -- authorization codes ----------------------------------------------------------------------------------

    def add_code(self, code: str, record: CodeRecord) -> None:
        self._purge()
        with self._transaction() as db:
            db.execute("UPDATE clients SET used_at = ? WHERE client_id = ?", (time.time(), record.client_id))
            db.execute(
                "INSERT INTO codes (code_hash, client_id, redirect_uri, scope, subject, resource, challenge, "
                "challenge_method, expires_at, family) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    fingerprint(code),
                    record.client_id,
                    record.redirect_uri,
                    record.scope,
                    record.subject,
                    record.resource,
                    record.challenge,
                    record.challenge_method,
                    record.expires_at,
                    record.family,
                ),
            )

    def claim_code(self, code: str) -> CodeRecord | None:
        """The code's grant, marked used; None when unknown, expired or used before. A second use revokes
        the tokens the first one produced (RFC 6749 4.1.2)."""
        digest = fingerprint(code)
        with self._transaction() as db:
            row = db.execute(
                "SELECT client_id, redirect_uri, scope, subject, resource, challenge, challenge_method, "
                "expires_at, family, used FROM codes WHERE code_hash = ?",
                (digest,),
            ).fetchone()
            if row is None:
                return None
            record = CodeRecord(*row[:9])
            if row[9]:
                self._revoke_family(db, record.family)
                return None
            db.execute("UPDATE codes SET used = 1 WHERE code_hash = ?", (digest,))
        return record if record.expires_at > time.time() else None

    # -- refresh tokens (rotated; a reused one revokes its family) --------------------------------------------

    def add_refresh(self, token: str, record: RefreshRecord) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO families (family, expires_at) VALUES (?, ?)",
                (record.family, record.expires_at),
            )
            db.execute(
                "UPDATE families SET expires_at = MAX(expires_at, ?) WHERE family = ?",
                (record.expires_at, record.family),
            )
            db.execute(
                "INSERT INTO refresh_tokens (token_hash, family, client_id, subject, scope, expires_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (fingerprint(token), record.family, record.client_id, record.subject, record.scope, record.expires_at),
            )

    def _refresh_row(self, db: sqlite3.Connection, digest: str) -> tuple[RefreshRecord, bool, bool] | None:
        row = db.execute(
            "SELECT r.family, r.client_id, r.subject, r.scope, r.expires_at, r.used, f.revoked "
            "FROM refresh_tokens r JOIN families f ON f.family = r.family WHERE r.token_hash = ?",
            (digest,),
        ).fetchone()
        return None if row is None else (RefreshRecord(*row[:5]), bool(row[5]), bool(row[6]))

    def refresh_record(self, token: str) -> RefreshRecord | None:
        """The live (unused, unrevoked, unexpired) refresh token's record, left unspent."""
        with self._db() as db:
            found = self._refresh_row(db, fingerprint(token))
        if found is None or found[1] or found[2] or found[0].expires_at <= time.time():
            return None
        return found[0]

    def claim_refresh(self, token: str) -> RefreshRecord | None:
        """The refresh token's record, spent (rotation); None when unknown, expired or revoked. Spending one a
        second time revokes its whole family and the family's access tokens."""
        digest = fingerprint(token)
        with self._transaction() as db:
            found = self._refresh_row(db, digest)
            if found is None:
                return None
            record, used, revoked = found
            if used:
                self._revoke_family(db, record.family)
                return None
            if revoked or record.expires_at <= time.time():
                return None
            db.execute("UPDATE refresh_tokens SET used = 1 WHERE token_hash = ?", (digest,))
        return record

    # -- access tokens (JWTs: only their jti, to revoke them) -------------------------------------------------

    def add_access(self, jti: str, family: str | None, expires_at: float, binding: str = "") -> None:
        with self._db() as db:
            db.execute(
                "INSERT INTO access_tokens (jti, family, expires_at, binding) VALUES (?, ?, ?, ?)",
                (jti, family, expires_at, binding),
            )

    def access_revoked(self, jti: str, binding: str = "") -> bool:
        """True unless `jti` names an access token issued here with this `binding` (access_binding of its
        claims) and neither it nor its family was revoked."""
        with self._db() as db:
            row = db.execute(
                "SELECT a.revoked, COALESCE(f.revoked, 0), a.binding FROM access_tokens a "
                "LEFT JOIN families f ON f.family = a.family WHERE a.jti = ?",
                (jti,),
            ).fetchone()
        return row is None or bool(row[0]) or bool(row[1]) or row[2] != binding

    def revoke_access(self, jti: str) -> None:
        with self._db() as db:
            db.execute("UPDATE access_tokens SET revoked = 1 WHERE jti = ?", (jti,))

    def revoke_family(self, family: str) -> None:
        with self._transaction() as db:
            self._revoke_family(db, family)

    @staticmethod
    def _revoke_family(db: sqlite3.Connection, family: str) -> None:
        # the family row may not exist yet (a code reused while its first exchange is under way): made revoked
        db.execute(
            "INSERT INTO families (family, revoked, expires_at) VALUES (?, 1, ?) "
            "ON CONFLICT (family) DO UPDATE SET revoked = 1",
            (family, time.time() + REVOKED_FAMILY_TTL_S),
        )

    # -- housekeeping -----------------------------------------------------------------------------------------

    def _purge(self) -> None:
        """Forget what has expired (at most every PURGE_EVERY_S): used codes are kept until they expire, and
        a revoked family until its last token would have."""
        now = time.time()
        if now - self._purged < PURGE_EVERY_S:
            return
        self._purged = now
        with self._transaction() as db:
            db.execute("DELETE FROM codes WHERE expires_at < ?", (now,))
            db.execute("DELETE FROM refresh_tokens WHERE expires_at < ?", (now,))
            db.execute("DELETE FROM access_tokens WHERE expires_at < ?", (now,))
            db.execute(
                "DELETE FROM families WHERE expires_at < ? AND family NOT IN (SELECT family FROM access_tokens "
                "WHERE family IS NOT NULL) AND family NOT IN (SELECT family FROM codes)",
                (now,),
            )
