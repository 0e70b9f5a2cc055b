"""One private SQLite file of the gateway's state (the OAuth storage's, the vault's): the one way they are opened.

The directory (MCPGATE_STATE_DIR, else the default state directory) is made 0700 when missing, with a warning when
it is readable by others; the file is made 0600 and narrowed to 0600 when an older one is wider. One connection
per process, opened on first use and again in a forked worker, used under a lock, autocommit, WAL; `_transaction`
is BEGIN IMMEDIATE … COMMIT, rolled back on any exception. sqlite3 is imported on the first connection, so a
worker that never opens one does not load it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from mcpgate.config.paths import default_state_dir

if TYPE_CHECKING:
    import sqlite3

log = logging.getLogger("mcpgate.state")

BUSY_TIMEOUT_S = 10.0  # how long a write waits for another process's


class PrivateSqlite:
    """A SQLite file named `name` in `directory` (see the module docstring); subclasses hold the schema."""

    def __init__(self, directory: str, name: str) -> None:
        self.path = Path(directory or default_state_dir()) / name
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.path.parent.stat().st_mode & 0o077:
            log.warning("%s is readable by other users: make it private (chmod 700)", self.path.parent)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def _connect(self) -> sqlite3.Connection:
        import sqlite3

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an older file made wider (by hand, or a umask) is narrowed
        finally:
            os.close(fd)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None or self._pid != os.getpid():  # a forked worker opens its own
                self._conn, self._pid = self._connect(), os.getpid()
            yield self._conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._db() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
